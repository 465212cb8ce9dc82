"""Hostlist expressions (`gpu[01-04,07],login-a[1-2]`), expanded the way Slurm's
`scontrol show hostnames` does: order kept (`n[3,1]` is n3 then n1), duplicates kept, zero
padding kept, several bracket groups expanded left to right (`r[1-2]n[1-2]` is r1n1 r1n2 r2n1 ...).

Ranges are expanded by ClusterShell's RangeSet, a well-kept implementation, one comma element
at a time so that its sorting cannot reorder what Slurm keeps in order. Unbalanced brackets,
empty or reversed ranges and non-numeric ranges are rejected with a message naming the piece;
Slurm itself is lenient with some of these (`scontrol show hostnames 'n[1-2'` prints `n]`),
which is how a broken MASTER_ADDR is born.
"""

from __future__ import annotations

import itertools


class HostlistError(ValueError):
    pass


def _split_top_level(expr: str) -> list[str]:
    pieces: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    pieces.append("".join(current))
    return [p.strip() for p in pieces]


def _expand_range(element: str, piece: str) -> list[str]:
    """One comma element of a bracket ('07', '01-04'), zero padding kept."""
    from ClusterShell.RangeSet import RangeSet, RangeSetParseError

    element = element.strip()
    if not element:
        raise HostlistError(f"empty range in hostlist {piece!r}")
    bounds = element.split("-")
    if len(bounds) > 2 or not all(b.isdigit() for b in bounds):
        raise HostlistError(f"invalid range {element!r} in hostlist {piece!r}: expected N or N-M with digits")
    if len(bounds) == 2 and int(bounds[1]) < int(bounds[0]):
        raise HostlistError(f"reversed range {element!r} in hostlist {piece!r}")
    if len(bounds) == 2 and len(bounds[1]) < len(bounds[0]):
        # Slurm pads to the lower bound's width (n[01-3] is n01 n02 n03); RangeSet wants both
        # bounds written to the same width.
        element = f"{bounds[0]}-{bounds[1].zfill(len(bounds[0]))}"
    try:
        return [str(v) for v in RangeSet(element, autostep=None)]
    except (RangeSetParseError, ValueError) as exc:
        raise HostlistError(f"invalid range {element!r} in hostlist {piece!r}: {exc}") from None


def _expand_piece(piece: str) -> list[str]:
    parts: list[list[str]] = []
    rest = piece
    while "[" in rest:
        head, _, tail = rest.partition("[")
        inside, _, rest = tail.partition("]")
        parts.append([head])
        parts.append([v for element in inside.split(",") for v in _expand_range(element, piece)])
    if "]" in rest:
        raise HostlistError(f"unbalanced ']' in hostlist {piece!r}")
    parts.append([rest])
    return ["".join(combo) for combo in itertools.product(*parts)]


def expand(expr: str) -> list[str]:
    """The hosts of a hostlist expression, in Slurm's order. An empty expression is an empty
    list (callers decide whether an empty nodelist is an error)."""
    expr = expr.strip()
    if not expr:
        return []
    hosts: list[str] = []
    for piece in _split_top_level(expr):
        if not piece:
            continue  # Slurm skips empty elements ('a,,b' is a and b)
        if any(ch.isspace() for ch in piece):
            raise HostlistError(f"white space inside host name {piece!r} in hostlist {expr!r}")
        hosts.extend(_expand_piece(piece))
    return hosts


def fold(hosts: list[str]) -> str:
    """The compressed form of a list of hosts (`n[1-3,9-11]`), for short messages."""
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(hosts)) if hosts else ""
