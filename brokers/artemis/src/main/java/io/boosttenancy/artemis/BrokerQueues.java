/*
 * boost-tenancy: the queues the plugin routes to, made before a message is routed there. A
 * divert's copy is routed without the sender's session where the sender speaks AMQP, and the
 * broker then auto-creates nothing: a copy sent to an address without a queue is dropped
 * (measured on Artemis 2.44). So the tenant's queue, and the quarantine, are made here on first
 * use: durable, ANYCAST, named as their address, and auto-created like the queues the broker
 * makes for a send (the address settings' auto-delete applies to them alike).
 */
package io.boosttenancy.artemis;

import org.apache.activemq.artemis.api.core.QueueConfiguration;
import org.apache.activemq.artemis.api.core.RoutingType;
import org.apache.activemq.artemis.api.core.SimpleString;
import org.apache.activemq.artemis.core.server.ActiveMQServer;

final class BrokerQueues {

    private static volatile ActiveMQServer server;

    private BrokerQueues() {
    }

    static void attach(ActiveMQServer broker) {
        server = broker;
    }

    /** Make the queue name (and its address) unless it exists. */
    static void ensure(String name) {
        ActiveMQServer broker = server;
        if (broker == null) {
            return; // not started by the plugin: the broker's own auto-creation is all there is
        }
        SimpleString queue = SimpleString.of(name);
        if (broker.locateQueue(queue) != null) {
            return;
        }
        try {
            broker.createQueue(QueueConfiguration.of(queue)
                .setAddress(queue)
                .setRoutingType(RoutingType.ANYCAST)
                .setDurable(true)
                .setAutoCreateAddress(true)
                .setAutoCreated(true), true);
        } catch (Exception e) {
            // Routed anyway: where the queue is missing the broker's auto-creation is the rest.
            throw new IllegalStateException("boost-tenancy tenant plugin: queue " + name
                + " could not be made", e);
        }
    }
}
