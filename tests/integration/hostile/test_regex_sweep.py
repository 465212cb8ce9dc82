"""The exhaustive sweep behind tests/unit/hostile/test_regex_linear.py: every regex distdoctor
holds, searched on every adversarial unit, prefix and tail at half the longest line `log` keeps
(32 KiB), and `distdoctor log` itself on a file of such lines, within a bound, in a real process.

Each search is judged by the CPU seconds of its own thread, not by the wall clock: a loaded
machine (a parallel suite) does not move them. At 32 KiB a linear pattern takes at most a few
milliseconds; the mildly quadratic `pasted._ADDRESS_WORD` of old took 0.29 s (and 1.06 s at
64 KiB, under the 2 s wall bound this sweep once had, so only a loaded machine caught it):
0.1 s of CPU separates the two with room on both sides, at half the cost of 64 KiB lines."""

from __future__ import annotations

import time

import pytest

from distdoctor.logs import reader
from distdoctor.model import EXIT_ERROR, EXIT_FAIL, EXIT_OK
from tests.harness.hostile import dd, strict_json
from tests.unit.hostile.regex_inventory import all_patterns
from tests.unit.hostile.test_regex_linear import PREFIXES, TAILS, UNITS, timed_search

PATTERNS = all_patterns()
# Each pattern's sweep is its own test and builds nothing shared: xdist may run them anywhere.
SPREAD_OVER_WORKERS = True
MORE_UNITS = UNITS + ["a b", "=a ", "x:y ", "(", "\\", "'", '"', "%", "0:", ".0", "a-", "__", "NCCL ", "GPU0 ",
                      "10.0.0.1 ", "{", "}", "a;", "$", "#", "*", "+", "0x", "/a", "a<", "<a", "...", "::", "[0]",
                      "a>", "rank0", "\\n"]
MORE_PREFIXES = PREFIXES + ["NCCL INFO ", "NCCL WARN ", "1: eth0: <", "[rank0]: ", "[1,0]<stdout>:"]
MORE_TAILS = TAILS + [" ", "\n", ":", ">"]


LINE = reader.MAX_LINE // 2
CPU_BOUND = 0.1  # CPU seconds for one search of a LINE-long text
WALL_STOP = 5.0  # an exponential search is cut here, whatever the CPU says


def cpu_search(pattern, text: str) -> float:
    """CPU seconds this thread spent in pattern.search(text); inf when the alarm cut it."""
    return timed_search(pattern, text, bound=WALL_STOP, clock=time.thread_time)


@pytest.mark.parametrize("where,pattern", PATTERNS, ids=[w for w, _p in PATTERNS])
def test_every_pattern_is_linear_on_every_adversarial_line_of_32_kib(where, pattern):
    slow = []
    # every unit under every tail (no prefix), and under every prefix (with a failing tail)
    shapes = [("", tail) for tail in MORE_TAILS] + [(prefix, "\x00!") for prefix in MORE_PREFIXES if prefix]
    for unit in MORE_UNITS:
        for prefix, tail in shapes:
            text = prefix + unit * (LINE // len(unit)) + tail
            took = cpu_search(pattern, text)
            if took >= CPU_BOUND:
                slow.append(f"{prefix!r} + {unit!r} x {LINE // len(unit)} + {tail!r}: {took:.2f} s")
    assert not slow, f"{where} {pattern.pattern!r} backtracks on: {slow[:3]}"


def test_the_sweep_catches_the_quadratic_pattern_it_once_missed():
    import re

    old = re.compile(r"\binet6?\b|\binet addr:|\b\d{1,3}(?:\.\d{1,3}){3}/\d{1,2}\b|\b[0-9a-fA-F]{1,4}:[0-9a-fA-F:]*/\d{1,3}\b")
    assert cpu_search(old, "a:" * (LINE // 2)) >= CPU_BOUND


# One line each of what hung a reader once, or could: the pasted `ip -br` line, long runs of
# blanks, digits, colons and `1/1`, and a paste header followed by a trap.
HOSTILE_LINES = [
    "eth0 UP " + "1/1" * 25,
    "eth0 UP " + "1/1" * 40 + "\x01!",
    " " * 60_000 + "x",
    "\t" * 60_000 + ">",
    "0" * 60_000 + ".",
    "a:" * 30_000,
    "NCCL INFO NET/Socket : Using " + "a:" * 20_000,
    "1: eth0: <" + "a," * 20_000,
    "    Physical state: " + " " * 50_000 + "x",
    "[rank0]: " + "[0]" * 20_000,
]


def test_log_reads_hostile_lines_within_its_bound(tmp_path):
    path = tmp_path / "job.out"
    path.write_text("\n".join(HOSTILE_LINES * 3) + "\n")
    result = dd("log", str(path), "--json", timeout=120)
    assert result.elapsed < 60, result.elapsed
    assert result.returncode in (EXIT_OK, EXIT_FAIL, EXIT_ERROR), result.stderr
    assert "Traceback" not in result.stderr
    report = strict_json(result.stdout)
    assert report["command"] == "log"
