"""Hostlist expressions (`gpu[01-04,07],login-a[1-2]`), expanded the way Slurm does: order
kept, zero padding kept. Pieces are split at top-level commas and each piece is expanded by
ClusterShell's NodeSet, a well-kept implementation, rather than a hand-written regex."""

from __future__ import annotations


class HostlistError(ValueError):
    pass


def _split_top_level(expr: str) -> list[str]:
    pieces, depth, current = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
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


def expand(expr: str) -> list[str]:
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError, RangeSetParseError

    expr = expr.strip()
    if not expr:
        raise HostlistError("empty hostlist")
    hosts: list[str] = []
    for piece in _split_top_level(expr):
        if not piece:
            raise HostlistError(f"empty element in hostlist {expr!r}")
        if "[" not in piece:
            hosts.append(piece)
            continue
        try:
            hosts.extend(str(n) for n in NodeSet(piece))
        except (NodeSetParseError, RangeSetParseError, ValueError) as exc:
            raise HostlistError(f"invalid hostlist {piece!r}: {exc}") from None
    return hosts
