"""proton's link, session and delivery events at the AMQP connection handler, each handed to the
part it is for: a sender's to sending.py, a receiver's to receiving.py."""

from __future__ import annotations

from typing import Any

from cproton import pn_delivery_link
from proton import Endpoint, Event, Link

from boost_tenancy.transports.amqp.events import describe, given
from boost_tenancy.transports.amqp.loop import EventLoop
from boost_tenancy.transports.amqp.receiving import Receiving
from boost_tenancy.transports.amqp.sending import Sending


class LinkEvents:
    """The link, session and delivery events of AmqpConnection (a base of it), routed to the
    parts it owns. Loop thread only."""

    receiving: Receiving
    sending: Sending
    loop: EventLoop

    def on_link_remote_open(self, event: Event) -> None:
        link = given(event.link, "link")
        if link.is_receiver:
            self.receiving.link_opened(link)

    def on_link_flow(self, event: Event) -> None:
        sender = event.sender
        if sender is not None:
            self.sending.flowed(sender)

    def on_link_remote_close(self, event: Event) -> None:
        link: Link = given(event.link, "link")
        reason = describe(link.remote_condition)
        link.close()
        if link.is_sender:
            self.sending.link_closed(link, reason)
        else:
            self.receiving.link_closed(link, reason)

    def on_session_remote_close(self, event: Event) -> None:
        """The broker ended a session: its links end with it, with the session's reason.
        RabbitMQ ends the session of a link it cannot attach (a queue that exists with other
        properties: durable, exclusive, auto-delete), and a send waiting on that link would
        otherwise wait out its confirmation timeout without saying why."""
        session = given(event.session, "session")
        reason = describe(session.remote_condition)
        session.close()
        link = session.connection.link_head(0)
        while link is not None:
            following = link.next(0)
            if link.session == session and not link.state & Endpoint.LOCAL_CLOSED:
                link.close()
                if link.is_sender:
                    self.sending.link_closed(link, reason)
                else:
                    self.receiving.link_closed(link, reason)
            link = following

    def delivered(self, impl: Any) -> bool:
        """A delivery event's pn_delivery_t, before proton wraps the event (EventLoop's
        shortcut): a receiver's delivery or a sent message's outcome is taken by its part;
        anything else (a transaction's coordinator) goes on to on_delivery, wrapped."""
        if self.receiving.delivered(impl, pn_delivery_link(impl)):
            return True
        return self.sending.delivered(impl)

    def on_delivery(self, event: Event) -> None:
        delivery = given(event.delivery, "delivery")
        link = given(event.link, "link")
        if link.is_sender:
            self.sending.update(delivery)
        elif delivery.readable and not delivery.partial:
            self.loop.awake()
            self.receiving.incoming(link, delivery)
