"""Messages coming in to the in-process AMQP peer: transfers on clients' sender links, and
transactions declared, holding sends and acceptances, and discharged."""

from __future__ import annotations

import contextlib
import socket
import struct
from typing import TYPE_CHECKING, Any, cast

from proton import Condition, Delivery, Described, Link, Message

from boost_tenancy.testing import amqp_peer
from boost_tenancy.testing.amqp_peer.state import (
    _Conn,
    _Consumer,
    _Entry,
    _remove,
    _Target,
    _Txn,
)
from boost_tenancy.testing.amqp_peer.wire import (
    _ACCEPTED,
    _DECLARE,
    _DECLARED,
    _DISCHARGE,
    _TRANSACTIONAL_STATE,
    _binary,
)
from boost_tenancy.transports.amqp.events import Timer
from boost_tenancy.transports.artemis_requests import MANAGEMENT_ADDRESS

if TYPE_CHECKING:
    from boost_tenancy.testing.amqp_peer.engine import _Engine


class _Transfers:
    """The engine's incoming transfers and transactions. Each transfer is answered through the
    package's _settle, looked up there at every answer, so replacing it there reaches them all."""

    def __init__(self, engine: _Engine) -> None:
        self._engine = engine

    def on_transfer(self, link: Link, delivery: Delivery) -> None:
        engine = self._engine
        if not delivery.readable or delivery.partial:
            return
        encoded = cast(bytes, link.recv(delivery.pending))
        link.advance()
        if link.credit < engine.profile.credit // 2:
            link.flow(engine.profile.credit - link.credit)
        if link in engine._coordinators:
            self.on_control(engine._coordinators[link], delivery, encoded)
            return
        target = engine._producers.get(link)
        conn = engine._conns.get(link.connection)
        if target is None or conn is None or conn.crashed:
            return  # a crashed RabbitMQ session takes nothing more
        if not engine._artemis and self._over_limit(target):
            self._crash(conn)
            return
        message = Message()
        message.decode(encoded)
        if delivery.remote_state == _TRANSACTIONAL_STATE:
            txn_id = _binary(next(iter(delivery.remote.data or []), None))
            txn = engine._conns[link.connection].txns.get(txn_id)
            if txn is None:
                amqp_peer._settle(
                    delivery, Delivery.REJECTED, Condition("amqp:transaction:unknown-id")
                )
                return
            txn.sends.append((target, encoded, message))
            # held until the discharge; the answer is transactional-state{txn-id, accepted}
            amqp_peer._settle(
                delivery, _TRANSACTIONAL_STATE, data=[txn_id, Described(_ACCEPTED[0], [])]
            )
        elif target.address is None and message.address is None:
            amqp_peer._settle(
                delivery, Delivery.REJECTED, Condition("amqp:not-found", "no address")
            )
        elif engine._artemis and not engine.manage and target.address == MANAGEMENT_ADDRESS:
            refused = (
                "AMQ229032: User: guest does not have permission='MANAGE' on address "
                f"{MANAGEMENT_ADDRESS}"
            )
            amqp_peer._settle(
                delivery, Delivery.REJECTED, Condition("amqp:unauthorized-access", refused)
            )
        else:
            engine.routing.route(target, encoded, message)
            amqp_peer._settle(delivery, Delivery.ACCEPTED)

    def _over_limit(self, target: _Target) -> bool:
        """RabbitMQ: the queue is at its max-length (reject-publish), counting ready messages."""
        engine = self._engine
        limit = engine.length_limits.get(str(target.address))
        queue = engine._queues.get(str(target.address))
        if limit is None or queue is None:
            return False
        return sum(1 for entry in queue.entries if entry.holder is None) >= limit

    def _crash(self, conn: _Conn) -> None:
        """RabbitMQ 3.10.8's refusal (measured; rabbitmq-server#2839): its AMQP 1.0 session has
        no clause for the queue's negative confirm and crashes. The message is neither stored
        nor settled, nothing more is taken on the connection, and the connection ends
        refusal_close_s later, without a close frame."""
        conn.crashed = True

        def end() -> None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

        engine = self._engine
        engine.pending_timers.append(engine.container.schedule(engine.refusal_close_s, Timer(end)))

    def on_control(self, conn: _Conn, delivery: Delivery, encoded: bytes) -> None:
        control = Message()
        control.decode(encoded)
        body = control.body
        descriptor = body.descriptor if isinstance(body, Described) else None
        fields = body.value if isinstance(body, Described) and isinstance(body.value, list) else []
        if descriptor in _DECLARE:
            txn_id = struct.pack(">Q", next(self._engine._txn_ids))
            conn.txns[txn_id] = _Txn(txn_id)
            amqp_peer._settle(delivery, _DECLARED, data=[txn_id])
        elif descriptor in _DISCHARGE and fields and (txn := conn.txns.get(_binary(fields[0]))):
            fail = len(fields) > 1 and bool(fields[1])
            duplicate = any(self._engine.routing.duplicate(t, m) for t, _, m in txn.sends)
            self.discharge(conn, txn, fail=fail or duplicate)
            if duplicate and not fail:
                # Artemis refuses the commit of a transaction that sent a duplicate (measured on
                # 2.44: "the broker refused to commit the transaction"); it rolls back.
                amqp_peer._settle(
                    delivery,
                    Delivery.REJECTED,
                    Condition("amqp:transaction:rollback", "duplicate message detected"),
                )
                return
            amqp_peer._settle(delivery, Delivery.ACCEPTED)
        else:
            amqp_peer._settle(delivery, Delivery.REJECTED, Condition("amqp:transaction:unknown-id"))

    def accept_in_txn(self, consumer: _Consumer, delivery: Delivery, entry: _Entry) -> None:
        data = delivery.remote.data or []
        txn = consumer.conn.txns.get(_binary(data[0])) if data else None
        outcome = data[1] if len(data) > 1 else None
        if txn is not None and isinstance(outcome, Described) and outcome.descriptor in _ACCEPTED:
            entry.txn = txn
            txn.accepted.append((consumer, delivery, entry))
            if not delivery.settled:  # Artemis confirms with transactional-state{txn, accepted}
                delivery.local.data = cast(Any, [txn.id, Described(_ACCEPTED[0], [])])
                delivery.update(_TRANSACTIONAL_STATE)

    def discharge(self, conn: _Conn, txn: _Txn, fail: bool) -> None:
        engine = self._engine
        del conn.txns[txn.id]
        if not fail:
            for target, encoded, message in txn.sends:
                engine.routing.route(target, encoded, message)
        for consumer, delivery, entry in txn.accepted:
            entry.txn = None
            consumer.in_flight.pop(delivery, None)
            delivery.settle()
            entry.holder = None
            if fail:
                engine._pump(entry.queue)  # deliverable again, not counted
            else:
                _remove(entry)
