"""The JMS selector as an AMQP source filter, and the check that the broker's attach reply carries
it back unchanged, without which a receiver is refused: fail closed."""

from __future__ import annotations

from typing import Final

from proton import Described, Terminus, symbol

from boost_tenancy.transports.amqp.subscriptions import Attach

SELECTOR_FILTER: Final = symbol("apache.org:selector-filter:string")
"""The source filter that carries a JMS selector (Artemis; Qpid brokers)."""


def selector_problem(attach: Attach) -> str | None:
    """Why the broker's attach reply does not prove the selector is applied, or None.

    Fail closed: a broker that accepts a filter it does not apply delivers every tenant's
    messages. The reply must carry the filter back, unchanged."""
    selector = attach.spec.selector
    if selector is None:
        return None
    echoed = _selector_of(attach.receiver.remote_source)
    if echoed == selector.render():
        return None
    what = "no selector filter" if echoed is None else f"the filter {echoed!r}"
    return (
        f"refusing to consume {attach.spec.queue!r}: the broker's attach reply carries {what} "
        f"instead of {selector.render()!r}, so it may deliver other tenants' messages"
    )


def _selector_of(source: Terminus | None) -> str | None:
    """The JMS selector in a source's filter map, or None."""
    if source is None:
        return None
    data = source.filter
    data.rewind()
    if not data.next():
        return None
    filters = data.get_object()
    if not isinstance(filters, dict):
        return None
    for value in filters.values():
        if isinstance(value, Described) and value.descriptor == SELECTOR_FILTER:
            return str(value.value)
    return None
