"""distdoctor's built-in check pack, loaded through the `distdoctor.checks` entry point like
any site pack. Each module here is one area and exports CHECKS."""

from __future__ import annotations

import importlib
import pkgutil

CHECKS = []
for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        CHECKS.extend(importlib.import_module(f"{__name__}.{_module.name}").CHECKS)
