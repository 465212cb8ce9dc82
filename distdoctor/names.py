"""Members of a job or fleet as one short expression: ranks as '0-3,7', hosts as ClusterShell's
folded NodeSet 'gpu[007,012]'. Used by the comparison engine and by every fix that names
nodes (distdoctor/remote.py)."""

from __future__ import annotations

import re
from typing import Iterable

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """text with its control characters written as escapes ("gpu7\\nreboot"): a name or value
    from a report or a log, printed, stays on its line and cannot start one of its own."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def fold(names: Iterable[str]) -> str:
    """Member names as one short expression: ranks as '0-3,7', hosts as ClusterShell's folded
    NodeSet 'gpu[007,012]'."""
    names = list(dict.fromkeys(one_line(str(n)) for n in names))
    if not names:
        return ""
    if all(n.isdigit() for n in names):
        return rank_ranges(int(n) for n in names)
    try:
        from ClusterShell.NodeSet import NodeSet

        return str(NodeSet.fromlist(names))
    except Exception:  # a name NodeSet cannot hold (brackets, spaces): list them plainly
        return ",".join(sorted(names))


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    runs: list[list[int]] = []
    for r in sorted(set(ranks)):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
