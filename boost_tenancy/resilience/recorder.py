"""record_failure: every failure goes to the store through one writer thread per store, and no
caller waits longer than its bound, whatever the store does (docs/resilience.md).
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Final

import structlog

from boost_tenancy.errors import ErrorStoreError
from boost_tenancy.resilience.records import ErrorStore, FailureRecord

log = structlog.get_logger("boost_tenancy.error_store")


_WRITE_QUEUE_SIZE: Final = 100
_WRITER_IDLE_S: Final = 30.0
_BACKOFF_S: Final = 0.05
DOWN_COOLDOWN_S: Final = 10.0
"""After a write fails or times out, callers do not wait for the store for this long: they log
the record and go on at once, so a store that is down slows each worker once per cool-down, not
once per message. The first write after the cool-down tries the store again."""


class _Write:
    """One record_failure call: the record, its caller's deadline and, once written, the outcome."""

    __slots__ = ("_done", "attempts", "context", "deadline", "error", "record", "stored")

    def __init__(self, record: FailureRecord, *, attempts: int, deadline: float) -> None:
        self.record = record
        self.attempts = attempts
        self.deadline = deadline
        # The store's own logs during the write keep the caller's bound tenant, queue and message.
        self.context = contextvars.copy_context()
        self.stored = False
        self.error: str | None = None
        """The last failed try's error; None while no try has failed."""
        self._done = threading.Event()

    def finish(self, *, stored: bool, error: str | None = None) -> None:
        self.stored = stored
        if error is not None:
            self.error = error
        self._done.set()

    def wait(self) -> bool:
        """Wait until the write finished or the deadline passed; True if it finished."""
        return self._done.wait(max(0.0, self.deadline - time.monotonic()))


class _Writer:
    """The one thread that writes one store's failures, so a hung store stalls only this thread."""

    def __init__(self, store: ErrorStore) -> None:
        self.key = id(store)
        self.store: Callable[[], ErrorStore | None]
        try:
            # Weak, so that the writer does not keep a store alive that its owner dropped.
            self.store = weakref.ref(store)
        except TypeError:
            # A store without weak reference support lives until its writer goes idle.
            self.store = lambda: store
        self.queue: queue.Queue[_Write] = queue.Queue(maxsize=_WRITE_QUEUE_SIZE)
        self.busy_since: float | None = None
        self.down_since: float | None = None
        """When a caller last gave up on this store; None while writes succeed."""
        self.thread = threading.Thread(
            target=self._run, name="boost-error-store-writer", daemon=True
        )

    def stuck_for(self) -> float:
        """How long the store.record() call now running has been running; 0 when idle."""
        since = self.busy_since
        return 0.0 if since is None else time.monotonic() - since

    def _run(self) -> None:
        try:
            while self._next():
                pass
        finally:
            with _writers_lock:
                if _writers.get(self.key) is self:
                    del _writers[self.key]

    def _next(self) -> bool:
        """Make the next queued write; False once idle for _WRITER_IDLE_S with nothing queued."""
        try:
            job = self.queue.get(timeout=_WRITER_IDLE_S)
        except queue.Empty:
            with _writers_lock:
                # Jobs are queued under this lock, so none can arrive between the look and the
                # exit; leaving the registry in the same step means the next caller starts a new
                # writer instead of queueing on this one as it ends.
                if not self.queue.empty():
                    return True
                if _writers.get(self.key) is self:
                    del _writers[self.key]
                return False
        store = self.store()
        if store is None:
            job.finish(stored=False, error="the error store was garbage-collected")
        else:
            self._write(store, job)
        return True

    def _write(self, store: ErrorStore, job: _Write) -> None:
        for attempt in range(1, job.attempts + 1):
            if time.monotonic() >= job.deadline:
                # The caller has stopped waiting and logged the record; another try adds nothing.
                break
            self.busy_since = time.monotonic()
            try:
                job.context.run(store.record, job.record)
            except ErrorStoreError as exc:
                job.error = str(exc)
            except Exception as exc:  # the writer must outlive a broken store
                # Not the store's own failure but a bug in it: retrying will not help.
                job.finish(stored=False, error=f"{type(exc).__name__}: {exc}")
                return
            else:
                # A write that lands, late or not, shows the store is back.
                self.down_since = None
                job.finish(stored=True)
                return
            finally:
                self.busy_since = None
            if attempt < job.attempts:
                time.sleep(max(0.0, min(_BACKOFF_S * attempt, job.deadline - time.monotonic())))
        job.finish(stored=False)


_writers: dict[int, _Writer] = {}
"""The live writer of each store, by id(store); a writer removes itself when it ends."""
_writers_lock = threading.Lock()


def _hand_over(store: ErrorStore, job: _Write, timeout_s: float) -> str | None:
    """Queue job for the store's writer, starting one if needed; why it was refused, or None."""
    with _writers_lock:
        writer = _writers.get(id(store))
        # A dead store's id can be reused by a new one, which then needs its own writer.
        if writer is None or writer.store() is not store:
            writer = _Writer(store)
            _writers[id(store)] = writer
            writer.thread.start()
        stuck = writer.stuck_for()
        if stuck > timeout_s:
            # Queueing behind a write that has already outlasted a caller's patience would only
            # make this caller wait out its whole timeout too.
            return f"the error store has not answered a write for {stuck:.1f} s"
        down = writer.down_since
        if down is not None and time.monotonic() - down < DOWN_COOLDOWN_S:
            return (
                f"the error store failed {time.monotonic() - down:.1f} s ago; not waiting for "
                f"it again within {DOWN_COOLDOWN_S:g} s"
            )
        try:
            writer.queue.put_nowait(job)
        except queue.Full:
            return f"the error store's write queue is full ({_WRITE_QUEUE_SIZE} waiting)"
    return None


def _mark(store: ErrorStore, *, down: bool) -> None:
    with _writers_lock:
        writer = _writers.get(id(store))
        if writer is not None:
            writer.down_since = time.monotonic() if down else None


def record_failure(
    store: ErrorStore,
    record: FailureRecord,
    *,
    attempts: int = 3,
    timeout_s: float = 5.0,
) -> bool:
    """Record a failure within timeout_s whatever the store does; if it cannot, log the record.

    The write is handed to the store's writer thread (one per store, started on first use,
    ended when idle) and the caller waits at most timeout_s for it, never for the store itself:
    a store that hangs stalls its writer, not the caller's thread. The writer tries up to
    `attempts` times, with a short backoff, while the store raises ErrorStoreError, and starts
    no try after the caller stopped waiting. Returns True once the record is stored. Otherwise
    (the store kept failing, it did not answer within timeout_s, its write queue is full, its
    writer is stuck in a write older than timeout_s, or a write failed less than
    DOWN_COOLDOWN_S ago) the whole record is logged at critical level as error_store_write_failed
    and False is returned.

    A write already running when the caller stops waiting is not abandoned: it may still commit
    later, late but durable, so a record logged as unrecorded can also be in the store.

    Never raises: a message must not get stuck because the store is down (it carries its error
    on its retry or dead-letter copy), and the log keeps what the store could not.
    """
    error: str
    try:
        # Event.wait refuses timeouts beyond TIMEOUT_MAX; that long is "no limit" anyway.
        timeout_s = min(timeout_s, threading.TIMEOUT_MAX)
        job = _Write(record, attempts=max(1, attempts), deadline=time.monotonic() + timeout_s)
        refused = _hand_over(store, job, timeout_s)
        if refused is not None:
            error = refused
        else:
            if not job.wait():
                last = job.error
                error = (
                    f"the error store did not answer within {timeout_s:g} s; a write still "
                    "running may commit later" + ("" if last is None else f" (last error: {last})")
                )
            elif job.stored:
                _mark(store, down=False)
                return True
            else:
                error = job.error or "no write was tried before the caller stopped waiting"
            _mark(store, down=True)
    except Exception as exc:  # documented never to raise
        error = f"{type(exc).__name__}: {exc}"
    log.critical(
        "error_store_write_failed",
        error=error,
        record_tenant=None if record.tenant is None else record.tenant.value,
        record_raw_tenant=record.raw_tenant,
        record_queue=record.queue,
        record_message_id=record.message_id,
        record_correlation_id=record.correlation_id,
        record_attempt=record.attempt,
        record_outcome=record.outcome.value,
        record_error_type=record.error_type,
        record_error=record.error_text,
        record_trace=record.trace,
        record_occurred_at=record.occurred_at.isoformat(),
    )
    return False


__all__ = ["DOWN_COOLDOWN_S", "record_failure"]
