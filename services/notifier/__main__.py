"""Run the Notifier for BOOST_TENANTS until SIGTERM."""

from services.common.runtime import run_service
from services.notifier.processor import Notifier

raise SystemExit(run_service(lambda _settings: Notifier()))
