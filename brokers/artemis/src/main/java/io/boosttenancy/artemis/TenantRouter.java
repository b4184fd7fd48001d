/*
 * boost-tenancy: the transformer of the plugin's one divert per routed shared queue. Every
 * message sent to the queue passes through it once: a valid tenantUUID readdresses the divert's
 * copy to tenant.<tenant>.<queue> (created on first use, as any auto-created queue); anything
 * else leaves the copy at the divert's forwarding address, the queue's quarantine, with the
 * reason in the toolkit's dead-letter properties. The work per message is one property read and
 * one pattern match, whatever the number of tenants.
 */
package io.boosttenancy.artemis;

import java.util.Map;

import org.apache.activemq.artemis.api.core.Message;
import org.apache.activemq.artemis.api.core.SimpleString;
import org.apache.activemq.artemis.core.server.transformer.Transformer;

public final class TenantRouter implements Transformer {

    /** The transformer property naming the shared queue a divert routes. */
    public static final String QUEUE_PROPERTY = "queue";
    static final String ORIGINAL_QUEUE = "boostOriginalQueue";
    static final String REASON = "boostDeadLetterReason";
    static final String ERROR_TYPE = "boostErrorType";
    static final String ERROR_TEXT = "boostError";
    static final String TENANCY_VIOLATION = "tenancy-violation";

    private String queue;

    public TenantRouter() {
        this(null);
    }

    TenantRouter(String queue) {
        this.queue = queue;
    }

    @Override
    public void init(Map<String, String> properties) {
        String given = properties == null ? null : properties.get(QUEUE_PROPERTY);
        if (given != null) {
            this.queue = given;
        }
    }

    @Override
    public Message transform(Message message) {
        String shared = queue;
        if (shared == null) { // a divert made without the property: its copy names the source
            shared = message.getAnnotationString(Message.HDR_ORIGINAL_ADDRESS);
        }
        Object raw = message.getObjectProperty(TenantNames.TENANT_PROPERTY);
        String tenant = text(raw);
        if (tenant != null && TenantNames.isTenant(tenant)) {
            String target = TenantNames.tenantQueue(tenant, shared);
            BrokerQueues.ensure(target);
            message.setAddress(target);
            return message;
        }
        BrokerQueues.ensure(TenantNames.quarantine(shared));
        String type = quarantineType(raw);
        String text = raw == null
            ? "no tenantUUID property: the broker cannot tell whose message this is"
            : "tenantUUID " + quoted(raw) + " is not a tenant id (1-64 of A-Z a-z 0-9 _ -,"
                + " starting and ending with a letter or digit)";
        message.putStringProperty(ORIGINAL_QUEUE, shared);
        message.putStringProperty(REASON, TENANCY_VIOLATION);
        message.putStringProperty(ERROR_TYPE, type);
        message.putStringProperty(ERROR_TEXT, text);
        return message;
    }

    /** A string property's text; null for a property of another type (a tenant is a string). */
    static String text(Object raw) {
        if (raw instanceof String) {
            return (String) raw;
        }
        if (raw instanceof SimpleString) {
            return raw.toString();
        }
        return null;
    }

    /** MissingTenant or InvalidTenant: why a message with this tenantUUID is quarantined. */
    static String quarantineType(Object raw) {
        return raw == null ? "MissingTenant" : "InvalidTenant";
    }

    private static String quoted(Object raw) {
        String shown = String.valueOf(raw);
        if (shown.length() > 80) {
            shown = shown.substring(0, 79) + "\u2026";
        }
        StringBuilder safe = new StringBuilder(shown.length() + 2).append('\'');
        for (int i = 0; i < shown.length(); i++) {
            char c = shown.charAt(i);
            safe.append(Character.isISOControl(c) ? '\ufffd' : c);
        }
        return safe.append('\'').append(raw instanceof String || raw instanceof SimpleString
            ? "" : " (a " + raw.getClass().getSimpleName() + ", not a string)").toString();
    }
}
