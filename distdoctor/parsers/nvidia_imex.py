"""`nvidia-imex-ctl -N`: the IMEX daemons of one multi-node NVLink domain as one of them sees it,
each node's state and driver version, the connectivity matrix between them, and the domain's
state (UP, DEGRADED, DOWN)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from distdoctor.parsers import ParseError

_NODE = re.compile(r"^Node #(?P<index>\d+)\s+-\s+(?P<address>\S+)\s+-\s+(?P<state>[A-Z_]+)"
                   r"(?:\s+-\s+Version:\s*(?P<version>\S+))?\s*$")
_MATRIX_HEAD = re.compile(r"^Nodes From\\To\s+(?P<cols>[\d\s]+)$")
_MATRIX_ROW = re.compile(r"^(?P<row>\d+)\s+(?P<cells>(?:[A-Z]|![A-Z]!)(?:\s+(?:[A-Z]|![A-Z]!))*)\s*$")
_DOMAIN = re.compile(r"^Domain State:\s*(?P<state>\w+)\s*$")


@dataclass(frozen=True)
class ImexNode:
    index: int
    address: str
    state: str              # READY, UNAVAILABLE, ...
    version: str = ""


@dataclass(frozen=True)
class ImexDomain:
    nodes: tuple[ImexNode, ...]
    links: tuple[tuple[int, int, str], ...]  # (from, to, C | N | I | R | D | A | !V! | !M!)
    state: str = ""                      # UP, DEGRADED, DOWN; "" when not printed


def parse_imex_nodes(text: str) -> ImexDomain:
    nodes: list[ImexNode] = []
    links: list[tuple[int, int, str]] = []
    cols: list[int] = []
    state = ""
    for line in text.splitlines():
        body = line.strip()
        if (m := _NODE.match(body)) is not None:
            nodes.append(ImexNode(int(m.group("index")), m.group("address"), m.group("state"), m.group("version") or ""))
        elif (m := _MATRIX_HEAD.match(body)) is not None:
            cols = [int(c) for c in m.group("cols").split()]
        elif cols and (m := _MATRIX_ROW.match(body)) is not None:
            for col, cell in zip(cols, m.group("cells").split()):
                links.append((int(m.group("row")), col, cell))
        elif (m := _DOMAIN.match(body)) is not None:
            state = m.group("state").upper()
    if not nodes and not state:
        raise ParseError("nvidia-imex-ctl -N", "no 'Node #N - address - STATE' line and no 'Domain State'",
                         1 if text else None, text)
    return ImexDomain(tuple(nodes), tuple(links), state)
