"""What callers wait on while the loop thread works for them: futures resolved once (a waiter
that gave up is skipped), several futures awaited as one (up to the first failure, or every one
settled), a batch's confirmations counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError


def resolve(future: Future[None], error: BaseException | None = None) -> None:
    """Resolve future unless its waiter gave up (cancelled it) or it is resolved already."""
    try:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
    except InvalidStateError:
        pass


def all_of(futures: Sequence[Future[None]], done: Future[None]) -> None:
    """Resolve done when every future has, or with the first failure."""
    remaining = [len(futures)]

    def one_done(one: Future[None]) -> None:
        error = one.exception()
        if error is not None:
            resolve(done, error)
            return
        remaining[0] -= 1
        if remaining[0] == 0:
            resolve(done)

    for future in futures:
        future.add_done_callback(one_done)


def all_settled(futures: Sequence[Future[None]], done: Future[None]) -> None:
    """Resolve done once every future has, failed or not: the caller reads each one's outcome."""
    remaining = [len(futures)]

    def one_done(_one: Future[None]) -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            resolve(done)

    if not futures:
        resolve(done)
    for future in futures:
        future.add_done_callback(one_done)


class Countdown:
    """The confirmations a batch of sends waits for, counted down on the loop thread: one
    object per batch instead of a future (with its Condition) per message. done resolves when
    every one is confirmed, or with the first failure."""

    __slots__ = ("done", "remaining")

    def __init__(self, remaining: int, done: Future[None]) -> None:
        self.remaining = remaining
        self.done = done

    def confirmed(self) -> None:
        self.remaining -= 1
        if self.remaining == 0:
            resolve(self.done)

    def failed(self, error: BaseException) -> None:
        self.remaining = -1  # never counts down to zero again
        resolve(self.done, error)
