"""What a calling thread does with one AmqpConnection: open it, run work on its loop once the
connection is open and wait for the outcome within the transport's timeouts, send groups of
messages each confirmed on its own, and stop it.

A transport has one connection for its subscriptions, and on a broker whose refusal of a message
ends the whole connection (RabbitMQ 3.x) a second one for what it sends (transport.py); both are
reached through these calls alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout

from boost_tenancy.errors import BoostTenancyError, NotConfirmedError, TransportError
from boost_tenancy.transports.amqp.connection import AmqpConnection
from boost_tenancy.transports.amqp.encoding import EncodedMessage
from boost_tenancy.transports.amqp.waiters import all_settled, resolve


def open_connection(engine: AmqpConnection) -> None:
    """Start engine and wait for its first connection: each broker of a failover list is tried
    once, each within connect_timeout_s. TransportError says why it failed (the caller stops
    engine)."""
    settings = engine.settings
    opened = engine.start()
    try:
        opened.result(settings.connect_timeout_s * len(settings.addresses) + 1.0)
    except FutureTimeout:
        raise TransportError(
            f"cannot connect to the AMQP broker at {engine.url}: no answer within "
            f"{settings.connect_timeout_s} s"
        ) from None


def when_open(engine: AmqpConnection, what: str, work: Callable[[Future[None]], None]) -> None:
    """Run work on engine's loop once its connection is open and wait for its future: at most
    reconnect_wait_s for a lost connection to come back, then confirm_timeout_s.

    Raises TransportError when the work failed or never started (nothing was sent), and
    NotConfirmedError when it was sent and no outcome came: then the connection is given up, as
    STOMP's is on a missing receipt, so the broker redelivers what it held and no delivery
    waits for good."""
    done: Future[None] = Future()
    started: list[bool] = []

    def start() -> None:
        if done.cancelled():
            return
        started.append(True)
        if not engine.is_open:
            resolve(done, TransportError(f"{what}: the AMQP connection is closed"))
            return
        try:
            work(done)
        except BoostTenancyError as exc:
            resolve(done, exc)
        except Exception as exc:  # a proton error must reach the caller, not the loop
            resolve(done, TransportError(f"{what} failed: {exc}"))

    engine.loop.post(lambda: engine.when_open(start))
    timeout = engine.settings.reconnect_wait_s + engine.settings.confirm_timeout_s
    try:
        done.result(timeout)
    except FutureTimeout:
        if done.cancel():
            engine.loop.post(lambda: engine.forget_waiting(start))
            text = f"{what}: no confirmation from the broker within {timeout} s"
            if not started:
                raise TransportError(text) from None  # never sent: nothing is stored
            engine.loop.post(lambda: engine.abandon(f"no confirmation within {timeout} s"))
            raise NotConfirmedError(text) from None
        done.result(0)  # its outcome came as the wait ended: a confirmed send stays confirmed
    except CancelledError:
        raise TransportError(f"{what}: abandoned") from None


def stop(engine: AmqpConnection) -> None:
    """Close engine's connection and end its loop. The close frame goes out and the broker
    answers within moments; a broker that stopped reading must not hold a process beyond its
    grace period: then the socket is just ended."""
    loop = engine.loop
    patience = min(engine.settings.connect_timeout_s, 2.0)
    closing = loop.submit(engine.close)
    try:
        closing.result(patience).result(patience)
    except (FutureTimeout, BoostTenancyError, CancelledError):
        with contextlib.suppress(FutureTimeout, BoostTenancyError, CancelledError):
            loop.submit(engine.force_close).result(patience)  # unless the loop is gone
    loop.stop(patience)


def send_each(
    engine: AmqpConnection,
    what: str,
    groups: Sequence[Sequence[tuple[str, EncodedMessage]]],
    *,
    as_queue: bool = True,
) -> list[BaseException | None]:
    """Send every group in one pass, each confirmed on its own; returns each group's error (None:
    the broker accepted every message of it). Raises as when_open does when none could go out,
    or when the outcomes did not all come in time."""
    confirmed: list[Future[None]] = [Future() for _ in groups]

    def work(done: Future[None]) -> None:
        for items, future in zip(groups, confirmed, strict=True):
            engine.send(items, future, as_queue=as_queue)
        all_settled(confirmed, done)

    when_open(engine, what, work)
    return [future.exception() for future in confirmed]
