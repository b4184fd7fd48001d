/*
 * boost-tenancy: routing at send time on ActiveMQ Classic, for every tenant, with no tenant listed.
 *
 * A message sent to a routed shared queue <queue> whose tenantUUID property is a valid tenant id
 * is stored once, in tenant.<tenant>.<queue>, before anything is stored on <queue>: no backlog
 * of one tenant can sit in front of another's, and no router moves it later. A message with no
 * tenantUUID, or one that is not a valid tenant id, is stored on <queue> itself, where the
 * runners' routers quarantine it, or give it to the default tenant, and count it.
 *
 * Which shared queues are routed is the broker's configuration: queues, exact names separated by
 * commas, or "*" for every queue with a toolkit queue name outside the toolkit's namespaces, except
 * those named in shared (exact names, or a prefix ending in ".*": "legacy.*"), the queues whose
 * consumers read the shared queue itself (a Java service's selector consumer). "*" is what the
 * toolkit's own default routing says (every queue routed unless declared shared), so no backlog
 * sent to a queue nobody listed can sit in front of another tenant's. Tenants are not listed, so
 * a new tenant needs no change here. A name in the toolkit's own namespaces (tenant.<t>.*, parked.<t>.*,
 * DLQ.*, *.quarantine, ActiveMQ.*) or not a queue name of the toolkit's stops the broker's start.
 * Only messages sent to one listed queue are routed: a composite destination (a,b) or one of
 * Classic's virtual destinations forwarding to a listed queue is stored as sent.
 *
 *   <plugins>
 *     <bean xmlns="http://www.springframework.org/schema/beans"
 *           class="io.boosttenancy.activemq.TenantRoutingPlugin">
 *       <property name="queues" value="cmd.document.process,cmd.thumbnail"/>
 *     </bean>
 *
 *   or every queue but the shared ones:
 *       <property name="queues" value="*"/>
 *       <property name="shared" value="evt.document.text.extracted,legacy.*"/>
 *   </plugins>
 *
 * List it first in <plugins>, before <authorizationPlugin>: Classic runs the plugin listed last
 * first, so the authorization plugin then checks the producer's right to write to the queue it
 * named, and the tenant's queue is created by the broker itself where it is missing.
 *
 * docs/fairness.md ("Routing at send time on Classic") explains the choice and its limits.
 */
package io.boosttenancy.activemq;

import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;

import org.apache.activemq.broker.Broker;
import org.apache.activemq.broker.BrokerFilter;
import org.apache.activemq.broker.BrokerPlugin;
import org.apache.activemq.broker.ProducerBrokerExchange;
import org.apache.activemq.command.ActiveMQDestination;
import org.apache.activemq.command.ActiveMQQueue;
import org.apache.activemq.command.Message;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

public class TenantRoutingPlugin implements BrokerPlugin {

    private static final Logger LOG = LoggerFactory.getLogger(TenantRoutingPlugin.class);

    /** The message property that names a message's tenant. */
    public static final String TENANT_PROPERTY = "tenantUUID";
    /** The toolkit's tenant grammar (boost_tenancy/tenancy.py): 1 to 64 of [A-Za-z0-9_-],
     * starting and ending with a letter or digit; no dot, no quote, nothing a name could break. */
    static final Pattern TENANT = Pattern.compile("[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?");
    /** The toolkit's queue names (boost_tenancy/messages.py). */
    static final Pattern QUEUE = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._-]{0,199}");
    /** The longest shared queue whose derived queues (DLQ.tenant.&lt;tenant&gt;.&lt;queue&gt;.quarantine
     * the longest) fit in 200 characters for every tenant: the toolkit's MAX_LOGICAL_QUEUE. */
    static final int MAX_QUEUE = 113;
    static final String TENANT_PREFIX = "tenant.";
    static final String PARKED_PREFIX = "parked.";

    /** queues="*": every queue with a shared queue name, except the shared ones. */
    static final String EVERY_QUEUE = "*";

    private Set<String> queues = Collections.emptySet();
    private boolean everyQueue;
    private Set<String> shared = Collections.emptySet();
    private Set<String> sharedPrefixes = Collections.emptySet();
    private final Map<String, Boolean> decided = new ConcurrentHashMap<>();
    static final int DECIDED_MAX = 10_000;

    /** The routed shared queues: exact names, separated by commas, or "*" for every queue with
     * a shared queue name but those of shared; none by default. A name that is not a toolkit
     * queue name, or is in one of its namespaces, is refused. */
    public void setQueues(String names) {
        String value = names == null ? "" : names.trim();
        everyQueue = EVERY_QUEUE.equals(value);
        decided.clear();
        this.queues = everyQueue ? Collections.emptySet() : parseNames(value, "queues", false);
    }

    public String getQueues() {
        return everyQueue ? EVERY_QUEUE : String.join(",", queues);
    }

    /** The queues "*" leaves alone, read by their shared name (a Java service's selector
     * consumer): exact names, or a prefix ending in ".*", separated by commas. */
    public void setShared(String names) {
        Set<String> exact = new LinkedHashSet<>();
        Set<String> prefixes = new LinkedHashSet<>();
        for (String name : parseNames(names == null ? "" : names, "shared", true)) {
            if (name.endsWith(".*")) {
                prefixes.add(name.substring(0, name.length() - 1));
            } else {
                exact.add(name);
            }
        }
        this.shared = Collections.unmodifiableSet(exact);
        this.sharedPrefixes = Collections.unmodifiableSet(prefixes);
        decided.clear();
    }

    public String getShared() {
        Set<String> all = new LinkedHashSet<>(shared);
        for (String prefix : sharedPrefixes) {
            all.add(prefix + "*");
        }
        return String.join(",", all);
    }

    private static Set<String> parseNames(String names, String property, boolean prefixes) {
        Set<String> parsed = new LinkedHashSet<>();
        for (String part : names.split(",")) {
            String name = part.trim();
            if (name.isEmpty()) {
                continue;
            }
            // A prefix is checked as a queue it would cover: "tenant.acme.*" covers tenant queues.
            String checked = prefixes && name.endsWith(".*") ? name.substring(0, name.length() - 1) + "x" : name;
            if (!QUEUE.matcher(checked).matches() || checked.length() > MAX_QUEUE || reserved(checked)) {
                throw new IllegalArgumentException(
                    "boost-tenancy tenant routing: " + property + ": " + name + " is not a shared"
                    + " queue name (1-" + MAX_QUEUE + " of A-Z a-z 0-9 . _ -"
                    + (prefixes ? ", or a prefix ending in .*" : ", or * alone for every queue")
                    + "; not tenant.*, parked.*, DLQ.*, *.quarantine, nor the broker's ActiveMQ.*,"
                    + " activemq.*, BROKER.DLQ.*, EXP.*, DLA or ExpiryQueue)");
            }
            parsed.add(name);
        }
        return Collections.unmodifiableSet(parsed);
    }

    /** Whether a message sent to queue is routed. */
    public boolean routes(String queue) {
        if (!everyQueue) {
            return queues.contains(queue);
        }
        // Every send asks: the answer per queue name is remembered, a bounded number of names.
        Boolean known = decided.get(queue);
        if (known != null) {
            return known;
        }
        boolean answer = decide(queue);
        if (decided.size() >= DECIDED_MAX) {
            decided.clear();
        }
        decided.put(queue, answer);
        return answer;
    }

    private boolean decide(String queue) {
        if (shared.contains(queue)
                || queue.length() > MAX_QUEUE
                || !QUEUE.matcher(queue).matches()
                || reserved(queue)) {
            return false;
        }
        for (String prefix : sharedPrefixes) {
            if (queue.startsWith(prefix)) {
                return false;
            }
        }
        return true;
    }

    @Override
    public Broker installPlugin(Broker broker) {
        Set<String> listedShared = new LinkedHashSet<>(shared);
        listedShared.retainAll(queues);
        if (!listedShared.isEmpty()) {
            throw new IllegalArgumentException(
                "boost-tenancy tenant routing: " + String.join(",", listedShared)
                + " is both routed (queues) and shared: a shared queue is never routed");
        }
        if (everyQueue) {
            LOG.info("boost-tenancy tenant routing: routing every queue to tenant.<tenantUUID>.<queue>,"
                + " except the shared {}", shared.isEmpty() && sharedPrefixes.isEmpty() ? "(none)" : getShared());
        } else if (queues.isEmpty()) {
            LOG.warn("boost-tenancy tenant routing: no queues configured, nothing is routed");
        } else {
            LOG.info("boost-tenancy tenant routing: routing {} to tenant.<tenantUUID>.<queue>", getQueues());
        }
        return new Router(broker, this);
    }

    /** Whether name is in one of the toolkit's own namespaces (never a shared queue). */
    static boolean reserved(String name) {
        return name.startsWith("ActiveMQ.")
            || name.startsWith("activemq.")
            || name.startsWith("BROKER.DLQ.")
            || name.startsWith("EXP.")
            || name.equals("DLA")
            || name.equals("ExpiryQueue")
            || name.startsWith("DLQ.")
            || name.endsWith(".quarantine")
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

    /** tenant.<tenant>.<queue> for a message of a routed queue, or null to store it as sent. */
    static String target(String queue, Object tenant) {
        if (!(tenant instanceof String) || !TENANT.matcher((String) tenant).matches()) {
            return null;
        }
        String name = TENANT_PREFIX + tenant + "." + queue;
        return QUEUE.matcher(name).matches() ? name : null;
    }

    static final class Router extends BrokerFilter {
        private final TenantRoutingPlugin plugin;

        Router(Broker next, TenantRoutingPlugin plugin) {
            super(next);
            this.plugin = plugin;
        }

        @Override
        public void send(ProducerBrokerExchange exchange, Message message) throws Exception {
            ActiveMQDestination destination = message.getDestination();
            if (destination != null
                    && destination.isQueue()
                    && !destination.isTemporary()
                    && !destination.isComposite()
                    && plugin.routes(destination.getPhysicalName())) {
                String target = target(destination.getPhysicalName(), message.getProperty(TENANT_PROPERTY));
                if (target != null) {
                    ActiveMQQueue tenantQueue = new ActiveMQQueue(target);
                    if (getDestinations(tenantQueue).isEmpty()) {
                        // Made by the broker itself: a producer allowed to write to <queue> needs
                        // no right to create queues under tenant.<tenant>. (the authorization
                        // plugin, listed after this one, has checked its write to <queue>).
                        addDestination(getAdminConnectionContext(), tenantQueue, true);
                    }
                    // The message itself, readdressed: stored once, in the tenant's queue. The
                    // original destination stays readable (original-destination over STOMP),
                    // unless the message already carries one (a re-sent dead letter).
                    if (message.getOriginalDestination() == null) {
                        message.setOriginalDestination(destination);
                    }
                    message.setDestination(tenantQueue);
                    // A producer bound to <queue> has its region destination cached on the
                    // exchange; a mutable exchange makes the broker look the destination up from
                    // the message (as Classic's own composite destinations do).
                    exchange.setMutable(true);
                }
            }
            super.send(exchange, message);
        }
    }
}
