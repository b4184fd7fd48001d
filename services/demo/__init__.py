"""The pipeline demo: every service, three tenants, the sample documents, one table."""
