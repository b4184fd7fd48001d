"""An asynchronous HTTP intake: FastAPI sending each tenant's events with AsyncTenantProducer."""
