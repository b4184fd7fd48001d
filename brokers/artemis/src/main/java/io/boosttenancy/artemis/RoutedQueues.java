/*
 * boost-tenancy: which shared queues the plugin routes. Either the queues listed (exact names),
 * or, with queues="*", every queue with a shared queue name outside the toolkit's and the
 * broker's namespaces, except those declared shared (exact names, or a prefix ending in ".*"):
 * what the toolkit's own default routing says (every queue routed unless declared shared).
 */
package io.boosttenancy.artemis;

import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

final class RoutedQueues {

    /** queues="*": every queue with a shared queue name, except the shared ones. */
    static final String EVERY_QUEUE = "*";
    /** The queues the toolkit itself reads by their own names (its management replies). */
    static final String TOOLKIT_PREFIX = "boost.";
    static final int DECIDED_MAX = 10_000;

    private final Set<String> listed;
    private final boolean every;
    private final Set<String> shared;
    private final Set<String> sharedPrefixes;
    private final Map<String, Boolean> decided = new ConcurrentHashMap<>();

    private RoutedQueues(Set<String> listed, boolean every, Set<String> shared, Set<String> prefixes) {
        this.listed = listed;
        this.every = every;
        this.shared = shared;
        this.sharedPrefixes = prefixes;
    }

    /** The routed queues of the plugin's queues and shared properties; a name that is not a
     * shared queue name, or a queue both listed and shared, is refused, naming it. */
    static RoutedQueues parse(String queues, String sharedNames) {
        String value = queues == null ? "" : queues.trim();
        boolean every = EVERY_QUEUE.equals(value);
        Set<String> listed = every ? Collections.emptySet() : TenantNames.parseQueues(value);
        Set<String> exact = new LinkedHashSet<>();
        Set<String> prefixes = new LinkedHashSet<>();
        for (String part : (sharedNames == null ? "" : sharedNames).split(",")) {
            String name = part.trim();
            if (name.isEmpty()) {
                continue;
            }
            if (name.endsWith(".*")) {
                // Checked as a queue it would cover: "tenant.acme.*" covers tenant queues.
                TenantNames.parseQueues(name.substring(0, name.length() - 1) + "x");
                prefixes.add(name.substring(0, name.length() - 1));
            } else {
                exact.addAll(TenantNames.parseQueues(name));
            }
        }
        Set<String> both = new LinkedHashSet<>(listed);
        both.retainAll(exact);
        if (!both.isEmpty()) {
            throw new IllegalArgumentException("boost-tenancy tenant plugin: "
                + String.join(",", both) + " is both routed (queues) and shared");
        }
        return new RoutedQueues(listed, every, Collections.unmodifiableSet(exact),
            Collections.unmodifiableSet(prefixes));
    }

    boolean every() {
        return every;
    }

    Set<String> listed() {
        return listed;
    }

    /** What the plugin's log says it routes. */
    String describe() {
        if (!every) {
            return listed.isEmpty() ? "no queue" : String.join(",", listed);
        }
        Set<String> all = new LinkedHashSet<>(shared);
        for (String prefix : sharedPrefixes) {
            all.add(prefix + "*");
        }
        return "every queue" + (all.isEmpty() ? "" : " except the shared " + String.join(",", all));
    }

    /** Whether messages sent to address are routed; asked for every send, so the answer per
     * name is remembered (a bounded number of names). */
    boolean routes(String address) {
        if (!every) {
            return listed.contains(address);
        }
        Boolean known = decided.get(address);
        if (known != null) {
            return known;
        }
        boolean answer = decide(address);
        if (decided.size() >= DECIDED_MAX) {
            decided.clear();
        }
        decided.put(address, answer);
        return answer;
    }

    private boolean decide(String address) {
        if (shared.contains(address)
                || address.startsWith(TOOLKIT_PREFIX)
                || address.length() > TenantNames.MAX_QUEUE
                || !TenantNames.QUEUE.matcher(address).matches()
                || TenantNames.reserved(address)) {
            return false;
        }
        for (String prefix : sharedPrefixes) {
            if (address.startsWith(prefix)) {
                return false;
            }
        }
        return true;
    }

    /** The tenant of tenant.&lt;tenant&gt;.&lt;queue&gt; when queue is routed; else null. */
    String tenantOfQueue(String address) {
        if (!address.startsWith(TenantNames.TENANT_PREFIX)) {
            return null;
        }
        int dot = address.indexOf('.', TenantNames.TENANT_PREFIX.length());
        if (dot < 0) {
            return null;
        }
        String tenant = address.substring(TenantNames.TENANT_PREFIX.length(), dot);
        return TenantNames.isTenant(tenant) && routes(address.substring(dot + 1)) ? tenant : null;
    }
}
