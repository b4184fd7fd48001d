/*
 * boost-tenancy's broker plugin for ActiveMQ Artemis: for every message sent to a shared queue
 * the operator lists, whoever sends it (the toolkit, a JMS service, any protocol),
 *
 * - a valid tenantUUID stores it once, in tenant.<tenant>.<queue>, at send time, through one
 *   divert per listed queue whose transformer (TenantRouter) readdresses the copy: no divert
 *   per tenant, no filter per tenant, the same work per message for 1 tenant or 10,000;
 * - a missing or invalid tenantUUID stores it in DLQ.<queue>.quarantine with the reason, never
 *   in a tenant's queue;
 * - the tenant's limits are checked before anything is stored: the largest message, messages/s
 *   and bytes/s (TenantLimits), and its backlog (max-queued-messages: an address setting on its
 *   queues whose full policy is FAIL); a refused send fails at the producer with the reason.
 *
 * Configuration, in broker.xml's <core>:
 *
 *   <broker-plugins>
 *     <broker-plugin class-name="io.boosttenancy.artemis.TenantPlugin">
 *       <property key="queues" value="cmd.document.process,cmd.thumbnail"/>
 *       <property key="max-message-bytes" value="1048576"/>
 *       <property key="messages-per-second" value="0"/>
 *       <property key="bytes-per-second" value="0"/>
 *       <property key="burst-seconds" value="1"/>
 *       <property key="max-queued-messages" value="0"/>
 *       <property key="policy-store-url" value="jdbc:postgresql://127.0.0.1/boost"/>
 *       <property key="policy-store-user" value="boost"/>
 *       <property key="policy-store-password" value="..."/>
 *       <property key="policy-refresh-seconds" value="5"/>
 *     </broker-plugin>
 *   </broker-plugins>
 *
 * queues="*" routes every queue with a toolkit queue name instead, as its address is created,
 * except the toolkit's and the broker's own and those named in shared (exact names, or a prefix
 * ending in ".*"): what the toolkit's default routing says. There a message without a tenantUUID
 * at all is stored as sent (for the runners' routers), and the runners' own diverts on a routed
 * queue are removed (they would store their tenant's messages a second time).
 *
 * 0 means no limit. With a policy store (the toolkit's boost_tenant_policies table, which
 * `boost-tenancy policy set` writes), a tenant's policy overrides the defaults within
 * policy-refresh-seconds, without a restart. docs/fairness.md ("The Artemis plugin") has the rest.
 */
package io.boosttenancy.artemis;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.activemq.artemis.api.core.ActiveMQAddressFullException;
import org.apache.activemq.artemis.api.core.ActiveMQException;
import org.apache.activemq.artemis.api.core.Message;
import org.apache.activemq.artemis.api.core.RoutingType;
import org.apache.activemq.artemis.api.core.SimpleString;
import org.apache.activemq.artemis.core.config.DivertConfiguration;
import org.apache.activemq.artemis.core.config.TransformerConfiguration;
import org.apache.activemq.artemis.core.postoffice.Binding;
import org.apache.activemq.artemis.core.postoffice.RoutingStatus;
import org.apache.activemq.artemis.core.server.ActivateCallback;
import org.apache.activemq.artemis.core.server.ActiveMQServer;
import org.apache.activemq.artemis.core.server.ComponentConfigurationRoutingType;
import org.apache.activemq.artemis.core.server.ServerSession;
import org.apache.activemq.artemis.core.server.impl.AddressInfo;
import org.apache.activemq.artemis.core.server.plugin.ActiveMQServerPlugin;
import org.apache.activemq.artemis.core.settings.impl.AddressFullMessagePolicy;
import org.apache.activemq.artemis.core.settings.impl.AddressSettings;
import org.apache.activemq.artemis.core.transaction.Transaction;
import org.apache.activemq.artemis.core.transaction.TransactionOperationAbstract;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

public class TenantPlugin implements ActiveMQServerPlugin {

    private static final Logger LOG = LoggerFactory.getLogger(TenantPlugin.class);
    /** The divert of a routed queue is named this, then the queue. */
    public static final String DIVERT_PREFIX = "boost.tenant-routing.";
    /** The runners' own diverts, one per tenant of a queue (the toolkit's send routes). */
    static final String RUNNER_DIVERT_PREFIX = "boost.divert.";
    /** The management resource of the plugin: its operation counters() answers with what it
     * routed, quarantined and refused, as JSON (a request to activemq.management naming this
     * resource, as the broker's own controls are asked). */
    public static final String RESOURCE = "boost.tenant-plugin";

    /** What the management resource answers. */
    public static final class Control {
        public String counters() {
            return PluginCounters.instance().json();
        }
    }

    private RoutedQueues routed = RoutedQueues.parse("", "");
    private volatile boolean active;
    private TenantLimits limits = new TenantLimits(new TenantLimits.Limits(0, 0, 0, 1, 0));
    private TenantLimits.Limits defaults = new TenantLimits.Limits(0, 0, 0, 1, 0);
    private PolicyReader policies;
    private long refreshSeconds = 5;
    private ActiveMQServer server;
    private ScheduledExecutorService refresher;
    private final Map<String, Long> quotaMatches = new HashMap<>();

    @Override
    public void init(Map<String, String> properties) {
        routed = RoutedQueues.parse(properties.get("queues"), properties.get("shared"));
        defaults = new TenantLimits.Limits(
            number(properties, "max-message-bytes", 0).longValue(),
            number(properties, "messages-per-second", 0).doubleValue(),
            number(properties, "bytes-per-second", 0).doubleValue(),
            number(properties, "burst-seconds", 1).doubleValue(),
            number(properties, "max-queued-messages", 0).longValue());
        limits = new TenantLimits(defaults);
        refreshSeconds = number(properties, "policy-refresh-seconds", 5).longValue();
        if (refreshSeconds < 1) {
            throw new IllegalArgumentException("boost-tenancy tenant plugin: policy-refresh-seconds"
                + " must be at least 1, got " + refreshSeconds);
        }
        String url = properties.getOrDefault("policy-store-url", "").trim();
        if (!url.isEmpty()) {
            policies = new PolicyReader(url, properties.get("policy-store-user"),
                properties.get("policy-store-password"), defaults);
        }
    }

    private static Number number(Map<String, String> properties, String key, double fallback) {
        String text = properties.getOrDefault(key, "").trim();
        if (text.isEmpty()) {
            return fallback;
        }
        try {
            double value = Double.parseDouble(text);
            if (value < 0 || Double.isNaN(value) || Double.isInfinite(value)) {
                throw new NumberFormatException();
            }
            return value;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("boost-tenancy tenant plugin: " + key
                + " must be a number of at least 0, got " + text);
        }
    }

    @Override
    public void registered(ActiveMQServer server) {
        this.server = server;
        BrokerQueues.attach(server);
        // Persisted diverts of this plugin are loaded at activation; whatever instance the broker
        // builds for them finds the counters, and the queue in the transformer's properties.
        for (String queue : routed.listed()) {
            server.getServiceRegistry().addDivertTransformer(DIVERT_PREFIX + queue, new TenantRouter(queue));
        }
        server.registerActivateCallback(new ActivateCallback() {
            @Override
            public void activationComplete() {
                try {
                    server.getManagementService().registerInRegistry(RESOURCE, new Control());
                    deployDiverts();
                    active = true;
                    applyBacklogQuotas();
                    startPolicyRefresh();
                } catch (Exception e) {
                    LOG.error("boost-tenancy tenant plugin: could not start routing", e);
                }
            }
        });
        LOG.info("boost-tenancy tenant plugin: routing {} to tenant.<tenantUUID>.<queue>",
            routed.describe());
    }

    @Override
    public void unregistered(ActiveMQServer server) {
        if (refresher != null) {
            refresher.shutdownNow();
        }
    }

    private synchronized void deployDiverts() throws Exception {
        Map<String, String> wanted = new HashMap<>();
        for (String queue : routed.listed()) {
            wanted.put(DIVERT_PREFIX + queue, queue);
        }
        if (routed.every()) {
            for (SimpleString address : server.getPostOffice().getAddresses()) {
                if (everyQueueAddress(server.getPostOffice().getAddressInfo(address))) {
                    wanted.put(DIVERT_PREFIX + address, address.toString());
                }
            }
        }
        for (Binding binding : server.getPostOffice().getAllBindings().toList()) {
            String name = binding.getUniqueName().toString();
            if (name.startsWith(DIVERT_PREFIX) && !wanted.containsKey(name)) {
                // Diverts of queues no longer routed go: such a queue is stored as sent.
                server.destroyDivert(SimpleString.of(name));
                LOG.info("boost-tenancy tenant plugin: removed {} (its queue is no longer routed)", name);
            } else if (name.startsWith(RUNNER_DIVERT_PREFIX)
                    && wanted.containsValue(binding.getAddress().toString())) {
                // A runner's divert for one tenant of a queue the plugin now routes for every
                // tenant: both would store that tenant's messages, each once.
                server.destroyDivert(SimpleString.of(name));
                LOG.info("boost-tenancy tenant plugin: removed {} (the plugin routes {} itself)",
                    name, binding.getAddress());
            }
        }
        for (Map.Entry<String, String> entry : wanted.entrySet()) {
            deployDivert(entry.getValue());
        }
    }

    /** The plugin's divert of a routed queue, made unless it exists. */
    private synchronized void deployDivert(String queue) throws Exception {
        String name = DIVERT_PREFIX + queue;
        if (server.getPostOffice().getBinding(SimpleString.of(name)) != null) {
            return;
        }
        TransformerConfiguration transformer = new TransformerConfiguration(TenantRouter.class.getName())
            .setProperties(Map.of(TenantRouter.QUEUE_PROPERTY, queue));
        DivertConfiguration divert = new DivertConfiguration()
            .setName(name)
            .setAddress(queue)
            .setForwardingAddress(TenantNames.quarantine(queue))
            .setExclusive(true)
            .setRoutingType(ComponentConfigurationRoutingType.ANYCAST)
            .setTransformerConfiguration(transformer);
        if (routed.every()) {
            // Every queue: a message without a tenantUUID at all is stored as sent (another
            // application's, or for the runners' routers to quarantine and count); one that
            // names an invalid tenant is quarantined here, as on a listed queue.
            divert.setFilterString(TenantNames.TENANT_PROPERTY + " IS NOT NULL");
        }
        server.deployDivert(divert);
    }

    /** Whether an address is one "every queue" routes: a durable queue address (not a
     * temporary or internal one, not a topic) with a shared queue name that is not shared. */
    private boolean everyQueueAddress(AddressInfo info) {
        return info != null
            && !info.isTemporary()
            && !info.isInternal()
            && info.getRoutingTypes().contains(RoutingType.ANYCAST)
            && !info.getRoutingTypes().contains(RoutingType.MULTICAST)
            && routed.routes(info.getName().toString());
    }

    @Override
    public void afterAddAddress(AddressInfo addressInfo, boolean reload) throws ActiveMQException {
        // Every queue: a queue's divert is made as its address is, before the first message
        // sent to it is routed (the broker adds the address, then routes). At activation the
        // addresses loaded are deployDiverts()'s.
        if (!active || !routed.every() || !everyQueueAddress(addressInfo)) {
            return;
        }
        try {
            deployDivert(addressInfo.getName().toString());
        } catch (Exception e) {
            LOG.error("boost-tenancy tenant plugin: no divert for {}: its messages are stored as sent",
                addressInfo.getName(), e);
        }
    }

    private void startPolicyRefresh() {
        if (policies == null) {
            return;
        }
        refresher = Executors.newSingleThreadScheduledExecutor(runnable -> {
            Thread thread = new Thread(runnable, "boost-tenancy-policies");
            thread.setDaemon(true);
            return thread;
        });
        refresher.scheduleWithFixedDelay(this::refreshPolicies, 0, refreshSeconds, TimeUnit.SECONDS);
    }

    private void refreshPolicies() {
        try {
            limits.replacePolicies(policies.read());
            applyBacklogQuotas();
        } catch (Exception e) {
            // The last policies read stay in force: a store that cannot answer changes nothing.
            LOG.warn("boost-tenancy tenant plugin: policy store not read, keeping the last policies: {}",
                e.toString());
        }
    }

    /** max-queued-messages as an address setting on the tenants' queues: the default on
     * tenant.#, a tenant's own on tenant.&lt;tenant&gt;.#; a full queue refuses the send. */
    private synchronized void applyBacklogQuotas() {
        Map<String, Long> wanted = new HashMap<>();
        if (defaults.maxQueuedMessages > 0) {
            wanted.put(TenantNames.TENANT_PREFIX + "#", defaults.maxQueuedMessages);
        }
        if (policies != null) {
            for (Map.Entry<String, TenantLimits.Limits> entry : policies.last().entrySet()) {
                long quota = entry.getValue().maxQueuedMessages;
                wanted.put(TenantNames.TENANT_PREFIX + entry.getKey() + ".#", quota > 0 ? quota : -1);
            }
        }
        for (String match : Set.copyOf(quotaMatches.keySet())) {
            if (!wanted.containsKey(match)) {
                server.getAddressSettingsRepository().removeMatch(match);
                quotaMatches.remove(match);
            }
        }
        for (Map.Entry<String, Long> entry : wanted.entrySet()) {
            if (entry.getValue().equals(quotaMatches.get(entry.getKey()))) {
                continue;
            }
            AddressSettings settings = new AddressSettings()
                .setMaxSizeMessages(entry.getValue())
                .setAddressFullMessagePolicy(entry.getValue() > 0
                    ? AddressFullMessagePolicy.FAIL : AddressFullMessagePolicy.PAGE);
            server.getAddressSettingsRepository().addMatch(entry.getKey(), settings);
            quotaMatches.put(entry.getKey(), entry.getValue());
        }
    }

    @Override
    public void afterSend(ServerSession session, Transaction tx, Message message, boolean direct,
                          boolean noAutoCreateQueue, RoutingStatus result) {
        // Counted once stored: a copy a full tenant queue refused is counted as refused instead.
        String address = message.getAddress();
        if (address == null || !routed.routes(address)) {
            return;
        }
        Object raw = message.getObjectProperty(TenantNames.TENANT_PROPERTY);
        if (raw == null && routed.every()) {
            return; // stored as sent (the divert's filter), neither routed nor quarantined
        }
        String tenant = TenantRouter.text(raw);
        Runnable count = TenantNames.isTenant(tenant)
                ? () -> PluginCounters.instance().routed(tenant, address)
                : () -> PluginCounters.instance().quarantined(
                        address, TenantRouter.quarantineType(raw));
        if (tx == null) {
            count.run();
        } else {
            // A transacted send is stored when its transaction commits, and never if it rolls
            // back: counted then, or not at all.
            tx.addOperation(TransactionOperationAbstract.afterCommit(count));
        }
    }

    @Override
    public void onSendException(ServerSession session, Transaction tx, Message message,
                                boolean direct, boolean noAutoCreateQueue, Exception e) {
        // A tenant's queue over its backlog quota (max-size-messages, FAIL) refuses the copy the
        // divert routes there: the send fails, and is counted as the tenant's.
        if (!(e instanceof ActiveMQAddressFullException)
                || String.valueOf(e.getMessage()).startsWith("boost-tenancy:")) {
            return;
        }
        String address = message.getAddress();
        String tenant = TenantRouter.text(message.getObjectProperty(TenantNames.TENANT_PROPERTY));
        if (address != null && routed.routes(address) && TenantNames.isTenant(tenant)) {
            PluginCounters.instance().refused(tenant, address, "backlog");
        }
    }

    @Override
    public void beforeSend(ServerSession session, Transaction tx, Message message, boolean direct,
                           boolean noAutoCreateQueue) throws ActiveMQException {
        String address = message.getAddress();
        if (address == null && session != null && session.getDefaultAddress() != null) {
            address = session.getDefaultAddress().toString();
        }
        if (address == null) {
            return;
        }
        String tenant;
        if (routed.routes(address)) {
            tenant = TenantRouter.text(message.getObjectProperty(TenantNames.TENANT_PROPERTY));
            if (tenant == null || !TenantNames.isTenant(tenant)) {
                return; // quarantined by the divert, never limited as a tenant's
            }
        } else {
            // Sent straight to a tenant's queue of a listed queue (the toolkit's own producers
            // do, and so may anyone): the tenant the queue belongs to, whatever the property.
            tenant = routed.tenantOfQueue(address);
            if (tenant == null) {
                return;
            }
        }
        TenantLimits.Refusal refusal = limits.admit(tenant, message.getWholeMessageSize());
        if (refusal != null) {
            PluginCounters.instance().refused(tenant, address, refusal.reason);
            throw new ActiveMQAddressFullException("boost-tenancy: publish to " + address
                + " refused (" + refusal.reason + "): " + refusal.text);
        }
    }
}
