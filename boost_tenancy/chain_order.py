"""The order of the middleware chain: each piece has a name, and a piece may ask to go before or
after a named one (the defaults are named: processing/middleware.py lists them).

A piece asks through its own `before` or `after` attribute (a class attribute of a Middleware
subclass), or through place(piece, before=..., after=...) where it is given. A piece takes part
in a direction through a hook (`publish`, `on_outcome`, or being called for consume); a hook
marked @passthrough, as the Middleware base class's are, is one the piece leaves out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from boost_tenancy.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

_PASSTHROUGH = "__boost_passthrough__"


def passthrough(hook: F) -> F:
    """Marks a base class's hook that only hands on: a piece that does not override it takes no
    part in that direction, and the chain skips it there at no cost."""
    setattr(hook, _PASSTHROUGH, True)
    return hook


def hook_of(piece: object, name: str) -> Callable[..., Any] | None:
    """piece's hook called name when it takes part through it, else None."""
    hook: object = getattr(piece, name, None)
    if not callable(hook) or getattr(hook, _PASSTHROUGH, False):
        return None
    return hook


def name_of(piece: object) -> str:
    """A piece's name in the chain: its `name` attribute, else its class's name in snake case
    (HandlingMetrics: handling_metrics)."""
    if isinstance(piece, Placed):
        return name_of(piece.piece)
    given = getattr(piece, "name", None)
    if isinstance(given, str) and given:
        return given
    cls = piece if isinstance(piece, type) else type(piece)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


@dataclass(frozen=True, slots=True)
class Placed:
    """A piece with where it goes: just before or just after the piece named."""

    piece: object
    before: str | None = None
    after: str | None = None

    def __post_init__(self) -> None:
        if (self.before is None) == (self.after is None):
            raise ConfigError(
                f"place {name_of(self.piece)} before one named piece or after one, not "
                f"{'both' if self.before else 'neither'}"
            )


def place(piece: object, *, before: str | None = None, after: str | None = None) -> Placed:
    """piece, to go just before (outside) or just after (inside) the piece named: place(audit,
    before="retry") runs audit around the retry middleware, so it sees every retried failure's
    outcome; place(stamp, after="trace") changes what it publishes after the trace is stamped."""
    return Placed(piece, before=before, after=after)


def unplaced(piece: object) -> object:
    """The piece itself, without where it goes."""
    return piece.piece if isinstance(piece, Placed) else piece


def _placement(piece: object) -> tuple[object, str | None, str | None]:
    if isinstance(piece, Placed):
        return piece.piece, piece.before, piece.after
    before = getattr(piece, "before", None)
    after = getattr(piece, "after", None)
    if before is None and after is None:
        return piece, None, None
    if not (isinstance(before, str | None) and isinstance(after, str | None)):
        raise ConfigError(f"{name_of(piece)}: before and after must name a piece (a str)")
    return Placed(piece, before=before, after=after).piece, before, after


def arrange(pieces: Iterable[object]) -> tuple[object, ...]:
    """The pieces in chain order, outermost first: each in the order given, except those that
    ask to go before or after a named piece, which go there (in the order given, after every
    piece without a place of its own is in). A name asked for that no piece has is a
    ConfigError listing the names there are."""
    order: list[object] = []
    placed: list[tuple[object, str | None, str | None]] = []
    for item in pieces:
        piece, before, after = _placement(item)
        if before is None and after is None:
            order.append(piece)
        else:
            placed.append((piece, before, after))
    for piece, before, after in placed:
        names = [name_of(p) for p in order]
        target = before if before is not None else after
        if target not in names:
            raise ConfigError(
                f"middleware {name_of(piece)} asks to go {'before' if before else 'after'} "
                f"{target!r}, and no piece has that name; the chain has: {', '.join(names)}"
            )
        index = names.index(target)
        order.insert(index if before is not None else index + 1, piece)
    return tuple(order)


__all__ = ["Placed", "arrange", "hook_of", "name_of", "passthrough", "place", "unplaced"]
