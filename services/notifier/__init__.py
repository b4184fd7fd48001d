"""Notifier: receives the pipeline's outcome events per tenant (the seed's evt.document.ready)."""
