"""Hostlist expressions (`gpu[01-04,07],login-a[1-2]`), expanded the way Slurm's
`scontrol show hostnames` does: order kept (`n[3,1]` is n3 then n1), duplicates kept, zero
padding kept, several bracket groups expanded left to right (`r[1-2]n[1-2]` is r1n1 r1n2 r2n1 ...).

Numbers keep the width of a range's lower bound, as Slurm's hostlist.c prints them (`n[01-100]`,
which `scontrol show hostlist` itself prints, is n01 ... n99 n100). An expression of more than
limits.MAX_HOSTS hosts is refused before it is built (Slurm refuses such a range: "Too many hosts
in range"), so `n[0-999999999]` costs nothing. Unbalanced brackets,
empty or reversed ranges and non-numeric ranges are rejected with a message naming the piece;
Slurm itself is lenient with some of these (`scontrol show hostnames 'n[1-2'` prints `n]`),
which is how a broken MASTER_ADDR is born.
"""

from __future__ import annotations

import itertools

from distdoctor import limits


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


_MAX_DIGITS = 18  # a host number beyond this is no host: Slurm reads them as unsigned long


def _expand_range(element: str, piece: str) -> list[str]:
    """One comma element of a bracket ('07', '01-04', '01-100'), zero padding kept: every
    number is printed at the width of the lower bound, as Slurm's hostlist.c does
    (`n[01-100]` is n01 ... n99 n100, `n[1-010]` is n1 ... n10)."""
    element = element.strip()
    if not element:
        raise HostlistError(f"empty range in hostlist {piece!r}")
    bounds = element.split("-")
    if len(bounds) > 2 or not all(b.isascii() and b.isdigit() for b in bounds):
        raise HostlistError(f"invalid range {element[:40]!r} in hostlist {piece[:80]!r}: expected N or N-M with digits")
    if any(len(b) > _MAX_DIGITS for b in bounds):
        raise HostlistError(f"number too large in range {element[:40]!r} of hostlist {piece[:80]!r}")
    low, high = int(bounds[0]), int(bounds[-1])
    if high < low:
        raise HostlistError(f"reversed range {element!r} in hostlist {piece[:80]!r}")
    if high - low + 1 > limits.MAX_HOSTS:
        raise HostlistError(f"range {element!r} in hostlist {piece[:80]!r} has {high - low + 1} hosts; "
                            f"Slurm refuses ranges of more than {limits.MAX_HOSTS}")
    width = len(bounds[0])
    return [f"{value:0{width}d}" for value in range(low, high + 1)]


def _expand_piece(piece: str, budget: int) -> list[str]:
    """The hosts of one top-level piece (`r[1-2]n[1-2]`), refusing before it builds them when
    there would be more than budget."""
    if budget < 1:
        raise TooManyHosts(piece)
    parts: list[list[str]] = []
    rest = piece
    total = 1
    while "[" in rest:
        head, _, tail = rest.partition("[")
        inside, _, rest = tail.partition("]")
        values = []
        for element in inside.split(","):
            values.extend(_expand_range(element, piece))
            if len(values) * total > budget:
                raise TooManyHosts(piece)
        parts.append([head])
        parts.append(values)
        total *= len(values)
    if "]" in rest:
        raise HostlistError(f"unbalanced ']' in hostlist {piece[:80]!r}")
    parts.append([rest])
    return ["".join(combo) for combo in itertools.product(*parts)]


class TooManyHosts(HostlistError):
    def __init__(self, piece: str):
        super().__init__(f"hostlist {piece[:80]!r} expands to more than {limits.MAX_HOSTS} hosts, "
                         f"the most distdoctor (and Slurm, per range) accepts")


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
        try:
            hosts.extend(_expand_piece(piece, limits.MAX_HOSTS - len(hosts)))
        except TooManyHosts:
            raise TooManyHosts(expr) from None
    return hosts
