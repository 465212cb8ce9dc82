"""The tools too slow to wait for on a cold cache, and the checks that read their answers.

`ompi_info --parsable --all` takes 0.2-0.3 s (it loads every Open MPI component). On a first run
`check` starts it as soon as it knows which checks run, before Python has imported the checks'
code (about 50 ms), and the fact that reads it waits for that run (Host.start_cached). Data, so
that the fact and the early start use one command line.
"""

from __future__ import annotations

from typing import Iterable

OMPI_INFO = ("ompi_info", "--parsable", "--all")
OMPI_INFO_TIMEOUT = 10.0

# (command, its timeout, the checks that read its answer)
SLOW_TOOLS: tuple[tuple[tuple[str, ...], float, frozenset[str]], ...] = (
    (OMPI_INFO, OMPI_INFO_TIMEOUT, frozenset({"build.mpi-cuda-aware"})),
)


def start(host, check_ids: Iterable[str]) -> None:
    """Start the slow tools that the chosen checks read and the cache does not answer."""
    ids = set(check_ids)
    for argv, timeout, readers in SLOW_TOOLS:
        path = host.which(argv[0]) if ids & readers else None
        if path:
            host.start_cached([path, *argv[1:]], timeout)
