"""Words in messages: counted nouns ("1 check", "2 checks"), names and values kept on their line,
and members of a job or fleet as one short expression (ranks '0-3,7', hosts 'gpu[007,012]')."""

from __future__ import annotations

import re
from typing import Iterable

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


# A terminal's control sequences (colour, underline): some tools write them even into a pipe
# (nvidia-smi 580 underlines `topo -m`'s header), and pasted logs keep them, sometimes with the
# escape in caret notation as `cat -v`, less and editors show it (`^[[1;36m(VllmWorker ...`).
_ANSI = re.compile(r"(?:\x1b|\^\[)\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text or "^[[" in text else text


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
    return fold_hosts(names)


def fold_hosts(hosts: Iterable[str]) -> str:
    """Host names as a Slurm/ClusterShell host list ('n[1-3,9-11]', and '[1-3]' for hosts named
    by numbers), which `srun -w` and `clush -w` take."""
    names = list(dict.fromkeys(str(h) for h in hosts))
    if not names:
        return ""
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


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """'1 check', '0 checks', '2 GPUs'; irregular nouns pass their plural ('1 process', '2 processes')."""
    word = noun if count == 1 else (plural_form or noun + "s")
    return f"{count} {word}"
