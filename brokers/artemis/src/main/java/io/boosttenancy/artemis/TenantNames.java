/*
 * boost-tenancy: the toolkit's names, as the broker plugin checks them. The same grammar as the
 * Python side (boost_tenancy/tenancy.py, boost_tenancy/messages.py) and the Classic plugin
 * (brokers/classic); tests/unit/test_artemis_plugin.py runs the same vectors through all three.
 */
package io.boosttenancy.artemis;

import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.Set;
import java.util.regex.Pattern;

public final class TenantNames {

    /** The message property that names a message's tenant. */
    public static final String TENANT_PROPERTY = "tenantUUID";
    /** 1 to 64 of [A-Za-z0-9_-], starting and ending with a letter or digit: no dot, no quote,
     * no wildcard, nothing an address or a filter could break on. */
    static final Pattern TENANT = Pattern.compile("[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?");
    /** The toolkit's queue names. */
    static final Pattern QUEUE = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._-]{0,199}");
    /** The longest shared queue whose derived queues fit in 200 characters for every tenant. */
    static final int MAX_QUEUE = 113;
    static final String TENANT_PREFIX = "tenant.";
    static final String PARKED_PREFIX = "parked.";
    static final String DLQ_PREFIX = "DLQ.";
    static final String QUARANTINE_SUFFIX = ".quarantine";

    private TenantNames() {
    }

    /** Whether value is a valid tenant id. */
    public static boolean isTenant(Object value) {
        return value instanceof String && TENANT.matcher((String) value).matches();
    }

    /** tenant.&lt;tenant&gt;.&lt;queue&gt;: the queue of one tenant's messages of a shared queue. */
    public static String tenantQueue(String tenant, String queue) {
        return TENANT_PREFIX + tenant + "." + queue;
    }

    /** The tenant of tenant.&lt;tenant&gt;.&lt;queue&gt; when queue is one of listed; else null. */
    public static String tenantOfQueue(String address, Set<String> listed) {
        if (!address.startsWith(TENANT_PREFIX)) {
            return null;
        }
        int dot = address.indexOf('.', TENANT_PREFIX.length());
        if (dot < 0) {
            return null;
        }
        String tenant = address.substring(TENANT_PREFIX.length(), dot);
        return isTenant(tenant) && listed.contains(address.substring(dot + 1)) ? tenant : null;
    }

    /** DLQ.&lt;queue&gt;.quarantine: where a message without a valid tenant goes. */
    public static String quarantine(String queue) {
        return DLQ_PREFIX + queue + QUARANTINE_SUFFIX;
    }

    /** The routed shared queues of a comma-separated list: exact names, no wildcard, none in the
     * toolkit's or the broker's own namespaces; anything else is refused, naming it. */
    public static Set<String> parseQueues(String names) {
        Set<String> parsed = new LinkedHashSet<>();
        for (String part : (names == null ? "" : names).split(",")) {
            String name = part.trim();
            if (name.isEmpty()) {
                continue;
            }
            if (!QUEUE.matcher(name).matches() || name.length() > MAX_QUEUE || reserved(name)) {
                throw new IllegalArgumentException(
                    "boost-tenancy tenant plugin: " + name + " is not a shared queue name"
                    + " (1-" + MAX_QUEUE + " of A-Z a-z 0-9 . _ -, no wildcard; not tenant.*,"
                    + " parked.*, DLQ.*, *.quarantine, nor the broker's activemq.*, DLA,"
                    + " ExpiryQueue, BROKER.DLQ.* or EXP.*)");
            }
            parsed.add(name);
        }
        return Collections.unmodifiableSet(parsed);
    }

    /** Whether name is in one of the toolkit's own namespaces or the broker's (never shared). */
    static boolean reserved(String name) {
        return name.startsWith("activemq.")
            || name.startsWith("ActiveMQ.")
            || name.startsWith("$sys.")
            || name.startsWith("BROKER.DLQ.")
            || name.startsWith("EXP.")
            || name.equals("DLA")
            || name.equals("ExpiryQueue")
            || name.startsWith(DLQ_PREFIX)
            || name.endsWith(QUARANTINE_SUFFIX)
            || tenantPrefixed(name, TENANT_PREFIX)
            || tenantPrefixed(name, PARKED_PREFIX);
    }

    private static boolean tenantPrefixed(String name, String prefix) {
        if (!name.startsWith(prefix)) {
            return false;
        }
        int dot = name.indexOf('.', prefix.length());
        return dot > prefix.length()
            && dot < name.length() - 1
            && TENANT.matcher(name.substring(prefix.length(), dot)).matches();
    }
}
