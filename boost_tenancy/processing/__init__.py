"""Processing: from a delivery to a settled outcome.

processor.py (TenantProcessor, HandlerContext) · outcomes.py · middleware.py · dispatcher.py
(decide) · settle.py (carry out) · runner.py (subscriptions, workers, shutdown) · aio.py (async
handlers and middleware on the runner's event loop).
"""
