"""One local broker process living in one instance directory: its pid file, its lock, its
start-up wait and its stop, shared by the Classic (devtools.local_broker) and Artemis
(devtools.local_artemis) managers, which say only how to launch and how to probe theirs."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from devtools.broker_probes import port_in_use
from devtools.broker_settings import LocalBrokerError

LOG_TAIL_LINES: Final = 30
POLL_INTERVAL_S: Final = 0.2
KILL_WAIT_S: Final = 10.0


def tail(path: Path, lines: int) -> list[str]:
    """The last lines of a file, or none when it does not exist."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for line in deque(handle, maxlen=lines)]
    except FileNotFoundError:
        return []


class BrokerProcess:
    """Starts, stops and inspects one broker process whose files live under home.

    Subclasses give the command line (whose ``marker`` argument recognises the process as this
    instance's), the readiness probe and the log files to show when start-up fails."""

    name = "broker"

    def __init__(
        self,
        home: Path,
        *,
        start_timeout_s: float,
        logs: str = "logs",
        log: str = "broker.log",
        console: str = "broker.out",
    ) -> None:
        # Absolute, because it is matched against the broker's command line to recognise it.
        self.home = home.expanduser().resolve()
        self.start_timeout_s = start_timeout_s
        self.logs_dir = self.home / logs
        self.pid_file = self.home / "broker.pid"
        self.log_file = self.logs_dir / log
        """The broker's own log."""
        self.console_file = self.logs_dir / console
        """The JVM's console output of the latest start."""
        # Kept so a broker started by this process is reaped: an unreaped child stays a zombie,
        # which signal 0 reports as alive.
        self._process: subprocess.Popen[bytes] | None = None

    # -- what a subclass says ----------------------------------------------------------------

    @property
    def marker(self) -> str:
        """An argument of the broker's command line that only this instance's process has."""
        raise NotImplementedError

    @property
    def log_files(self) -> Sequence[Path]:
        return (self.log_file, self.console_file)

    def is_ready(self) -> bool:
        raise NotImplementedError

    def where(self) -> str:
        """Where readiness is probed, for the error when it never comes."""
        raise NotImplementedError

    def _ports(self) -> Mapping[str, tuple[str, int]]:
        """The ports the broker listens on, by name: (host, port)."""
        raise NotImplementedError

    def _launch(self) -> int:
        """Write the configuration and spawn the broker (the lock held); returns its pid."""
        raise NotImplementedError

    def _start(self, advice: str, *, wait: bool = True) -> bool:
        """Start the broker and wait until it is ready (wait=False: only launch it); one already
        running is kept, and a port another process holds is refused with advice (what to stop
        or change). True when this call launched it: decided under the lock, so a script that
        stops only what it started asks start, not a status read before it."""
        with self._locked():
            pid = self.running_pid()
            launched = pid is None
            if pid is None:
                self._remove_pid_file()
                for name, (host, port) in self._ports().items():
                    if port_in_use(host, port):
                        raise LocalBrokerError(
                            f"port {port} ({name}) on {host} is in use by another process, not "
                            f"by the {self.name} in {self.home}; {advice}"
                        )
                pid = self._launch()
        # Waited for without the lock: a broker that becomes ready only later (a backup waiting
        # for its live broker) must not keep stop() or kill() out meanwhile. One started by
        # someone else moments ago is waited for rather than started twice.
        if wait and not self.is_ready():
            self._wait_ready(pid, launched=launched)
        return launched

    # -- life cycle ---------------------------------------------------------------------------

    def stop(self, timeout_s: float = 30) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after timeout_s; nothing running is fine."""
        if not self.home.exists():
            return
        with self._locked():
            pid = self._read_pid()
            if pid is not None and self._is_ours(pid):
                # SIGTERM runs the JVM's shutdown hook, which closes the store cleanly.
                self._signal(pid, signal.SIGTERM)
                if not self._wait_exit(pid, timeout_s):
                    self._signal(pid, signal.SIGKILL)
                    if not self._wait_exit(pid, KILL_WAIT_S):
                        raise LocalBrokerError(f"{self.name} pid {pid} survived SIGKILL")
            self._remove_pid_file()

    def kill(self) -> None:
        """SIGKILL the broker without a clean shutdown, as a crash would."""
        if not self.home.exists():
            return
        with self._locked():
            pid = self._read_pid()
            if pid is not None and self._is_ours(pid):
                self._signal(pid, signal.SIGKILL)
                if not self._wait_exit(pid, KILL_WAIT_S):
                    raise LocalBrokerError(f"{self.name} pid {pid} survived SIGKILL")
            self._remove_pid_file()

    def is_running(self) -> bool:
        """True when the process named by the pid file is alive and is this instance's broker."""
        pid = self._read_pid()
        return pid is not None and self._is_ours(pid)

    def is_alive(self) -> bool:
        """True while the process named by the pid file lives, whether or not it carries its
        marker yet (a start script execs the JVM only after a while)."""
        pid = self._read_pid()
        return pid is not None and self._is_alive(pid)

    def running_pid(self) -> int | None:
        pid = self._read_pid()
        return pid if pid is not None and self._is_ours(pid) else None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the broker's logs, for error reports."""
        sections = []
        for path in self.log_files:
            last = tail(path, lines)
            if last:
                sections.append(f"--- last {len(last)} lines of {path} ---\n" + "\n".join(last))
        return "\n".join(sections) if sections else f"(no {self.name} log in {self.logs_dir})"

    # -- for subclasses -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # Serialises start/stop across processes (parallel test workers share one instance).
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / "broker.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _spawn(self, command: Sequence[str], *, env: dict[str, str] | None = None) -> int:
        """Run command in a session of its own, output to the console file; the pid file names
        it."""
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        with self.console_file.open("wb") as console:
            try:
                # A new session keeps the broker alive after the shell or test run that started
                # it, and out of reach of a Ctrl-C meant for that shell.
                self._process = subprocess.Popen(
                    list(command),
                    cwd=self.home,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LocalBrokerError(f"cannot run {command[0]}: {exc}") from exc
        pid = self._process.pid
        temporary = self.pid_file.with_suffix(".pid.tmp")
        temporary.write_text(f"{pid}\n", encoding="ascii")
        temporary.replace(self.pid_file)
        return pid

    def _wait_ready(self, pid: int, *, launched: bool) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if not self._is_alive(pid):
                self._remove_pid_file()
                code = self._process.returncode if self._process is not None else None
                how = f" with exit code {code}" if code is not None else ""
                raise LocalBrokerError(
                    f"the {self.name} exited{how} during start-up (see {self.log_files[0]})\n"
                    + self.log_tail()
                )
            if self.is_ready():
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_INTERVAL_S)
        log_tail = self.log_tail()
        if launched:
            # A broker that never became ready is useless and would hold the ports.
            with contextlib.suppress(LocalBrokerError):
                self._signal(pid, signal.SIGKILL)
                self._wait_exit(pid, KILL_WAIT_S)
            self._remove_pid_file()
        raise LocalBrokerError(
            f"the {self.name} did not answer {self.where()} within {self.start_timeout_s:g} s "
            f"(see {self.log_files[0]})\n{log_tail}"
        )

    def _read_pid(self) -> int | None:
        try:
            text = self.pid_file.read_text(encoding="ascii").strip()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() and int(text) > 0 else None

    def _remove_pid_file(self) -> None:
        self.pid_file.unlink(missing_ok=True)

    def _is_alive(self, pid: int) -> bool:
        if self._process is not None and self._process.pid == pid:
            return self._process.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            return True
        # The state follows the parenthesised command name; a zombie has exited.
        return stat.rpartition(")")[2].split()[:1] != ["Z"]

    def _is_ours(self, pid: int) -> bool:
        if not self._is_alive(pid):
            return False
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\x00")
        except FileNotFoundError:
            return not Path("/proc/self").exists()
        except OSError:
            return True
        # Guards against a stale pid file whose pid now belongs to an unrelated process.
        return os.fsencode(self.marker) in argv

    def _signal(self, pid: int, signum: signal.Signals) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            raise LocalBrokerError(
                f"not allowed to signal {self.name} pid {pid}; it belongs to another user"
            ) from exc

    def _wait_exit(self, pid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._is_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_INTERVAL_S / 2)
        return True


def command_parser(
    prog: str, description: str, start_help: str, *extra: tuple[str, str]
) -> argparse.ArgumentParser:
    """The commands every local broker script takes (start, stop, restart, status, purge), and
    extra ones as (name, help)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("start", help=start_help)
    stop = commands.add_parser("stop", help="stop the broker (SIGTERM, then SIGKILL)")
    stop.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait before SIGKILL (default 30)"
    )
    commands.add_parser("restart", help="stop, then start")
    commands.add_parser("status", help="print the broker's state as JSON")
    commands.add_parser("purge", help="delete stored messages (the broker must be stopped)")
    for name, help_text in extra:
        commands.add_parser(name, help=help_text)
    return parser


def parse_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code argparse chose (2 for a usage error)."""
    try:
        return parser.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def print_exports(variables: Mapping[str, str]) -> None:
    """Print variables as shell exports, for `eval "$(scripts/... env)"`."""
    for name, value in variables.items():
        print(f"export {name}={value}")


def failed(prog: str, command: str, exc: BaseException) -> int:
    """Print a command's failure as one line and return its exit code, 2. The full message may
    carry a log tail; the line names the log file to read."""
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    print(f"{prog} {command}: {first_line}", file=sys.stderr)
    return 2
