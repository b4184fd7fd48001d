/*
 * boost-tenancy: every unacknowledged message of a lost STOMP connection back in its queue.
 *
 * Artemis 2.44.0 cleans up a STOMP connection that fails (its client crashed, its socket closed
 * without DISCONNECT) twice, on two threads: the connection's failure listener closes the
 * session (ServerSessionImpl.doClose(failed=true): the session's transaction rolled back, then
 * each consumer closed and its deliveries cancelled), and StompProtocolManager.cleanup rolls the
 * session back once more, on its own executor, with considerLastMessageAsDelivered=true: for
 * each consumer still open it acknowledges the last delivery into the session's transaction
 * before rolling that back. When that runs after the first has rolled the transaction back and
 * before it has closed that consumer, the acknowledgement goes into a transaction that is over:
 * the message stays counted as delivering, to no consumer, and is never delivered again until
 * the broker restarts. Measured here with raw stomp.py (3 subscriptions on one connection,
 * 1 unacknowledged message each, the socket shut down): 12 of 230 drops left 1 to 3 messages so,
 * and a later consumer of their queues never got them.
 *
 * This plugin closes every consumer of a failed STOMP session in the first cleanup, before its
 * transaction is rolled back and while the session is locked (beforeCloseSession runs inside
 * doClose's synchronized block, which the second cleanup's rollback also takes): each delivery
 * is cancelled back to its queue once, its delivery counted, and the second cleanup finds no
 * consumer. Other protocols and sessions closed on purpose are left as they are.
 *
 * In broker.xml's <core>, next to the tenant plugin or alone:
 *
 *   <broker-plugins>
 *     <broker-plugin class-name="io.boosttenancy.artemis.StompLossPlugin"/>
 *   </broker-plugins>
 */
package io.boosttenancy.artemis;

import java.util.ArrayList;
import java.util.List;

import org.apache.activemq.artemis.core.server.ServerConsumer;
import org.apache.activemq.artemis.core.server.ServerSession;
import org.apache.activemq.artemis.core.server.plugin.ActiveMQServerPlugin;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

public class StompLossPlugin implements ActiveMQServerPlugin {

    private static final Logger LOG = LoggerFactory.getLogger(StompLossPlugin.class);
    private static final String STOMP = "STOMP";

    @Override
    public void beforeCloseSession(ServerSession session, boolean failed) {
        if (!failed || !STOMP.equals(session.getRemotingConnection().getProtocolName())) {
            return;
        }
        List<ServerConsumer> consumers = new ArrayList<>(session.getServerConsumers());
        for (ServerConsumer consumer : consumers) {
            try {
                consumer.close(true);
            } catch (Throwable e) {
                // close() marks the consumer closed first, so doClose's own close of it returns
                // at once and never reaches its fallback: take it off its queue here, as that
                // fallback does. Nothing may escape: a plugin's exception would end doClose
                // before its rollback and its other consumers' closes.
                LOG.warn("boost-tenancy: closing consumer {} of failed STOMP session {} failed",
                        consumer.getID(), session.getName(), e);
                try {
                    consumer.removeItself();
                } catch (Throwable e2) {
                    LOG.warn("boost-tenancy: removing consumer {} failed", consumer.getID(), e2);
                }
            }
        }
    }
}
