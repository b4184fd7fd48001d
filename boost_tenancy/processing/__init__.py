"""Processing: from a delivery to a settled outcome.

processor.py (TenantProcessor, HandlerContext) · outcomes.py · middleware.py · dispatcher.py
(decide) · settle.py (carry out) · runner.py (subscriptions, workers, shutdown; its settings in
runner_settings.py, its probe values in runner_health.py) · aio.py (async handlers and middleware,
run on the runner's event loop, event_loop.py, through async_chain.py and worker_hop.py).
"""
