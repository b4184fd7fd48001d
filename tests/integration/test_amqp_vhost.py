"""An AMQP URL's virtual host is honoured or refused, never ignored: RabbitMQ reads it from the
open frame as "vhost:NAME" (a bare name reached its default virtual host), and a broker without
virtual hosts (Artemis) is refused a URL that names one."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from boost_tenancy.errors import TransportError
from boost_tenancy.messages import WireMessage
from boost_tenancy.transports.amqp import AmqpTransport
from boost_tenancy.transports.registry import open_transport
from tests.conftest import unique_queue

pytestmark = pytest.mark.amqp_broker


def test_a_virtual_host_the_broker_does_not_have_is_refused_naming_it(amqp_url: str) -> None:
    parts = urlsplit(amqp_url)
    url = urlunsplit(parts._replace(path="/no-such-vhost"))
    transport = open_transport(url)
    try:
        with pytest.raises(TransportError, match="virtual host 'no-such-vhost'"):
            transport.connect()
    finally:
        transport.close()


def test_a_virtual_host_the_broker_has_is_where_the_queue_is_made(amqp_url: str) -> None:
    """RabbitMQ: the queue of a send over a URL naming a virtual host is made in that one."""
    probe = open_transport(amqp_url)
    probe.connect()
    try:
        assert isinstance(probe, AmqpTransport)
        if not probe.flavour.virtual_hosts:
            pytest.skip(f"{probe.server} has no virtual hosts (its refusal is tested above)")
    finally:
        probe.close()
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not on PATH: this RabbitMQ's virtual hosts cannot be made")
    vhost = f"boost-test-{uuid.uuid4().hex[:8]}"
    user = urlsplit(amqp_url).username or "guest"
    ctl = ["rabbitmqctl", "-q"]
    subprocess.run([*ctl, "add_vhost", vhost], check=True, timeout=60)
    try:
        subprocess.run(
            [*ctl, "set_permissions", "-p", vhost, user, ".*", ".*", ".*"], check=True, timeout=60
        )
        queue = unique_queue("vhost")
        transport = open_transport(urlunsplit(urlsplit(amqp_url)._replace(path=f"/{vhost}")))
        transport.connect()
        try:
            transport.send(queue, WireMessage(body="here", properties={}))
        finally:
            transport.close()
        listed = subprocess.run(
            [*ctl, "list_queues", "-p", vhost, "name", "messages"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert f"{queue}\t1" in listed.splitlines()
    finally:
        subprocess.run([*ctl, "delete_vhost", vhost], check=False, timeout=60)
