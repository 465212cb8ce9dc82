"""Which tests of a parallel run (pytest-xdist) share a worker, decided from the test id alone.

xdist's controller never collects: it sees test ids. Its `loadgroup` mode reads groups that a
worker appends to each id, which pytest 9.2 no longer lets a plugin change (an item's id became
read-only), so the suite brings its own scheduler (tests/conftest.py) that asks this module:

- every test of a file runs on one worker: a file's fixed subnets, namespaces and module
  fixtures are its own;
- every file that uses a shared Slurm cluster (tests/integration/conftest.py) runs on the one
  worker that started that cluster: the fixture's name in the file's text is what says so (the
  job tests under JOB_DIRS share a second one, on another worker);
- a long file that builds nothing shared says `SPREAD_OVER_WORKERS = True` (the regex sweep):
  its tests are spread one by one.

Which group a worker takes next (next_scope) keeps the files that start torch ranks on at most
as many workers as there are torch slots (tests/harness/slots.py): a worker handed a torch file
while every slot was held sat waiting for one (13 min of worker time in one 2-core run) instead
of running the other files. The rate-judging files run alone among torch files.
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

_INTEGRATION = os.path.join("tests", "integration")
# The files whose tests start torch ranks (each takes a torch slot: tests/integration/conftest.py).
TORCH_FILES = tuple(os.path.join(_INTEGRATION, p) for p in (
    "nccltest" + os.sep, os.path.join("hang", "test_live_"), os.path.join("logs", "test_live_"),
    os.path.join("buildflags", "test_real.py"), os.path.join("cluster", "test_job_mpirun.py")))
# Rates measured between hosts and judged against their median: alone among the torch files.
RATE_FILES = (os.path.join(_INTEGRATION, "nccltest", "test_hosts.py"),)
# The shared cluster's files under these folders (jobs: launchers, job reports, live logs, hangs)
# start a second one on another worker: one worker running every Slurm file after the other was
# the run's longest chain (about 450 s of a 9-minute run), and a cluster starts in seconds.
JOB_DIRS = tuple(os.path.join(_INTEGRATION, d) + os.sep for d in ("cluster", "hang", "logs"))
JOB_GROUP = "slurm-jobs"
SLURM_GROUPS = {*SLURM_FIXTURES.values(), JOB_GROUP}


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
        return (JOB_GROUP if slurm[0] == "slurm" and path.startswith(JOB_DIRS) else slurm[0]), False
    return path, bool(_SPREAD.search(text))


def group_of(root: str, nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    group, spread = file_group(root, path)
    return nodeid if spread else group


def rank(root: str, path: str) -> int:
    """The order the groups are handed out: the Slurm groups (the longest) first; then the torch
    files, the rate-judging ones first (their run alone is best spent while the other workers have
    everything else to do); then the other integration files, then the unit tests; the tests of a
    spread file last, which fill the workers' ends evenly, one by one."""
    group, spread = file_group(root, path)
    if group in SLURM_GROUPS:
        return 0
    if path.startswith(RATE_FILES):
        return 1
    if path.startswith(TORCH_FILES):
        return 2
    if spread:
        return 5
    return 3 if path.startswith(_INTEGRATION + os.sep) else 4


def _torch(scope: str) -> bool:
    """A file's own group that starts torch ranks (a Slurm group is not one: its worker takes a
    slot for each such test, as every torch test does)."""
    return scope.split("::", 1)[0].startswith(TORCH_FILES)


def next_scope(waiting: list[str], mine: set[str], others: list[set[str]], lanes: int) -> str:
    """Which of the waiting groups (in the order they are handed out) a worker takes next, given
    the unfinished groups it holds (mine) and each other worker holds: a torch file only while
    fewer than `lanes` other workers hold one, or if this worker holds one (it runs them one after
    the other); a rate-judging file only when no other worker holds a torch file, and none while
    one holds it. When only torch files are left the first is taken: its slot makes it wait."""
    busy = [held for held in (set(filter(_torch, h)) for h in others) if held]
    alone = any(scope.split("::", 1)[0].startswith(RATE_FILES) for held in busy for scope in held)
    lane = any(map(_torch, mine))
    for scope in waiting:
        if not _torch(scope):
            return scope
        if scope.startswith(RATE_FILES) and busy:
            continue
        if lane or (not alone and len(busy) < lanes):
            return scope
    return waiting[0]
