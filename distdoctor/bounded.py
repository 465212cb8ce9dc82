"""Bound a blocking call by a deadline: the one way distdoctor does it.

On a sick cluster a hung NVML call, resolver, `mpirun --version` or connect is the normal case.
Each call runs on a daemon thread; when its deadline passes the caller gets `TimedOut` and the
thread is abandoned. Daemon threads and not concurrent.futures: the interpreter joins a pool's
workers at exit, so one hung call would keep the process alive past every deadline it was given.

    result = bounded.call(lambda: host.resolve(name), 2.0)
    if isinstance(result, bounded.TimedOut): ...
    versions = bounded.map(ask_version, names, timeout=5.0, workers=4)   # in the names' order
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
I = TypeVar("I")


@dataclass(frozen=True)
class TimedOut:
    """What a call gives that had not returned within its bound; the call is left running."""

    seconds: float

    def __str__(self) -> str:
        return f"no answer within {self.seconds:g} s"


class Pending(Generic[T]):
    """A call started now on its own daemon thread, to be waited for later (or never)."""

    def __init__(self, fn: Callable[[], T], name: str = "bounded"):
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True, name=name)
        self._thread.start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who decides
            self._error = exc

    @property
    def ended(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float) -> T | TimedOut:
        """The call's result, or TimedOut when it has not returned within `timeout` seconds;
        what the call raised is raised here, in the caller's thread."""
        # join, not an Event: once this returns the thread is gone, and the CLI's exit, which
        # looks for abandoned daemon threads, does not take a finished call for a hung one.
        self._thread.join(max(0.0, timeout))
        if self._thread.is_alive():
            return TimedOut(timeout)
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def start(fn: Callable[[], T], name: str = "bounded") -> Pending[T]:
    """Start fn() now (a slow tool while Python still imports); wait() for it later."""
    return Pending(fn, name)


def call(fn: Callable[[], T], timeout: float, name: str = "bounded") -> T | TimedOut:
    """fn(), or TimedOut after `timeout` seconds (fn is then abandoned, still running on its
    daemon thread). What fn raises is raised here."""
    return Pending(fn, name).wait(timeout)


_NOTHING = object()


def map(fn: Callable[[I], T], items: Iterable[I], timeout: float, workers: int | None = None,
        name: str = "bounded") -> list[T | TimedOut]:
    """fn(item) for every item, at most `workers` at a time (None: all at once), all within one
    deadline `timeout` seconds from now. Results come in the items' order; an item that had not
    ended by the deadline, running or never started, gives TimedOut. When calls raised, the
    first exception in the items' order is raised here once every call ended or time ran out."""
    todo = list(items)
    if not todo:
        return []
    deadline = time.monotonic() + timeout
    results: list[object] = [_NOTHING] * len(todo)
    errors: dict[int, BaseException] = {}
    lock = threading.Lock()
    taken = [0]

    def work() -> None:
        while True:
            with lock:
                index = taken[0]
                if index >= len(todo) or time.monotonic() >= deadline:
                    return
                taken[0] = index + 1
            try:
                value = fn(todo[index])
            except BaseException as exc:  # noqa: BLE001 - raised in the caller below
                with lock:
                    errors[index] = exc
            else:
                with lock:
                    results[index] = value

    count = len(todo) if workers is None else max(1, builtins.min(workers, len(todo)))
    threads = [threading.Thread(target=work, daemon=True, name=f"{name}-{n}") for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    with lock:
        if errors:
            raise errors[builtins.min(errors)]
        return [TimedOut(timeout) if r is _NOTHING else r for r in results]  # type: ignore[misc]
