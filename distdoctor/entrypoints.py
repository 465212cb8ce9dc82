"""The entry points of one group, read from a cache while nothing installed has changed.

`importlib.metadata.entry_points()` imports the email package and reads the metadata of every
installed distribution: about a fifth of a warm `distdoctor check`. Its answer changes only when
a distribution is installed, removed, upgraded or has its entry points rewritten, and each of
those changes one of:

- sys.path itself;
- the names of the *.dist-info and *.egg-info folders in a sys.path folder (one is added,
  removed or renamed with the version);
- the stat of an `entry_points.txt` in such a folder (rewritten in place, as `setup.py develop`
  does), or of a zip file on sys.path.

The cache key is all three (plus Python's version), so a stale list is never read; a miss asks
importlib.metadata and stores its answer. Listing the sys.path folders costs about a millisecond.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EntryPoint:
    """What the registry needs of importlib.metadata.EntryPoint: name, value and load()."""

    name: str
    value: str

    def load(self) -> Any:
        # "module:attr [extra1,extra2]": the extras name what to install, not what to load
        module_name, _, attrs = self.value.split("[", 1)[0].partition(":")
        target: Any = importlib.import_module(module_name.strip())
        for attr in filter(None, attrs.strip().split(".")):
            target = getattr(target, attr)
        return target


def installed_state() -> list[Any]:
    """What changes whenever the installed distributions or their entry points change. Not
    the folders' own stat: the working directory on sys.path changes with every file written
    in it. Its metadata folders' names and their entry_points.txt are what count."""
    from distdoctor.host import metadata_folders
    from distdoctor.toolcache import file_state

    state: list[Any] = [sys.version, [p for p in sys.path if isinstance(p, str)]]
    for folder, entry in metadata_folders():
        state.append([folder, entry, file_state(os.path.join(folder, entry, "entry_points.txt") if entry else folder)])
    return state


def _from_metadata(group: str) -> list[EntryPoint]:
    from importlib import metadata

    return [EntryPoint(ep.name, ep.value) for ep in metadata.entry_points(group=group)]


def for_group(group: str, cache=None) -> list[EntryPoint]:
    """The group's entry points; through cache (a toolcache.ToolCache) when one is given."""
    if cache is None:
        return _from_metadata(group)
    key = cache.key_for({"entry_points": group, "installed": installed_state()})
    stored = cache.get_value(key)
    if isinstance(stored, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)
                                        for p in stored):
        return [EntryPoint(name, value) for name, value in stored]
    found = _from_metadata(group)
    cache.put_value(key, [[ep.name, ep.value] for ep in found])
    return found
