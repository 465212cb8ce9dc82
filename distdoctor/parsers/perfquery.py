"""InfiniBand port counters as text: `perfquery` (PortCounters, `-x` PortCountersExtended, the
short names of older infiniband-diags) and `ibqueryerrors` (the ports whose counters are past its
thresholds). Counter names are given as sysfs names (hardware/ibcounters.PMA_TO_SYSFS), so the
thresholds the sysfs counters are judged by apply unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from distdoctor.hardware.ibcounters import sysfs_name
from distdoctor.parsers import ParseError

_HEAD = re.compile(r"^#\s*Port (?P<ext>extended )?counters:\s*Lid\s+(?P<lid>\d+)\s+(?:port\s+(?P<port>\d+)|"
                   r"(?P<all>all ports))", re.I)
_FIELD = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*):\.+(?P<value>0x[0-9a-fA-F]+|\d+)\s*$")
_NOT_COUNTERS = {"PortSelect", "CounterSelect", "CounterSelect2"}


@dataclass(frozen=True)
class PortCounters:
    lid: int | None
    port: int | None        # None: the sum over all ports (`perfquery -a`)
    extended: bool
    counters: dict[str, int]  # sysfs names


def parse_perfquery(text: str) -> list[PortCounters]:
    """Every `# Port [extended] counters: Lid L port P` block, in order (a paste of two readings of
    one port gives two entries)."""
    out: list[PortCounters] = []
    head = None
    counters: dict[str, int] = {}

    def close():
        if head is not None:
            port = None if head.group("all") else int(head.group("port"))
            out.append(PortCounters(int(head.group("lid")), port, bool(head.group("ext")), dict(counters)))

    for line in text.splitlines():
        body = line.strip()
        m = _HEAD.match(body)
        if m:
            close()
            head, counters = m, {}
            continue
        f = _FIELD.match(body)
        if f and head is not None and f.group("name") not in _NOT_COUNTERS:
            value = f.group("value")
            counters[sysfs_name(f.group("name"))] = int(value, 16) if value.startswith("0x") else int(value)
    close()
    if not out:
        raise ParseError("perfquery", "no '# Port counters: Lid L port P' block", 1 if text else None, text)
    return out


@dataclass(frozen=True)
class PortErrors:
    node: str               # the node description ibqueryerrors names ("dl380g7 mlx4_0", a switch)
    guid: str
    port: int | None        # None: ibqueryerrors' "port ALL" sum
    counters: dict[str, int]  # sysfs names; only those past ibqueryerrors' own thresholds


@dataclass(frozen=True)
class QueryErrors:
    ports: tuple[PortErrors, ...]
    nodes_checked: int | None = None
    ports_checked: int | None = None


_NODE = re.compile(r'^Errors for (?:(?P<guid>0x[0-9a-fA-F]+)\s+)?"(?P<desc>[^"]*)"')
_PORT = re.compile(r"^GUID\s+(?P<guid>0x[0-9a-fA-F]+)\s+port\s+(?P<port>\d+|ALL):\s*(?P<rest>.*)$")
_PAIR = re.compile(r"\[(?P<name>[A-Za-z][A-Za-z0-9]*)\s*==\s*(?P<value>\d+)\]")
_SUMMARY = re.compile(r"^##\s*Summary:\s*(?P<nodes>\d+) nodes checked")
_SUMMARY_PORTS = re.compile(r"^##\s*(?P<ports>\d+) ports checked")


def parse_ibqueryerrors(text: str) -> QueryErrors:
    ports: list[PortErrors] = []
    node = ""
    nodes = checked = None
    for line in text.splitlines():
        body = line.strip()
        m = _NODE.match(body)
        if m:
            node = m.group("desc")
            continue
        p = _PORT.match(body)
        if p:
            pairs = {sysfs_name(x.group("name")): int(x.group("value")) for x in _PAIR.finditer(p.group("rest"))}
            port = None if p.group("port") == "ALL" else int(p.group("port"))
            ports.append(PortErrors(node, p.group("guid"), port, pairs))
            continue
        if (s := _SUMMARY.match(body)) is not None:
            nodes = int(s.group("nodes"))
        elif (s := _SUMMARY_PORTS.match(body)) is not None:
            checked = int(s.group("ports"))
    if not ports and nodes is None:
        raise ParseError("ibqueryerrors", "no 'Errors for' port line and no '## Summary' line", 1 if text else None, text)
    return QueryErrors(tuple(ports), nodes, checked)
