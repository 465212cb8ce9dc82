"""Every regex distdoctor holds runs in linear time on adversarial text: each is searched (the
worst use of a pattern) on runs of the pieces backtracking feeds on, long enough that an
exponential pattern (`eth0 UP ` + `1/1`x25 took 160 s) or a quadratic one (a 16 KiB run of
blanks) is far past the bound, while a linear one takes microseconds. The patterns are found
by discovery (regex_inventory.py), so one added tomorrow is covered; a hypothesis property test
mixes the pieces at random. The slow, exhaustive sweep at 64 KiB lines is in
tests/integration/hostile/test_regex_sweep.py."""

from __future__ import annotations

import signal
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.hostile.regex_inventory import all_patterns, not_imported

PATTERNS = all_patterns()
# What nested or overlapping quantifiers feed on: blanks, digits, words, separators, and the
# pieces of the lines the parsers read (addresses, `1/1`, `a:`, `@`).
UNITS = ["1/1", " ", "\t", "a", "0", "a:", ":", "@", "a@", "a=", "0.", "a ", "ab", "/", "-", "[", "<0>", "1.1",
         "a/", "a,"]
PREFIXES = ["", "eth0 UP ", "x: "]
TAILS = ["", "\x00!"]
# The long runs (a quadratic pattern's trap) are tried with the units that caught one; the
# integration sweep tries every unit, prefix and tail at 64 KiB.
LONG_UNITS = [" ", "\t", "0", "a", "1/1", "a:", "@", "a="]
LONG = 16 * 1024
BOUND = 1.0  # seconds for one search; a linear search of 16 KiB takes well under a millisecond


class TooSlow(Exception):
    pass


def _alarm(_signum, _frame):
    raise TooSlow()


def timed_search(pattern, text: str, bound: float = BOUND, clock=time.perf_counter) -> float:
    """Seconds pattern.search(text) took by `clock` (wall, or time.thread_time for CPU); the
    regex engine checks for signals, so an alarm ends a catastrophic search at `bound` seconds
    of wall clock instead of hanging the suite (inf)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, bound)
    start = clock()
    try:
        pattern.search(text)
    except TooSlow:
        return float("inf")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return clock() - start


def adversarial(unit: str, prefix: str, tail: str, long: bool = True):
    for repeat in (25, 40) + ((LONG // len(unit),) if long else ()):
        yield prefix + unit * repeat + tail


def test_the_inventory_finds_the_patterns_that_read_untrusted_text():
    names = {where for where, _p in PATTERNS}
    assert len(PATTERNS) > 150
    assert "distdoctor.logs.pasted._IP_BRIEF" in names and "distdoctor.parsers.ibstat._FIELD" in names
    assert any(name.startswith("signature ") for name in names)


def test_the_modules_read_instead_of_imported_compile_no_regex():
    """The walk reads the torch-importing modules rather than importing them: none of them may
    import `re` or call a compile, else a pattern it holds would go unswept."""
    import ast
    import importlib.util

    assert not_imported(), "the walk reads no module: is the TORCH_MODULES list stale?"
    for name in not_imported():
        with open(importlib.util.find_spec(name).origin, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        calls = {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                 for node in ast.walk(tree) if isinstance(node, ast.Call)}
        assert not imported & {"re", "regex"} and "compile" not in calls, name


@pytest.mark.parametrize("where,pattern", PATTERNS, ids=[w for w, _p in PATTERNS])
def test_every_pattern_is_linear_on_adversarial_runs(where, pattern):
    slow = []
    for unit in UNITS:
        for prefix in PREFIXES:
            for tail in TAILS:
                long = unit in LONG_UNITS and prefix == "" and tail == "\x00!"
                for text in adversarial(unit, prefix, tail, long):
                    took = timed_search(pattern, text)
                    if took >= BOUND:
                        slow.append(f"{prefix!r} + {unit!r} x {(len(text) - len(prefix)) // len(unit)} + {tail!r}")
                        break
    assert not slow, f"{where} {pattern.pattern!r} backtracks on: {slow[:3]}"


def test_the_bound_can_fail():
    """The measurement sees a catastrophic pattern: the one `log` once hung on."""
    import re

    nested = re.compile(r"^(?!\d+:)[A-Za-z][\w.@-]*\s+(?:UP|DOWN)\s*(?:\S+/\d+\s*)*$")
    assert timed_search(nested, "eth0 UP " + "1/1" * 40 + "\x00!", bound=0.3) == float("inf")
    # Python 3.11.2's regex engine (Debian 12's) checks for signals too seldom in this loop for the
    # alarm to cut it (200 000 blanks ran 16 s there, 0.7 s on 3.11.7): a text whose quadratic
    # search takes about a second uncut shows past the bound either way.
    quadratic = re.compile(r"[ \t]*>")
    assert timed_search(quadratic, " " * 50_000 + "x", bound=0.3) >= 0.3


PIECES = st.lists(st.sampled_from(UNITS + ["UP ", "NCCL WARN ", "[1,0]<stdout>:", "inet ", "\\", "'", '"', "é"]),
                  min_size=1, max_size=6).map("".join)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(PIECES, st.integers(min_value=20, max_value=2000), st.sampled_from(TAILS + [" ", "\n"]))
def test_random_mixtures_stay_within_the_bound(unit, repeat, tail):
    text = (unit * repeat)[:LONG] + tail
    for where, pattern in PATTERNS:
        assert timed_search(pattern, text) < BOUND, f"{where} {pattern.pattern!r} on {unit!r} x {repeat} + {tail!r}"
