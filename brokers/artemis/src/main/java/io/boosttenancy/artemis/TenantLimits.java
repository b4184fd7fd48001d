/*
 * boost-tenancy: each tenant's publishing limits at the broker, for every producer: the largest
 * message, messages per second and bytes per second (token buckets holding burst seconds of
 * each rate, both taken or neither). The defaults come from the plugin's properties; a tenant's
 * policy (the toolkit's policy store, read by PolicyReader) overrides any of them at run time.
 */
package io.boosttenancy.artemis;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

public final class TenantLimits {

    /** One tenant's limits; 0 or less: no limit. */
    public static final class Limits {
        final long maxMessageBytes;
        final double messagesPerSecond;
        final double bytesPerSecond;
        final double burstSeconds;
        final long maxQueuedMessages;

        public Limits(long maxMessageBytes, double messagesPerSecond, double bytesPerSecond,
                      double burstSeconds, long maxQueuedMessages) {
            this.maxMessageBytes = maxMessageBytes;
            this.messagesPerSecond = messagesPerSecond;
            this.bytesPerSecond = bytesPerSecond;
            this.burstSeconds = burstSeconds > 0 ? burstSeconds : 1.0;
            this.maxQueuedMessages = maxQueuedMessages;
        }

        boolean equalRates(Limits other) {
            return other.messagesPerSecond == messagesPerSecond
                && other.bytesPerSecond == bytesPerSecond
                && other.burstSeconds == burstSeconds;
        }
    }

    /** Why a message was refused, or null when it was admitted. */
    public static final class Refusal {
        final String reason;
        final String text;

        Refusal(String reason, String text) {
            this.reason = reason;
            this.text = text;
        }
    }

    private static final class Buckets {
        final Limits limits;
        double messages;
        double bytes;
        long updatedNanos;

        Buckets(Limits limits, long now) {
            this.limits = limits;
            this.messages = limits.messagesPerSecond * limits.burstSeconds;
            this.bytes = limits.bytesPerSecond * limits.burstSeconds;
            this.updatedNanos = now;
        }

        synchronized Refusal take(String tenant, long size, long now) {
            double elapsed = Math.max(0, now - updatedNanos) / 1e9;
            updatedNanos = now;
            if (limits.messagesPerSecond > 0) {
                messages = Math.min(limits.messagesPerSecond * limits.burstSeconds,
                    messages + elapsed * limits.messagesPerSecond);
            }
            if (limits.bytesPerSecond > 0) {
                bytes = Math.min(limits.bytesPerSecond * limits.burstSeconds,
                    bytes + elapsed * limits.bytesPerSecond);
            }
            if (limits.messagesPerSecond > 0 && messages < 1) {
                return new Refusal("rate", "tenant " + tenant + " is over its "
                    + limits.messagesPerSecond + " messages/s");
            }
            if (limits.bytesPerSecond > 0 && bytes < size) {
                return new Refusal("rate", "tenant " + tenant + " is over its "
                    + limits.bytesPerSecond + " bytes/s");
            }
            if (limits.messagesPerSecond > 0) {
                messages -= 1;
            }
            if (limits.bytesPerSecond > 0) {
                bytes -= size;
            }
            return null;
        }
    }

    private volatile Limits defaults;
    private volatile Map<String, Limits> policies = Map.of();
    private final ConcurrentHashMap<String, Buckets> buckets = new ConcurrentHashMap<>();

    public TenantLimits(Limits defaults) {
        this.defaults = defaults;
    }

    /** The limits of tenant now: its policy's, else the defaults. */
    public Limits of(String tenant) {
        Limits policy = policies.get(tenant);
        return policy != null ? policy : defaults;
    }

    /** Replace every tenant's policy (a read of the policy store); buckets of tenants whose
     * rates changed start again from full. */
    public void replacePolicies(Map<String, Limits> fresh) {
        policies = Map.copyOf(fresh);
        buckets.entrySet().removeIf(entry -> !entry.getValue().limits.equalRates(of(entry.getKey())));
    }

    /** Admit one message of size bytes of tenant, or say why not; admitted messages take their
     * tokens. */
    public Refusal admit(String tenant, long size) {
        Limits limits = of(tenant);
        if (limits.maxMessageBytes > 0 && size > limits.maxMessageBytes) {
            return new Refusal("size", "a message of " + size + " bytes is over tenant " + tenant
                + "'s maximum of " + limits.maxMessageBytes + " bytes");
        }
        if (limits.messagesPerSecond <= 0 && limits.bytesPerSecond <= 0) {
            return null;
        }
        long now = System.nanoTime();
        Buckets tenantBuckets = buckets.computeIfAbsent(tenant, t -> new Buckets(limits, now));
        if (tenantBuckets.limits != limits && !tenantBuckets.limits.equalRates(limits)) {
            tenantBuckets = new Buckets(limits, now);
            buckets.put(tenant, tenantBuckets);
        }
        return tenantBuckets.take(tenant, size, now);
    }
}
