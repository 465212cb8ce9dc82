"""The exhaustive sweep behind tests/unit/hostile/test_regex_linear.py: every regex distdoctor
holds, searched on every adversarial unit, prefix and tail at the longest line `log` keeps
(64 KiB), and `distdoctor log` itself on a file of such lines, within a bound, in a real process.
Slow (minutes on a shared machine), hence here."""

from __future__ import annotations

import pytest

from distdoctor.logs import reader
from distdoctor.model import EXIT_ERROR, EXIT_FAIL, EXIT_OK
from tests.harness.hostile import dd, strict_json
from tests.unit.hostile.regex_inventory import all_patterns
from tests.unit.hostile.test_regex_linear import BOUND, PREFIXES, TAILS, UNITS, timed_search

PATTERNS = all_patterns()
# Each pattern's sweep is its own test and builds nothing shared: xdist may run them anywhere.
SPREAD_OVER_WORKERS = True
MORE_UNITS = UNITS + ["a b", "=a ", "x:y ", "(", "\\", "'", '"', "%", "0:", ".0", "a-", "__", "NCCL ", "GPU0 ",
                      "10.0.0.1 ", "{", "}", "a;", "$", "#", "*", "+", "0x", "/a", "a<", "<a", "...", "::", "[0]",
                      "a>", "rank0", "\\n"]
MORE_PREFIXES = PREFIXES + ["NCCL INFO ", "NCCL WARN ", "1: eth0: <", "[rank0]: ", "[1,0]<stdout>:"]
MORE_TAILS = TAILS + [" ", "\n", ":", ">"]


@pytest.mark.parametrize("where,pattern", PATTERNS, ids=[w for w, _p in PATTERNS])
def test_every_pattern_is_linear_on_every_adversarial_line_of_64_kib(where, pattern):
    slow = []
    # every unit under every tail (no prefix), and under every prefix (with a failing tail)
    shapes = [("", tail) for tail in MORE_TAILS] + [(prefix, "\x00!") for prefix in MORE_PREFIXES if prefix]
    for unit in MORE_UNITS:
        for prefix, tail in shapes:
            text = prefix + unit * (reader.MAX_LINE // len(unit)) + tail
            if timed_search(pattern, text, bound=2 * BOUND) >= 2 * BOUND:
                slow.append(f"{prefix!r} + {unit!r} x {reader.MAX_LINE // len(unit)} + {tail!r}")
    assert not slow, f"{where} {pattern.pattern!r} backtracks on: {slow[:3]}"


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
