"""distdoctor's built-in check pack, loaded through the `distdoctor.checks` entry point like
any site pack. Each module here is one area and exports CHECKS; the pack's CHECKS is theirs, by
module name.

Every module is imported when the pack loads. A generated manifest once let `check --only X`
import only X's module; measured with bench/manifest_speed.py (commit 467213a) it saved under 10 ms of a
`check` run (about 50 ms of `list` and `explain`), so it went, and with it the step of
regenerating it after every edit of a check module."""

from __future__ import annotations

import importlib
import pkgutil

from distdoctor.model import CheckInfo


def _module_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def _from_modules() -> list[tuple[str, CheckInfo]]:
    """Every check with its module's name."""
    return [(name, info) for name in _module_names()
            for info in importlib.import_module(f"{__name__}.{name}").CHECKS]


CHECKS = [info for _module, info in _from_modules()]
