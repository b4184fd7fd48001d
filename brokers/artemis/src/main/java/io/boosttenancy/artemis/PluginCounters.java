/*
 * boost-tenancy: what the plugin did, per tenant and per shared queue, since the broker started.
 * One instance per broker process, shared by the plugin and the divert transformers (which the
 * broker may build by class name), written lock-free on the send path.
 */
package io.boosttenancy.artemis;

import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

public final class PluginCounters {

    private static final PluginCounters INSTANCE = new PluginCounters();

    private final ConcurrentHashMap<String, LongAdder> counts = new ConcurrentHashMap<>();

    private PluginCounters() {
    }

    public static PluginCounters instance() {
        return INSTANCE;
    }

    void routed(String tenant) {
        add("routed|" + tenant);
    }

    void quarantined(String queue, String type) {
        add("quarantined|" + queue + "|" + type);
    }

    void refused(String tenant, String reason) {
        add("refused_" + reason + "|" + tenant);
    }

    private void add(String key) {
        counts.computeIfAbsent(key, k -> new LongAdder()).increment();
    }

    /** Every count, by key: routed|&lt;tenant&gt;, refused_&lt;reason&gt;|&lt;tenant&gt;,
     * quarantined|&lt;queue&gt;|&lt;type&gt;. */
    public Map<String, Long> snapshot() {
        Map<String, Long> copy = new TreeMap<>();
        counts.forEach((key, adder) -> copy.put(key, adder.sum()));
        return copy;
    }
}
