"""Machine facts, parsed once on first use and shared by every check.

A fact is a function of the Facts object (so it can use the host and other facts) registered
with `@fact` in one of the area modules below; `facts.<name>` computes it on first access under
a per-fact lock and caches the value, or the exception, for every later reader. Checks run in
parallel threads, so two checks asking for `interfaces` at once run `ip` once.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, Callable

_PROVIDERS: dict[str, Callable[["Facts"], Any]] = {}
# The area modules that define facts. Listed, not discovered, so the set is plain to read.
_AREAS = ("host", "system", "nccl", "net", "gpu", "torch", "slurm", "reach", "build", "hardware")
_loaded = False
_load_lock = threading.Lock()


def fact(func: Callable[["Facts"], Any]) -> Callable[["Facts"], Any]:
    if func.__name__ in _PROVIDERS and _PROVIDERS[func.__name__] is not func:
        raise ValueError(f"fact {func.__name__!r} is defined twice")
    _PROVIDERS[func.__name__] = func
    return func


def _providers() -> dict[str, Callable[["Facts"], Any]]:
    global _loaded
    if not _loaded:
        with _load_lock:
            if not _loaded:
                for area in _AREAS:
                    importlib.import_module(f"distdoctor.facts.{area}")
                _loaded = True
    return _PROVIDERS


def names() -> list[str]:
    return sorted(_providers())


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


class Facts:
    def __init__(self, host, config: Any = None, options: dict[str, Any] | None = None):
        self.host = host
        self.config = config
        # Inputs from the command line that some facts read (--hosts, --probe-torch, ...).
        self.options: dict[str, Any] = dict(options or {})
        self._values: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        provider = _providers().get(name)
        if provider is None:
            raise AttributeError(f"no fact named {name!r}")
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._values:
                try:
                    self._values[name] = provider(self)
                except Exception as exc:  # cached so a failing probe is not re-run by every check
                    self._values[name] = _Failed(exc)
        value = self._values[name]
        if isinstance(value, _Failed):
            raise value.exc
        return value

    def computed(self) -> list[str]:
        """Names of the facts computed so far (for --debug and the benchmarks)."""
        return sorted(self._values)
