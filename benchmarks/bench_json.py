"""JSON encode and decode of message bodies: the standard library against msgspec, in one run.

Two representative bodies: a small command (about 200 bytes, what most queues carry) and a
document of about 10 KB (a page list with text). Each is measured through the toolkit's codec
(boost_tenancy.codec, with its rules for Decimal, datetime and the rest) with each backend, and
through the raw library calls, so the codec's own overhead shows too. Figures are medians over
the rounds of the time per operation; the ratio is stdlib / msgspec within each round, then its
median.

    .venv/bin/python benchmarks/bench_json.py [--rounds R] [--number N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import msgspec

from boost_tenancy import codec

SMALL: dict[str, Any] = {
    "documentUUID": str(uuid.UUID(int=1)),
    "action": "resize",
    "sizes": [{"width": 640, "height": 480}, {"width": 64, "height": 48}],
    "format": "webp",
    "priority": 3,
    "requestedBy": "user-42",
    "tenantUUID": "org-acme",
}
DOCUMENT: dict[str, Any] = {
    "documentUUID": str(uuid.UUID(int=2)),
    "title": "Quarterly report",
    "pages": [
        {"n": n, "text": "lorem ipsum dolor sit amet, consectetur " * 2, "words": n * 10}
        for n in range(90)
    ],
    "tenantUUID": "org-acme",
}
# What the codec adds over JSON's own types: a Decimal, a UUID, a datetime.
TYPED: dict[str, Any] = {**SMALL, "amount": Decimal("12.50"), "documentUUID": uuid.UUID(int=1)}


def per_op_us(fn: Callable[[], object], number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6


def measure(rounds: int, number: int) -> list[tuple[str, float, float, float]]:
    """(operation, stdlib µs, msgspec µs, stdlib/msgspec), medians over the rounds."""
    pairs: list[tuple[str, Callable[[], object], Callable[[], object]]] = []
    for label, body in (("small", SMALL), ("10 KB", DOCUMENT), ("small, typed", TYPED)):
        text = codec.encode(body)

        def encode(body: dict[str, Any] = body) -> object:
            return codec.encode(body)

        def decode(text: str = text) -> object:
            return codec.decode(text)

        pairs.append((f"codec encode {label} ({len(text)} B)", encode, encode))
        pairs.append((f"codec decode {label}", decode, decode))
    encoder = msgspec.json.Encoder()
    small_text = json.dumps(SMALL)
    pairs.append(
        (
            "raw encode small",
            lambda: json.dumps(SMALL, separators=(",", ":"), ensure_ascii=False),
            lambda: encoder.encode(SMALL).decode(),
        )
    )
    pairs.append(
        (
            "raw decode small",
            lambda: json.loads(small_text),
            lambda: msgspec.json.decode(small_text),
        )
    )
    samples: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for name, slow_fn, fast_fn in pairs:
            codec.use_backend(codec.STDLIB)
            slow = per_op_us(slow_fn, number)
            codec.use_backend(codec.MSGSPEC)
            fast = per_op_us(fast_fn, number)
            samples.setdefault(name, []).append((slow, fast))
    codec.use_backend(None)
    return [
        (
            name,
            statistics.median(slow for slow, _ in values),
            statistics.median(fast for _, fast in values),
            statistics.median(slow / fast for slow, fast in values),
        )
        for name, values in samples.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, msgspec {msgspec.__version__}")
    print(f"{'operation':<36}{'stdlib µs':>11}{'msgspec µs':>12}{'stdlib/msgspec':>16}")
    for name, slow, fast, ratio in measure(args.rounds, args.number):
        print(f"{name:<36}{slow:>11.2f}{fast:>12.2f}{ratio:>15.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
