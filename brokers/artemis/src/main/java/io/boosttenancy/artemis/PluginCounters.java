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

    void routed(String tenant, String queue) {
        add("routed|" + tenant + "|" + queue);
    }

    void quarantined(String queue, String type) {
        add("quarantined||" + queue + "|" + type);
    }

    void refused(String tenant, String queue, String reason) {
        add("refused|" + tenant + "|" + queue + "|" + reason);
    }

    private void add(String key) {
        counts.computeIfAbsent(key, k -> new LongAdder()).increment();
    }

    /** Every count, by key: routed|tenant|queue, refused|tenant|queue|reason,
     * quarantined||queue|type. */
    public Map<String, Long> snapshot() {
        Map<String, Long> copy = new TreeMap<>();
        counts.forEach((key, adder) -> copy.put(key, adder.sum()));
        return copy;
    }

    /** The counts as a JSON array of {"event", "tenant", "queue", "reason", "count"} objects.
     * Every part is a tenant id, a queue name or a word of the plugin's own, none of which
     * holds a character JSON would need escaped. */
    public String json() {
        StringBuilder out = new StringBuilder("[");
        for (Map.Entry<String, Long> entry : snapshot().entrySet()) {
            String[] parts = entry.getKey().split("\\|", -1);
            if (out.length() > 1) {
                out.append(',');
            }
            out.append("{\"event\":\"").append(parts[0])
                .append("\",\"tenant\":\"").append(parts[1])
                .append("\",\"queue\":\"").append(parts[2])
                .append("\",\"reason\":\"").append(parts.length > 3 ? parts[3] : "")
                .append("\",\"count\":").append(entry.getValue()).append('}');
        }
        return out.append(']').toString();
    }
}
