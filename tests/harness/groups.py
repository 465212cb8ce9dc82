"""Which tests of a parallel run (pytest-xdist) share a worker, decided from the test id alone.

xdist's controller never collects: it sees test ids. Its `loadgroup` mode reads groups that a
worker appends to each id, which pytest 9.2 no longer lets a plugin change (an item's id became
read-only), so the suite brings its own scheduler (tests/conftest.py) that asks this module:

- every test of a file runs on one worker: a file's fixed subnets, namespaces and module
  fixtures are its own;
- every file that uses a shared Slurm cluster (tests/integration/conftest.py) runs on the one
  worker that started that cluster: the fixture's name in the file's text is what says so;
- a long file that builds nothing shared says `SPREAD_OVER_WORKERS = True` (the regex sweep):
  its tests are spread one by one.
"""

from __future__ import annotations

import functools
import os
import re

# fixture -> the group of the files that use it (a file using both goes with the first, sorted)
SLURM_FIXTURES = {"slurm_cluster": "slurm", "qb_cluster": "slurm", "_slurm_session": "slurm",
                  "slurm_gpu_cluster": "slurm-gpu"}
_FIXTURE = re.compile(r"\b(" + "|".join(SLURM_FIXTURES) + r")\b")
_SPREAD = re.compile(r"^SPREAD_OVER_WORKERS = True\b", re.M)


@functools.lru_cache(maxsize=None)
def file_group(root: str, path: str) -> tuple[str, bool]:
    """(group, spread) of the test file at path (relative to root)."""
    try:
        with open(os.path.join(root, path), encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return path, False
    slurm = sorted({SLURM_FIXTURES[name] for name in _FIXTURE.findall(text)})
    if slurm:
        return slurm[0], False
    return path, bool(_SPREAD.search(text))


def group_of(root: str, nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    group, spread = file_group(root, path)
    return nodeid if spread else group


def rank(group: str, path: str) -> int:
    """The order the groups are handed out: the Slurm groups (the longest) first, then the other
    integration files, then the unit tests, so that no long group starts last."""
    if group in SLURM_FIXTURES.values():
        return 0
    return 1 if path.startswith(os.path.join("tests", "integration") + os.sep) else 2
