"""/metrics through prometheus_client (the `metrics` extra): the toolkit's own families (rendered
as Prometheus text by the accounting, the handling metrics, the queue gauges and the runner's
health) beside the process's (CPU, memory, file descriptors) and the Python runtime's (version,
garbage collection), in the format the scraper asks for: Prometheus text by default, OpenMetrics
when its Accept header names it. Without prometheus_client, the toolkit's own families alone, as
Prometheus text (TextExposition)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class TextExposition:
    """The toolkit's own families as Prometheus text, whatever the scraper asks for: what
    /metrics serves without the `metrics` extra."""

    def __init__(self, text: Callable[[], str]) -> None:
        self._text = text

    def render(self, accept: str) -> tuple[str, bytes]:
        return PROMETHEUS_TEXT, self._text().encode()


def exposition(text: Callable[[], str]) -> Exposition | TextExposition:
    """Exposition with prometheus_client installed, else TextExposition."""
    try:
        return Exposition(text)
    except ImportError:
        return TextExposition(text)


class Exposition:
    """The process and runtime collectors, and the families text() gives. Prometheus text is
    text() as it is, followed by the collectors' families; OpenMetrics has text() parsed at each
    scrape, so that every family keeps its name, help, type and labels."""

    def __init__(self, text: Callable[[], str]) -> None:
        # Imported here: serving metrics is optional, and a process without a metrics port
        # never loads the client.
        from prometheus_client import (  # noqa: PLC0415
            GC_COLLECTOR,
            PLATFORM_COLLECTOR,
            PROCESS_COLLECTOR,
            CollectorRegistry,
        )
        from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

        self._text = text
        self._parse = text_string_to_metric_families
        self._runtime = CollectorRegistry(auto_describe=False)
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self._runtime.register(collector)
            self._registry.register(collector)

    def collect(self) -> Iterator[Metric]:
        """The toolkit's families, as prometheus_client reads them (a Collector)."""
        yield from self._parse(self._text())

    def render(self, accept: str) -> tuple[str, bytes]:
        """The content type and body of one scrape, in the format accept asks for."""
        from prometheus_client.exposition import choose_encoder, generate_latest  # noqa: PLC0415

        encode, content_type = choose_encoder(accept)
        if content_type.startswith("text/plain"):
            # The toolkit's families exactly as they always were, then the process's.
            return content_type, self._text().encode() + generate_latest(self._runtime)
        return content_type, encode(self._registry)


__all__ = ["Exposition", "TextExposition", "exposition"]
