"""Finding check packs: entry points in the `distdoctor.checks` group (the built-in pack is one
of them) and drop-in `*.py` files from --checks-dir and DISTDOCTOR_CHECKS_PATH.

A pack is a module (or any object) with a CHECKS sequence of CheckInfo records. A pack that
fails to load, or a check id defined twice, becomes a problem the engine reports as an ERROR
finding; the other packs still run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Iterable, Mapping

from distdoctor.model import CheckInfo

GROUP = "distdoctor.checks"
BUILTIN = "distdoctor.checks"


@dataclass
class Registry:
    checks: dict[str, CheckInfo] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (source, message)

    def add_pack(self, source: str, pack: object) -> None:
        checks = getattr(pack, "CHECKS", pack)
        if isinstance(checks, (str, bytes)) or not isinstance(checks, Iterable):
            self.problems.append((source, f"{source} has no CHECKS list"))
            return
        for info in checks:
            if not isinstance(info, CheckInfo):
                self.problems.append((source, f"{source}: CHECKS holds {info!r}, which is not a @check record"))
                continue
            info = info.with_source(source)
            earlier = self.checks.get(info.id)
            if earlier is not None:
                self.problems.append((source, f"check id {info.id!r} is defined twice: in {earlier.source} "
                                              f"and in {source}; the one from {earlier.source} is kept"))
                continue
            self.checks[info.id] = info

    def sorted(self) -> list[CheckInfo]:
        return sorted(self.checks.values(), key=lambda c: c.id)


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


def _load_entry_point(ep) -> object:
    try:
        return ep.load()
    except ModuleNotFoundError as exc:
        if ep.value != BUILTIN or exc.name != BUILTIN:
            raise
        pack = _source_tree_builtin()
        if pack is None:
            raise
        return pack


def drop_in_dirs(checks_dirs: Iterable[str], env: Mapping[str, str]) -> list[str]:
    dirs = list(checks_dirs)
    dirs += [d for d in env.get("DISTDOCTOR_CHECKS_PATH", "").split(os.pathsep) if d]
    return dirs


def load(checks_dirs: Iterable[str] = (), env: Mapping[str, str] | None = None,
         entry_points: Iterable | None = None) -> Registry:
    registry = Registry()
    eps = entry_points if entry_points is not None else metadata.entry_points(group=GROUP)
    # The built-in pack first, so a site pack that reuses a built-in id is the one reported.
    for ep in sorted(eps, key=lambda e: (e.name != "builtin", e.name)):
        source = f"entry point {ep.name} ({ep.value})"
        try:
            registry.add_pack(source, _load_entry_point(ep))
        except Exception as exc:  # a broken pack must not sink the run
            registry.problems.append((source, f"{source} failed to load: {type(exc).__name__}: {exc}"))
    for directory in drop_in_dirs(checks_dirs, env or {}):
        if not os.path.isdir(directory):
            registry.problems.append((directory, f"checks directory {directory} does not exist"))
            continue
        for fname in sorted(os.listdir(directory)):
            if not fname.endswith(".py") or fname.startswith("_"):
                continue
            path = os.path.join(directory, fname)
            try:
                registry.add_pack(path, _load_file(path))
            except Exception as exc:
                registry.problems.append((path, f"{path} failed to load: {type(exc).__name__}: {exc}"))
    return registry
