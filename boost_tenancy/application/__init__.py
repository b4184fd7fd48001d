"""The application layer: settings read from the environment (config), a runner assembled from
them (runner, wiring) and run until a signal (run). The CLI and the services start here."""
