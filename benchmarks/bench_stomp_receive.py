"""The receiving side of a STOMP connection: stomp.py's frame reader against the toolkit's, in
one run, on the very bytes a broker delivers.

It sends one message with TenantProducer to the broker of BOOST_BROKER_URL, reads its MESSAGE
frame's bytes back with a plain stomp.py connection, and then feeds that frame, 40 to a read,
through two stomp.py connections that never open a socket: one with stomp.py's own reader, one
with the reader `read_frames_with` puts on it (parse, then the listeners). Each round times both
over the same frames (process CPU time); the figure is the ratio stomp.py / toolkit per round,
and its median.

    .venv/bin/python benchmarks/bench_stomp_receive.py [--rounds R] [--frames N]
"""

from __future__ import annotations

import argparse
import os
import queue as queue_mod
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import stomp

sys.path.append(str(Path(__file__).resolve().parents[1]))

from boost_tenancy import TenantProducer, open_transport
from boost_tenancy.application import stomp_settings_from_env
from boost_tenancy.routing import DEFAULT_ROUTING
from boost_tenancy.transports.stomp.parsing import read_frames_with
from boost_tenancy.transports.stomp.settings import StompSettings

FRAMES_PER_READ = 40
TENANT = "org-bench"
QUEUE = "bench.receive"
"""One queue for every run (its one message is read back at once), so runs leave no new queues."""


def delivered_frame(url: str, settings: StompSettings, queue: str) -> bytes:
    """The MESSAGE frame (its bytes before the NUL) the broker delivers for one message the
    toolkit sent to queue (routed by default: the tenant's own broker queue), as a plain stomp.py
    connection to the first address of settings reads it off the socket."""
    transport = open_transport(url, os.environ)
    transport.connect()
    try:
        TenantProducer(transport).send(queue, TENANT, {"n": 1, "text": "x" * 64})
    finally:
        transport.close()
    conn = stomp.Connection12([settings.addresses[0]], auto_decode=False)
    received: queue_mod.SimpleQueue[bytes] = queue_mod.SimpleQueue()
    process_frame = conn.transport.process_frame

    def keep_message_bytes(frame: Any, data: bytes) -> None:
        if frame.cmd == "MESSAGE":
            received.put(data)
        process_frame(frame, data)

    conn.transport.process_frame = keep_message_bytes
    # Without stomp.py's wait (it has no working timeout): the SUBSCRIBE follows the CONNECT on
    # the socket, and the wait for the message below has one.
    conn.connect(settings.username, settings.password, wait=False)
    try:
        conn.subscribe(f"/queue/{DEFAULT_ROUTING.physical(queue, TENANT)}", "1", ack="auto")
        try:
            return received.get(timeout=10)
        except queue_mod.Empty:
            raise SystemExit("no message came back from the broker within 10 s") from None
    finally:
        conn.disconnect()


class Counter(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages = 0

    def on_message(self, frame: Any) -> None:
        self.messages += 1


def cpu_per_frame(frame: bytes, frames: int, *, toolkit: bool) -> float:
    """Microseconds of process CPU per frame through one connection's reader."""
    conn = stomp.Connection12([("127.0.0.1", 1)], auto_decode=False)
    counter = Counter()
    conn.set_listener("counter", counter)
    transport = conn.transport
    if toolkit and not read_frames_with(transport):
        raise SystemExit("the installed stomp.py does not take the toolkit's reader")
    chunk = (frame + b"\x00\n") * FRAMES_PER_READ
    transport.receive = lambda: chunk
    transport.running = True
    reads = max(1, frames // FRAMES_PER_READ)
    began = time.process_time()
    for _ in range(reads):
        transport._BaseTransport__read_frames()
    spent = time.process_time() - began
    if counter.messages != reads * FRAMES_PER_READ:
        raise SystemExit(f"{counter.messages} of {reads * FRAMES_PER_READ} frames were handed on")
    return spent / counter.messages * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frames", type=int, default=20_000, help="frames per reader per round")
    args = parser.parse_args()
    settings = stomp_settings_from_env(os.environ)
    url = os.environ.get("BOOST_BROKER_URL", "stomp://127.0.0.1:61613")
    frame = delivered_frame(url, settings, QUEUE)
    headers = frame.split(b"\n\n", 1)[0].count(b"\n")
    print(f"broker {url}: a MESSAGE of {headers} headers, {len(frame)} bytes; queue {QUEUE}")
    rows: dict[str, list[float]] = {"stomp.py reader": [], "toolkit reader": [], "ratio": []}
    for _ in range(args.rounds):
        raw = cpu_per_frame(frame, args.frames, toolkit=False)
        ours = cpu_per_frame(frame, args.frames, toolkit=True)
        rows["stomp.py reader"].append(raw)
        rows["toolkit reader"].append(ours)
        rows["ratio"].append(raw / ours)
    for name, values in rows.items():
        unit = "x" if name == "ratio" else "us/frame"
        figures = "  ".join(f"{v:8.2f}" for v in values)
        print(f"{name:<16} {unit:>8}  {figures}  median {statistics.median(values):.2f}")
    print("ratio: stomp.py's CPU per frame / the toolkit's, per round (higher is faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
