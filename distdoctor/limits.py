"""The ranges every number distdoctor is given must fall in, and the caps on every expansion.

Numbers come from the command line, config files and the environment; any of them can be
`nan`, `inf`, negative or absurdly large, and each of those once hung or exhausted the tool
(`--timeout nan` spun at 100% CPU; `SLURM_TASKS_PER_NODE='2(x100000000)'` took 23 GB). The caps
follow Slurm's own where Slurm has one, so nothing a real job can produce is refused.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

# Slurm's hostlist.c: "#define MAX_RANGE (64*1024) /* 64K Hosts */ -- max host range: anything
# larger will be assumed to be an error". distdoctor applies it to a whole expression too.
MAX_HOSTS = 65536
# Slurm's task counts are uint32 with NO_VAL (0xfffffffe) and INFINITE (0xffffffff) reserved;
# srun's per-job limit (MAX_TASKS in slurm.conf) defaults far lower, but a sum beyond what
# fits in uint32 is never real.
MAX_TASKS = 0xFFFFFFFD
# Per-node counts are expanded into a list only up to the number of hosts a job can have.
MAX_COUNT_ELEMENTS = MAX_HOSTS
MAX_SECONDS = 86400.0  # any timeout: a health check bounded by more than a day is not bounded
MAX_JOBS = 1024  # checks in parallel, each on a thread


class RangeError(ValueError):
    """A number outside its range; the message says what was given and what is allowed."""


def seconds(value: Any, what: str = "timeout") -> float:
    """A positive, finite number of seconds, at most MAX_SECONDS."""
    if isinstance(value, bool):
        raise RangeError(f"{what} must be a number of seconds, not {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise RangeError(f"{what} must be a number of seconds, not {value!r:.40}") from None
    if not math.isfinite(number) or not 0 < number <= MAX_SECONDS:
        raise RangeError(f"{what} must be more than 0 and at most {MAX_SECONDS:g} seconds, not {value!r:.40}")
    return number


def count(value: Any, what: str, low: int = 1, high: int = MAX_JOBS) -> int:
    """An integer in [low, high]."""
    if isinstance(value, bool):
        raise RangeError(f"{what} must be an integer, not {value!r}")
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise RangeError(f"{what} must be an integer, not {value!r:.40}") from None
    if not low <= number <= high:
        raise RangeError(f"{what} must be between {low} and {high}, not {value!r:.40}")
    return number


def non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def arg_seconds(text: str) -> float:
    """argparse type: --timeout."""
    try:
        return seconds(text, "the value")
    except RangeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def arg_fraction(text: str) -> float:
    """argparse type: a share between 0 and 1 (`nan` would make every comparison false)."""
    try:
        number = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
    if not 0.0 <= number <= 1.0:  # also false for nan
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text[:40]!r}")
    return number


def arg_count(high: int, low: int = 1):
    """argparse type for an integer option in [low, high]."""
    def parse(text: str) -> int:
        try:
            return count(text, "the value", low, high)
        except RangeError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = "integer"
    return parse


# The longest run of digits an expected value may hold: a GPU count, a byte size or a version part
# is never longer, and int() refuses strings past 4300 digits with a ValueError nobody expects.
MAX_DIGITS = 40
_NON_FINITE_WORDS = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


def expected_value(value: Any, what: str) -> Any:
    """An `[expect]` value or `--expect FACT=VALUE`: a finite number, true/false, or a string of
    printable ASCII whose digit runs are short. `nan` (a number or a target such as ">= nan")
    matches nothing, so a node would fail for a typo; '²' and '١' are digits to str.isdigit()
    but not to int()."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if non_finite(item):
            raise RangeError(f"{what} must be a finite number, not {item!r}")
        if isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 10 ** MAX_DIGITS:
            raise RangeError(f"{what}: a number of more than {MAX_DIGITS} digits is not a node's value")
        if isinstance(item, str):
            if not item.isascii() or not item.isprintable():
                raise RangeError(f"{what} must be printable ASCII, not {item[:40]!r}")
            run = longest_digit_run(item)
            if run > MAX_DIGITS:
                raise RangeError(f"{what}: a number of {run} digits is not a node's value")
            target = item.strip().lstrip("<>=!").strip().lower()
            if target in _NON_FINITE_WORDS - {"inf", "infinity"}:
                raise RangeError(f"{what} must be a finite number, not {item!r}")
    return value


def longest_digit_run(text: str) -> int:
    best = current = 0
    for char in text:
        current = current + 1 if "0" <= char <= "9" else 0
        best = max(best, current)
    return best
