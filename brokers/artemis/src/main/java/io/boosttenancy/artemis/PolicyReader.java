/*
 * boost-tenancy: the tenants' run-time policies, read from the toolkit's policy store (the
 * boost_tenant_policies table `boost-tenancy policy set` writes, on PostgreSQL or SQLite) over
 * JDBC. A field a policy leaves NULL keeps the plugin's default.
 */
package io.boosttenancy.artemis;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HashMap;
import java.util.Map;

final class PolicyReader {

    private static final String QUERY = "SELECT tenant, messages_per_s, bytes_per_s, burst_s,"
        + " max_message_bytes, max_queued_messages FROM boost_tenant_policies";

    private final String url;
    private final String user;
    private final String password;
    private final TenantLimits.Limits defaults;
    private volatile Map<String, TenantLimits.Limits> last = Map.of();

    PolicyReader(String url, String user, String password, TenantLimits.Limits defaults) {
        if (!url.startsWith("jdbc:")) {
            throw new IllegalArgumentException("boost-tenancy tenant plugin: policy-store-url must"
                + " be a JDBC URL (jdbc:postgresql://host/db or jdbc:sqlite:/path), got "
                + url.replaceAll("//[^@/]*@", "//***@"));
        }
        this.url = url;
        this.user = user;
        this.password = password;
        this.defaults = defaults;
    }

    /** Every tenant's limits with its policy applied; a tenant without a row is not listed. */
    Map<String, TenantLimits.Limits> read() throws SQLException {
        Map<String, TenantLimits.Limits> read = new HashMap<>();
        try (Connection connection = user == null || user.isEmpty()
                ? DriverManager.getConnection(url)
                : DriverManager.getConnection(url, user, password);
             Statement statement = connection.createStatement()) {
            statement.setQueryTimeout(10);
            try (ResultSet rows = statement.executeQuery(QUERY)) {
                while (rows.next()) {
                    String tenant = rows.getString(1);
                    if (!TenantNames.isTenant(tenant)) {
                        continue; // the toolkit never writes one; a hand-made row changes nothing
                    }
                    read.put(tenant, new TenantLimits.Limits(
                        longOr(rows, 5, defaults.maxMessageBytes),
                        doubleOr(rows, 2, defaults.messagesPerSecond),
                        doubleOr(rows, 3, defaults.bytesPerSecond),
                        doubleOr(rows, 4, defaults.burstSeconds),
                        longOr(rows, 6, defaults.maxQueuedMessages)));
                }
            } catch (SQLException e) {
                if (String.valueOf(e.getMessage()).toLowerCase().contains("no such table")
                        || "42P01".equals(e.getSQLState())) {
                    read.clear(); // no policy written yet
                } else {
                    throw e;
                }
            }
        }
        last = Map.copyOf(read);
        return last;
    }

    /** What the last read gave. */
    Map<String, TenantLimits.Limits> last() {
        return last;
    }

    private static double doubleOr(ResultSet rows, int column, double fallback) throws SQLException {
        double value = rows.getDouble(column);
        return rows.wasNull() ? fallback : value;
    }

    private static long longOr(ResultSet rows, int column, long fallback) throws SQLException {
        long value = rows.getLong(column);
        return rows.wasNull() ? fallback : value;
    }
}
