"""Where the CPU of each measured path goes: the toolkit's and the raw client's, side by side.

Runs the paths of bench_core.py (STOMP) or bench_amqp.py (AMQP 1.0) once each under yappi's CPU
clock, every thread of the process included (the toolkit's workers, the client's receiver), the
preloading and draining outside the profile, and prints for each path the CPU per message, the
share of each package (the toolkit, the client library, the standard library) and the functions
that spend the most CPU of their own. It answers "what does the toolkit add, and where"; the
throughput ratios themselves come from bench_core.py, without a profiler's overhead.

    BOOST_BROKER_URL=stomp://127.0.0.1:61613 .venv/bin/python benchmarks/profile_paths.py
    .venv/bin/python benchmarks/profile_paths.py --transport amqp --url amqp://guest:guest@127.0.0.1:5672
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yappi

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))

import bench_amqp
import bench_core
from bench_common import Sample


@dataclass(frozen=True)
class ProfiledPath:
    name: str
    side: str
    messages: int
    run: Callable[[], Sample]


PACKAGES = (
    ("boost_tenancy", "/boost_tenancy/"),
    ("stomp.py", "/stomp/"),
    ("proton", "/proton/"),
    ("benchmark", "/benchmarks/"),
)


def package_of(module_path: str) -> str:
    for name, marker in PACKAGES:
        if marker in module_path:
            return name
    return "standard library and others"


@contextmanager
def outside_the_profile() -> Iterator[None]:
    running = yappi.is_running()
    if running:
        yappi.stop()
    try:
        yield
    finally:
        if running:
            yappi.start()


def paused(call: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with outside_the_profile():
            return call(*args, **kwargs)

    return wrapper


def stomp_paths(args: argparse.Namespace) -> list[ProfiledPath]:
    _, parsed = bench_core.parse_args(["--messages", str(args.messages)])
    cfg = bench_core.stomp_config(parsed)
    cfg = replace(cfg, flavour=bench_core.broker_info(cfg).flavour)
    bench_core.preload = paused(bench_core.preload)
    bench_core.drain = paused(bench_core.drain)
    n, m = args.messages, args.confirmed
    return [
        ProfiledPath(
            "consume", "toolkit", n, lambda: bench_core.consume_toolkit(cfg, n, cfg.workers)
        ),
        ProfiledPath("consume", "raw", n, lambda: bench_core.consume_raw(cfg, n, hand_off=True)),
        ProfiledPath(
            "batch publish", "toolkit", n, lambda: bench_core.publish_toolkit(cfg, n, batch=True)
        ),
        ProfiledPath(
            "batch publish", "raw", n, lambda: bench_core.publish_raw(cfg, n, confirm="last")
        ),
        ProfiledPath(
            "confirmed send", "toolkit", m, lambda: bench_core.publish_toolkit(cfg, m, batch=False)
        ),
        ProfiledPath(
            "confirmed send", "raw", m, lambda: bench_core.publish_raw(cfg, m, confirm="each")
        ),
    ]


def amqp_paths(args: argparse.Namespace) -> list[ProfiledPath]:
    parser, parsed = bench_core.parse_args(
        ["--transport", "amqp", "--url", args.url, "--messages", str(args.messages)]
    )
    cfg = bench_core.amqp_config(parser, parsed)
    transport = bench_amqp.connected_transport(cfg)
    try:
        cfg = replace(cfg, flavour=transport.flavour)
    finally:
        transport.close()
    bench_amqp.preload = paused(bench_amqp.preload)
    bench_amqp.drain = paused(bench_amqp.drain)
    n, m = args.messages, args.confirmed
    return [
        ProfiledPath(
            "consume", "toolkit", n, lambda: bench_amqp.consume_toolkit(cfg, n, cfg.workers)
        ),
        ProfiledPath("consume", "raw", n, lambda: bench_amqp.consume_raw(cfg, n)),
        ProfiledPath(
            "batch publish", "toolkit", n, lambda: bench_amqp.publish_toolkit(cfg, n, batch=True)
        ),
        ProfiledPath(
            "batch publish", "raw", n, lambda: bench_amqp.publish_raw(cfg, n, "pipelined")
        ),
        ProfiledPath(
            "confirmed send", "toolkit", m, lambda: bench_amqp.publish_toolkit(cfg, m, batch=False)
        ),
        ProfiledPath(
            "confirmed send", "raw", m, lambda: bench_amqp.publish_raw(cfg, m, "blocking")
        ),
    ]


def profile(path: ProfiledPath, top: int) -> str:
    yappi.clear_stats()
    yappi.set_clock_type("cpu")
    yappi.start(builtins=False, profile_threads=True)
    try:
        sample = path.run()
    finally:
        yappi.stop()
    stats = yappi.get_func_stats()
    by_package: dict[str, float] = defaultdict(float)
    functions: list[tuple[float, str]] = []
    for stat in stats:
        package = package_of(stat.module)
        by_package[package] += stat.tsub
        functions.append(
            (stat.tsub, f"{package}: {stat.name} ({Path(stat.module).name}:{stat.lineno})")
        )
    own = sum(by_package.values()) or 1.0
    lines = [
        f"== {path.name}, {path.side}: {path.messages} messages, "
        f"{sample.cpu_us:.0f} us CPU per message under the profiler",
        "   by package (CPU of their own functions): "
        + ", ".join(
            f"{name} {share / own:.0%}"
            for name, share in sorted(by_package.items(), key=lambda item: -item[1])
        ),
    ]
    for tsub, name in sorted(functions, reverse=True)[:top]:
        lines.append(f"   {tsub / path.messages * 1e6:8.1f} us/msg  {name}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transport", choices=("stomp", "amqp"), default="stomp")
    parser.add_argument(
        "--url",
        default="amqp://guest:guest@127.0.0.1:5672",
        help="the AMQP broker (--transport amqp)",
    )
    parser.add_argument(
        "--messages", type=int, default=3000, help="messages of the consume and batch paths"
    )
    parser.add_argument(
        "--confirmed", type=int, default=500, help="messages of the confirmed-send paths"
    )
    parser.add_argument("--top", type=int, default=12, help="functions listed per path")
    parser.add_argument(
        "--only",
        action="append",
        choices=("consume", "batch publish", "confirmed send"),
        help="a path to profile (repeatable); all by default",
    )
    args = parser.parse_args(argv)
    paths = amqp_paths(args) if args.transport == "amqp" else stomp_paths(args)
    for path in paths:
        if args.only and path.name not in args.only:
            continue
        print(profile(path, args.top), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
