import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Enumeration;
import java.util.List;

import javax.jms.BytesMessage;
import javax.jms.Connection;
import javax.jms.ConnectionFactory;
import javax.jms.DeliveryMode;
import javax.jms.Destination;
import javax.jms.JMSException;
import javax.jms.MapMessage;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.ObjectMessage;
import javax.jms.Queue;
import javax.jms.Session;
import javax.jms.StreamMessage;
import javax.jms.TextMessage;

/**
 * Minimal JMS peer used by the interoperability tests.
 *
 * <p>It behaves like the BOOST Java services on the wire: it speaks OpenWire through the
 * ActiveMQ JMS client, or CORE through the Artemis JMS 2.0 client (the system property
 * {@code peer.factory} names the connection factory class, the environment variables
 * {@code JMS_PEER_USER} and {@code JMS_PEER_PASSWORD} the login), stamps {@code tenantUUID}
 * as a JMS string property and reads it back
 * with {@code getStringProperty}. Every result is printed as one JSON object per line on
 * stdout so the Python side can parse it without a JSON library on this side.
 *
 * <pre>
 * send    &lt;brokerUrl&gt; &lt;queue&gt; &lt;tenant&gt; &lt;text&gt; [key=value ...]
 * receive &lt;brokerUrl&gt; &lt;queue&gt; &lt;selector or ""&gt; &lt;count&gt; &lt;timeoutMs&gt;
 * </pre>
 *
 * <p>Exit codes: 0 success, 1 JMS failure (message on stderr), 2 usage error.
 */
public final class JmsPeer {

    static final String TENANT_PROPERTY = "tenantUUID";

    private JmsPeer() {
    }

    public static void main(String[] args) {
        int status;
        try {
            status = run(args);
        } catch (JMSException e) {
            System.err.println("JMS failure: " + describe(e));
            status = 1;
        } catch (UsageException e) {
            System.err.println("usage error: " + e.getMessage());
            System.err.println(usage());
            status = 2;
        } catch (RuntimeException e) {
            System.err.println("unexpected failure: " + e);
            status = 1;
        }
        System.out.flush();
        System.err.flush();
        // The ActiveMQ client may leave non-daemon threads behind; never hang the caller.
        System.exit(status);
    }

    /** A connection through the factory class {@code peer.factory} names, with the login of
     * the environment when one is given. */
    private static Connection connect(String brokerUrl) throws JMSException {
        String factoryClass = System.getProperty("peer.factory", "org.apache.activemq.ActiveMQConnectionFactory");
        ConnectionFactory factory;
        try {
            factory = (ConnectionFactory) Class.forName(factoryClass)
                    .getConstructor(String.class)
                    .newInstance(brokerUrl);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot make " + factoryClass + ": " + e, e);
        }
        String user = System.getenv("JMS_PEER_USER");
        String password = System.getenv("JMS_PEER_PASSWORD");
        return user == null ? factory.createConnection() : factory.createConnection(user, password);
    }

    private static int run(String[] args) throws JMSException {
        if (args.length == 0) {
            throw new UsageException("missing mode");
        }
        switch (args[0]) {
            case "send":
                if (args.length < 5) {
                    throw new UsageException("send needs brokerUrl, queue, tenant, text");
                }
                List<String[]> properties = new ArrayList<>();
                for (int i = 5; i < args.length; i++) {
                    int eq = args[i].indexOf('=');
                    if (eq <= 0) {
                        throw new UsageException("property must be key=value: " + args[i]);
                    }
                    properties.add(new String[] {args[i].substring(0, eq), args[i].substring(eq + 1)});
                }
                send(args[1], args[2], args[3], args[4], properties);
                return 0;
            case "send-each":
                if (args.length < 5) {
                    throw new UsageException("send-each needs brokerUrl, queue, text, tenant...");
                }
                sendEach(args[1], args[2], args[3], Arrays.copyOfRange(args, 4, args.length));
                return 0;
            case "receive":
                if (args.length != 6) {
                    throw new UsageException(
                            "receive needs brokerUrl, queue, selector, count, timeoutMs");
                }
                int count = parsePositive(args[4], "count");
                long timeoutMs = parsePositive(args[5], "timeoutMs");
                receive(args[1], args[2], args[3], count, timeoutMs);
                return 0;
            default:
                throw new UsageException("unknown mode: " + args[0]);
        }
    }

    private static int parsePositive(String value, String name) {
        int parsed;
        try {
            parsed = Integer.parseInt(value);
        } catch (NumberFormatException e) {
            throw new UsageException(name + " must be an integer: " + value);
        }
        if (parsed <= 0) {
            throw new UsageException(name + " must be positive: " + value);
        }
        return parsed;
    }

    /** One producer bound to the queue sends one message per tenant, in order: the way a JMS
     * service sends, its destination fixed for every message. */
    private static void sendEach(String brokerUrl, String queueName, String text, String[] tenants)
            throws JMSException {
        Connection connection = connect(brokerUrl);
        try {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = session.createProducer(session.createQueue(queueName));
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            for (String tenant : tenants) {
                TextMessage message = session.createTextMessage(text);
                if (!tenant.isEmpty()) {
                    message.setStringProperty(TENANT_PROPERTY, tenant);
                }
                producer.send(message);
            }
            System.out.println("{\"sent\":" + tenants.length + "}");
        } finally {
            connection.close();
        }
    }

    private static void send(
            String brokerUrl, String queueName, String tenant, String text, List<String[]> properties)
            throws JMSException {
        Connection connection = connect(brokerUrl);
        try {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue queue = session.createQueue(queueName);
            MessageProducer producer = session.createProducer(queue);
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            TextMessage message = session.createTextMessage(text);
            message.setStringProperty(TENANT_PROPERTY, tenant);
            for (String[] property : properties) {
                message.setStringProperty(property[0], property[1]);
            }
            producer.send(message);
            System.out.println("{\"sent\":true,\"jmsMessageId\":" + quote(message.getJMSMessageID()) + "}");
        } finally {
            connection.close();
        }
    }

    private static void receive(
            String brokerUrl, String queueName, String selector, int count, long timeoutMs)
            throws JMSException {
        Connection connection = connect(brokerUrl);
        try {
            Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            Queue queue = session.createQueue(queueName);
            MessageConsumer consumer = selector.isEmpty()
                    ? session.createConsumer(queue)
                    : session.createConsumer(queue, selector);
            connection.start();
            long deadline = System.currentTimeMillis() + timeoutMs;
            for (int received = 0; received < count; received++) {
                long remaining = deadline - System.currentTimeMillis();
                if (remaining <= 0) {
                    break;
                }
                Message message = consumer.receive(remaining);
                if (message == null) {
                    break;
                }
                String line = toJson(message);
                message.acknowledge();
                System.out.println(line);
                System.out.flush();
            }
        } finally {
            connection.close();
        }
    }

    private static String toJson(Message message) throws JMSException {
        StringBuilder json = new StringBuilder(256);
        json.append("{\"class\":").append(quote(messageClass(message)));
        json.append(",\"text\":").append(quote(body(message)));
        json.append(",\"tenantUUID\":").append(quote(message.getStringProperty(TENANT_PROPERTY)));
        json.append(",\"correlationId\":").append(quote(message.getJMSCorrelationID()));
        json.append(",\"deliveryMode\":").append(message.getJMSDeliveryMode());
        json.append(",\"jmsMessageId\":").append(quote(message.getJMSMessageID()));
        json.append(",\"jmsType\":").append(quote(message.getJMSType()));
        json.append(",\"priority\":").append(message.getJMSPriority());
        json.append(",\"expiration\":").append(message.getJMSExpiration());
        json.append(",\"redelivered\":").append(message.getJMSRedelivered());
        Destination replyTo = message.getJMSReplyTo();
        json.append(",\"replyTo\":").append(quote(replyTo == null ? null : replyTo.toString()));
        json.append(",\"properties\":{");
        List<String> names = new ArrayList<>();
        Enumeration<?> enumeration = message.getPropertyNames();
        while (enumeration.hasMoreElements()) {
            names.add(String.valueOf(enumeration.nextElement()));
        }
        Collections.sort(names);
        boolean first = true;
        for (String name : names) {
            if (!first) {
                json.append(',');
            }
            first = false;
            String value = String.valueOf(message.getObjectProperty(name));
            json.append(quote(name)).append(':').append(quote(value));
        }
        json.append("}}");
        return json.toString();
    }

    private static String messageClass(Message message) {
        if (message instanceof TextMessage) {
            return "TextMessage";
        }
        if (message instanceof BytesMessage) {
            return "BytesMessage";
        }
        if (message instanceof MapMessage) {
            return "MapMessage";
        }
        if (message instanceof ObjectMessage) {
            return "ObjectMessage";
        }
        if (message instanceof StreamMessage) {
            return "StreamMessage";
        }
        return "Message";
    }

    private static String body(Message message) throws JMSException {
        if (message instanceof TextMessage) {
            return ((TextMessage) message).getText();
        }
        if (message instanceof BytesMessage) {
            BytesMessage bytesMessage = (BytesMessage) message;
            long length = bytesMessage.getBodyLength();
            if (length > Integer.MAX_VALUE) {
                throw new JMSException("BytesMessage body too large: " + length);
            }
            byte[] bytes = new byte[(int) length];
            bytesMessage.readBytes(bytes);
            return new String(bytes, StandardCharsets.UTF_8);
        }
        return null;
    }

    /** JSON string literal for {@code value}, or {@code null}; everything outside ASCII is escaped. */
    static String quote(String value) {
        if (value == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder(value.length() + 2);
        out.append('"');
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            switch (c) {
                case '"':
                    out.append("\\\"");
                    break;
                case '\\':
                    out.append("\\\\");
                    break;
                case '\b':
                    out.append("\\b");
                    break;
                case '\f':
                    out.append("\\f");
                    break;
                case '\n':
                    out.append("\\n");
                    break;
                case '\r':
                    out.append("\\r");
                    break;
                case '\t':
                    out.append("\\t");
                    break;
                default:
                    if (c < 0x20 || c > 0x7e) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        return out.append('"').toString();
    }

    private static String describe(JMSException e) {
        StringBuilder text = new StringBuilder(e.getClass().getSimpleName())
                .append(": ")
                .append(e.getMessage());
        if (e.getErrorCode() != null) {
            text.append(" [code ").append(e.getErrorCode()).append(']');
        }
        Throwable cause = e.getLinkedException() != null ? e.getLinkedException() : e.getCause();
        while (cause != null && cause != e) {
            text.append("; caused by ").append(cause);
            cause = cause.getCause();
        }
        return text.toString();
    }

    /** Bad command line; reported with exit code 2. */
    private static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    private static String usage() {
        return "usage: JmsPeer send <brokerUrl> <queue> <tenant> <text> [key=value ...]\n"
                + "       JmsPeer receive <brokerUrl> <queue> <selector or \"\"> <count> <timeoutMs>";
    }
}
