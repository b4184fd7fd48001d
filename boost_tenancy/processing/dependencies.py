"""What a processor's handlers share, declared on its class: opened once when a runner starts,
closed once when it stops.

    class Enrich(TenantProcessor):
        queue = "cmd.enrich"
        http: Dependency[httpx.Client] = Dependency(lambda: httpx.Client(timeout=5))

        def handle(self, message, ctx):
            self.http.get(...)

A factory is called with no arguments, before on_startup and before the runner connects, in the
order the class declares them (a subclass's after its bases'); what it gives is closed after
on_shutdown, in the reverse order:

- a generator function (`def pool(): p = open(); yield p; p.close()`): the value it yields,
  closed by running it past its yield, like contextlib.contextmanager;
- an async generator function or an async def: run on the runner's event loop, where async
  handlers run (a runner with one starts its loop for it);
- anything else: its result, entered when it is a context manager (httpx.Client, a
  psycopg_pool.ConnectionPool: closed by their __exit__), kept as it is otherwise.

A value assigned to the attribute on the processor before the runner starts (a test's fake) is
used as it is: the factory is not called and the runner never closes it.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any, Final, Generic, TypeVar, overload

import structlog

from boost_tenancy.errors import ConfigError, DependencyNotOpenError
from boost_tenancy.processing.event_loop import EventLoop
from boost_tenancy.processing.processor import TenantProcessor

T = TypeVar("T")

log = structlog.get_logger("boost_tenancy.processing")

Closer = Callable[[], object]
"""Closes one opened dependency: returns None, or an awaitable to await on the event loop."""


class Dependency(Generic[T]):
    """A value the handlers of a processor share, made by factory when a runner starts.

    Read on the processor (`self.http`) it is the opened value; read before the runner opened
    it, or after it closed it, it raises DependencyNotOpenError (a ConfigError and an
    AttributeError) naming the processor and the attribute."""

    @overload
    def __init__(self, factory: Callable[[], AbstractContextManager[T]]) -> None: ...
    @overload
    def __init__(self, factory: Callable[[], AbstractAsyncContextManager[T]]) -> None: ...
    @overload
    def __init__(self, factory: Callable[[], Iterator[T]]) -> None: ...
    @overload
    def __init__(self, factory: Callable[[], AsyncIterator[T]]) -> None: ...
    @overload
    def __init__(self, factory: Callable[[], Awaitable[T]]) -> None: ...
    @overload
    def __init__(self, factory: Callable[[], T]) -> None: ...
    def __init__(self, factory: Callable[[], Any]) -> None:
        if not callable(factory):
            raise ConfigError(
                f"Dependency needs a factory called with no arguments, got {factory!r}"
            )
        self.factory = factory
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @property
    def is_async(self) -> bool:
        """Whether its factory must run on an event loop (async generator or async def)."""
        return inspect.isasyncgenfunction(self.factory) or inspect.iscoroutinefunction(self.factory)

    @overload
    def __get__(self, instance: None, owner: type) -> Dependency[T]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...
    def __get__(self, instance: object | None, owner: type) -> Dependency[T] | T:
        if instance is None:
            return self
        # Reached only while the instance holds no value under the name: the opened value is
        # an instance attribute, read without this descriptor.
        raise DependencyNotOpenError(
            f"{type(instance).__name__}.{self.name} is opened when a runner of the processor "
            "starts and closed when it stops; it is not open now (a test can assign its own "
            f"value first: processor.{self.name} = ...)"
        )


def declared(processor: TenantProcessor) -> list[Dependency[Any]]:
    """The processor's dependencies in the order declared, its bases' first; a name a subclass
    declares again is the subclass's."""
    found: dict[str, Dependency[Any]] = {}
    for klass in reversed(type(processor).__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Dependency):
                found[name] = value
            else:
                found.pop(name, None)  # a subclass replaced it with something else
    return list(found.values())


def opens_on_event_loop(processor: TenantProcessor) -> bool:
    """Whether a dependency of processor the runner opens is opened on its event loop."""
    given = vars(processor)
    return any(d.is_async and d.name not in given for d in declared(processor))


class OpenDependencies:
    """Opens the dependencies of one processor for one runner, and closes them again."""

    def __init__(self, processor: TenantProcessor, event_loop: EventLoop | None) -> None:
        self._processor = processor
        self._event_loop = event_loop
        self._opened: list[tuple[str, Closer | None]] = []

    def open(self) -> None:
        """Open every dependency the processor has no value for, in the order declared; when
        one fails, those opened are closed and the failure raised, as a ConfigError naming it
        when the factory itself is wrong. A processor whose dependencies another runner has
        open is refused: that runner's stop would close them under this one's handlers."""
        given = vars(self._processor)
        owner = given.get(_OWNER)
        if owner is not None and owner is not self:
            raise ConfigError(
                f"{type(self._processor).__name__}: another runner has its dependencies open; "
                "give each runner a processor of its own"
            )
        try:
            for dependency in declared(self._processor):
                if dependency.name in given:
                    continue  # assigned before the start: used as it is, never closed here
                try:
                    value, closer = self._open_one(dependency)
                except Exception as exc:
                    log.error(
                        "dependency_open_failed",
                        processor=type(self._processor).__name__,
                        dependency=dependency.name,
                        error_type=type(exc).__name__,
                        error=str(exc),
                    )
                    raise
                self._opened.append((dependency.name, closer))
                setattr(self._processor, dependency.name, value)
                given[_OWNER] = self
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close what open() opened, the last first; a failure is logged and the rest closed
        anyway (a stop always goes on). The attributes are gone afterwards."""
        if vars(self._processor).get(_OWNER) is self:
            del vars(self._processor)[_OWNER]
        while self._opened:
            name, closer = self._opened.pop()
            vars(self._processor).pop(name, None)
            if closer is None:
                continue
            try:
                result = closer()
                if inspect.isawaitable(result):
                    self._await(result, name)
            except Exception as exc:  # one failing close must not keep the others open
                log.error(
                    "dependency_close_failed",
                    processor=type(self._processor).__name__,
                    dependency=name,
                    error_type=type(exc).__name__,
                    error=str(exc),
                )

    def _open_one(self, dependency: Dependency[Any]) -> tuple[object, Closer | None]:
        factory = dependency.factory
        made: Any
        if inspect.isasyncgenfunction(factory):
            made = asynccontextmanager(factory)()
        elif inspect.isgeneratorfunction(factory):
            made = contextmanager(factory)()
        else:
            made = factory()
        name = dependency.name
        if inspect.isawaitable(made) and not _is_async_context(made):
            made = self._await(made, name)
        # What is both kinds of context manager is entered as its factory is declared: async
        # from an async factory, else sync (whether the runner has an event loop for other
        # reasons changes nothing).
        if _is_async_context(made) and (dependency.is_async or not _is_context(made)):
            return self._await(made.__aenter__(), name), lambda: made.__aexit__(None, None, None)
        if _is_context(made):
            return made.__enter__(), lambda: made.__exit__(None, None, None)
        return made, None

    def _await(self, awaitable: Awaitable[Any], name: str) -> Any:
        if self._event_loop is None:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise ConfigError(
                f"{type(self._processor).__name__}.{name}: its factory gives an awaitable or an "
                "async context manager from a plain def; declare the factory `async def` or as "
                "an async generator, so that the runner starts the event loop it runs on"
            )
        return self._event_loop.complete(awaitable)


_OWNER: Final = "_boost_dependencies_owner"
"""The instance attribute naming the OpenDependencies that has a processor's dependencies open."""


def _is_context(value: object) -> bool:
    return hasattr(value, "__enter__") and hasattr(value, "__exit__")


def _is_async_context(value: object) -> bool:
    return hasattr(value, "__aenter__") and hasattr(value, "__aexit__")


__all__ = ["Dependency", "OpenDependencies", "declared", "opens_on_event_loop"]
