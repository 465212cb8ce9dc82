"""Finding check packs: entry points in the `distdoctor.checks` group (the built-in pack is one
of them) and drop-in `*.py` files from --checks-dir and DISTDOCTOR_CHECKS_PATH.

A pack is a module (or any object) with a CHECKS sequence of CheckInfo records. A pack that
fails to load, or a check id defined twice, becomes a problem the engine reports as an ERROR
finding; the other packs still run.

A pack is third-party code run at import. Each is imported on a daemon thread bounded by
PACK_LOAD_TIMEOUT (and by the run's own deadline), so a pack that loops or blocks at import is
abandoned and reported, and one that raises SystemExit or KeyboardInterrupt is a problem like any
other exception. What a pack prints at import goes wherever fd 1 points: the CLI points it at
stderr while packs load (see output.reserve_stdout).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import itertools
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from distdoctor import bounded, entrypoints, limits
from distdoctor.model import CheckInfo

GROUP = "distdoctor.checks"
BUILTIN = "distdoctor.checks"
PACK_LOAD_TIMEOUT = 10.0  # seconds one pack may take to import (the built-in one takes ~0.1 s)


@dataclass
class Registry:
    checks: dict[str, CheckInfo] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (source, message)
    incomplete: bool = False  # a pack timed out or failed to load: its checks are unknown

    def add_pack(self, source: str, pack: object) -> None:
        checks = getattr(pack, "CHECKS", pack)
        if isinstance(checks, (str, bytes, Mapping, _NoChecks)) or not isinstance(checks, Iterable):
            self.problems.append((source, f"{source} has no CHECKS list"))
            return
        checks = list(itertools.islice(checks, MAX_CHECKS + 1))
        if len(checks) > MAX_CHECKS:
            self.problems.append((source, f"{source}: CHECKS holds more than {MAX_CHECKS} entries (an endless "
                                          f"iterator?); none of them is run"))
            return
        wrong = 0
        for info in checks:
            if not isinstance(info, CheckInfo):
                wrong += 1
                if wrong <= 3:  # the first few named; the count says the rest
                    self.problems.append((source, f"{source}: CHECKS holds {type(info).__name__}, which is not "
                                                  f"a @check record"))
                continue
            problem = _record_problem(info)
            if problem:
                self.problems.append((source, f"{source}: {problem}; the check is not run"))
                continue
            if not isinstance(info.tags, tuple):
                info = CheckInfo(info.id, info.title, info.func, tuple(info.tags), info.timeout, info.params,
                                 info.description, info.source)
            info = info.with_source(source)
            earlier = self.checks.get(info.id)
            if earlier is not None:
                self.problems.append((source, f"check id {info.id!r} is defined twice: in {earlier.source} "
                                              f"and in {source}; the one from {earlier.source} is kept"))
                continue
            self.checks[info.id] = info

        if wrong > 3:
            self.problems.append((source, f"{source}: {wrong} entries of CHECKS in all are not @check records"))

    def sorted(self) -> list[CheckInfo]:
        return sorted(self.checks.values(), key=lambda c: c.id)


MAX_CHECKS = 10_000  # in one pack; more is an endless iterator or a generated mistake


def _record_problem(info: CheckInfo) -> str:
    """Why a @check record built by hand (or by a pack that edits one) cannot be run: each field
    is read by the engine, the selection and every renderer, so one of the wrong type once
    crashed the whole run with a traceback."""
    if not isinstance(info.id, str) or not info.id or not info.id.isprintable() or len(info.id) > 200:
        return f"a check id must be a printable string, not {type(info.id).__name__} {info.id!r:.60}"
    if not isinstance(info.title, str):
        return f"check {info.id}: title must be a string, not {type(info.title).__name__}"
    if not callable(info.func):
        return f"check {info.id}: its function is {type(info.func).__name__}, not callable"
    if not isinstance(info.tags, (tuple, list)) or not all(isinstance(t, str) for t in info.tags):
        return f"check {info.id}: tags must be a tuple of strings, not {type(info.tags).__name__} {info.tags!r:.60}"
    if not isinstance(info.params, Mapping) or not all(isinstance(k, str) for k in info.params):
        return f"check {info.id}: params must be a mapping of names to values, not {type(info.params).__name__}"
    if isinstance(info.timeout, bool) or not isinstance(info.timeout, (int, float)):
        return f"check {info.id}: timeout must be a number of seconds, not {type(info.timeout).__name__}"
    if not isinstance(info.description, str):
        return f"check {info.id}: its description must be a string"
    try:
        limits.seconds(info.timeout, f"check {info.id}: timeout")
    except limits.RangeError as exc:
        return str(exc)
    return ""


def _load_file(path: str) -> object:
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:10]
    name = f"distdoctor_dropin_{digest}_{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if not hasattr(module, "CHECKS"):
        raise ImportError("defines no CHECKS list")
    return module


def _source_tree_builtin() -> object | None:
    """The built-in pack when `distdoctor` was imported from a source tree (`python3 -m
    distdoctor` run in a clone: the clone's distdoctor/ shadows the installed package, and the
    pack lives in checks/ beside it, not under it). Loaded under its installed name, so its
    modules import each other as they do from a wheel. None when this is not a source tree."""
    import distdoctor

    root = os.path.dirname(os.path.dirname(os.path.abspath(distdoctor.__file__)))
    init = os.path.join(root, "checks", "__init__.py")
    if not (os.path.isfile(init) and os.path.isfile(os.path.join(root, "pyproject.toml"))):
        return None
    spec = importlib.util.spec_from_file_location(BUILTIN, init,
                                                  submodule_search_locations=[os.path.dirname(init)])
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[BUILTIN] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(BUILTIN, None)
        raise
    return module


def _builtin(load: Callable[[], object]) -> object:
    """The built-in pack from load(); when `distdoctor.checks` is not importable because the
    source tree's distdoctor/ shadows the installed package, from the tree's checks/ instead."""
    try:
        return load()
    except ModuleNotFoundError as exc:
        pack = _source_tree_builtin() if exc.name == BUILTIN else None
        if pack is None:
            raise
        return pack


def _load_entry_point(ep) -> object:
    return _builtin(ep.load) if ep.value == BUILTIN else ep.load()


def _load_uninstalled_builtin() -> object:
    return _builtin(lambda: importlib.import_module(BUILTIN))


def drop_in_dirs(checks_dirs: Iterable[str], env: Mapping[str, str]) -> list[str]:
    dirs = list(checks_dirs)
    dirs += [d for d in env.get("DISTDOCTOR_CHECKS_PATH", "").split(os.pathsep) if d]
    return dirs


def _load_pack(load_pack: Callable[[], object]) -> tuple[object, BaseException | None]:
    """The pack's CHECKS as a list, read on the loading thread (so within the load bound): a
    CHECKS that is a generator which never ends, or an itertools.repeat(0), is read only up to
    MAX_CHECKS + 1 entries."""
    try:
        pack = load_pack()
        checks = getattr(pack, "CHECKS", pack)
        if isinstance(checks, (str, bytes, Mapping)) or not isinstance(checks, Iterable):
            return _NoChecks(), None
        return list(itertools.islice(checks, MAX_CHECKS + 1)), None
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt from a pack too
        return None, exc


class _NoChecks:
    """A pack whose CHECKS is not a list of records (a string, a number, a dict, nothing)."""


def _record(registry: Registry, source: str, outcome, seconds: float, run_bound: float | None) -> None:
    """What became of one pack's load: added, or a problem that names it."""
    if isinstance(outcome, bounded.TimedOut) or outcome[1] is not None:
        registry.incomplete = True
    if isinstance(outcome, bounded.TimedOut) and run_bound is not None and seconds < PACK_LOAD_TIMEOUT:
        registry.problems.append((source, f"{source} had not finished loading when its share ({seconds:.3g} s) of "
                                          f"the run's {run_bound:g} s bound (--timeout) ran out"))
    elif isinstance(outcome, bounded.TimedOut):
        registry.problems.append((source, f"{source} did not finish loading within {seconds:.3g} s and was "
                                          f"abandoned (it loops or blocks at import)"))
    elif outcome[1] is not None:
        exc = outcome[1]
        registry.problems.append((source, f"{source} failed to load: {type(exc).__name__}: {str(exc)[:300]}"))
    else:
        registry.add_pack(source, outcome[0])


def load(checks_dirs: Iterable[str] = (), env: Mapping[str, str] | None = None,
         entry_points: Iterable | None = None, budget: float = 60.0, run_bound: float | None = None,
         cache=None) -> Registry:
    """Every pack, imported in parallel, all of them bounded by PACK_LOAD_TIMEOUT and budget
    (run_bound: the run's --timeout that budget is a share of, to name it when it is the cut;
    cache: a toolcache.ToolCache for the list of entry points, see entrypoints.py)."""
    registry = Registry()
    deadline = time.monotonic() + min(budget, PACK_LOAD_TIMEOUT)
    sources: list[tuple[str, Callable[[], object]]] = []
    eps = list(entry_points if entry_points is not None else entrypoints.for_group(GROUP, cache))
    if entry_points is None and not any(ep.name == "builtin" for ep in eps):
        # Not installed (a clone on PYTHONPATH): no entry points at all, but the pack is beside us.
        sources.append((f"entry point builtin ({BUILTIN})", _load_uninstalled_builtin))
    # The built-in pack first, so a site pack that reuses a built-in id is the one reported.
    for ep in sorted(eps, key=lambda e: (e.name != "builtin", e.name)):
        sources.append((f"entry point {ep.name} ({ep.value})", lambda ep=ep: _load_entry_point(ep)))
    for directory in drop_in_dirs(checks_dirs, env or {}):
        if not os.path.isdir(directory):
            registry.problems.append((directory, f"checks directory {directory} does not exist"))
            continue
        for fname in sorted(os.listdir(directory)):
            if not fname.endswith(".py") or fname.startswith("_"):
                continue
            path = os.path.join(directory, fname)
            sources.append((path, lambda path=path: _load_file(path)))
    # All at once, so a pack that hangs costs its own load and not the others'; recorded in
    # order afterwards, so which of two packs defining one id wins does not depend on timing.
    outcomes = bounded.map(lambda item: _load_pack(item[1]), sources, max(0.0, deadline - time.monotonic()),
                           name="load-pack")
    for (source, _load), outcome in zip(sources, outcomes):
        _record(registry, source, outcome, min(budget, PACK_LOAD_TIMEOUT), run_bound)
    return registry
