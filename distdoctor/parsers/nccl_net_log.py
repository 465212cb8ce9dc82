"""The interface lines of an `NCCL_DEBUG=INFO` log: which interfaces and addresses NCCL chose
for its bootstrap, its socket transport and its IB out-of-band channel, and its WARN lines.

Handles every release's wording: `Bootstrap : Using` (<= 2.24) and `Bootstrap: Using` (2.25+),
`NET/Socket : Using [0]if:addr<0> [1]...` (2.4+), `NET : Using interface if:addr<0>` one per line
closed by `NET/Socket : N interfaces found` (<= 2.3), `NET/IB : Using [0]mlx5_0:1/IB ; OOB if:addr<0>`
and the older `NET/IB : Using interface ib0 for sideband communication`. Lines from several
hosts and ranks may interleave (mpirun --tag-output prefixes are skipped); each selection keeps
the host:pid it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:)?(?:(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+)\s+)?"
                     r"(?:\[(?P<dev>\d+)\]\s+)?(?P<body>.*)$")
# `[0]eth0:10.0.0.1<0>`: a word that ends in `<port>`, split at its first usable colon in Python.
# One regex for interface and address rescanned the rest of the line from every colon of a
# `a:a:a:...` line (quadratic); a word starts only after a blank, `<` or `>`, so this is linear.
_IFADDR = re.compile(r"(?<![^\s<>])(?P<word>[^\s<>]+)<(?P<port>\d+)>")
_BOOT = re.compile(r"\bBootstrap ?: Using (?P<rest>.*)$")
_SOCKET = re.compile(r"\bNET/Socket ?: Using (?P<rest>.*)$")
_OLD_ONE = re.compile(r"\bNET ?: Using interface (?P<rest>\S+)")
_OLD_COUNT = re.compile(r"\bNET/Socket ?: (?P<n>\d+) interfaces? found")
_IB = re.compile(r"\bNET/IB ?: Using (?P<rest>\[\d+\].*)$")
_IB_OLD_DEV = re.compile(r"\bNET/IB ?: \[(?P<i>\d+)\] (?P<dev>[^\s:]+):(?P<port>\d+)/(?P<ll>\S+)")
_IB_DEV = re.compile(r"\[(?P<i>\d+)\](?P<dev>[^\s:\[]+):(?P<port>\d+)/(?P<ll>[A-Za-z]+)")
_SIDEBAND = re.compile(r"\bNET/IB ?: Using interface (?P<if>\S+) for sideband communication")
_WARN = re.compile(r"\bNCCL WARN (?P<text>.*)$|^(?:\S+ )?WARN (?P<old>.*)$")


@dataclass(frozen=True)
class Selection:
    what: str  # bootstrap, socket, ib, oob
    host: str  # "host:pid" or "" when the log has no prefix
    interfaces: tuple[tuple[str, str], ...] = ()  # (interface, address); address "" when not printed
    devices: tuple[tuple[str, int, str], ...] = ()  # IB: (hca, port, link layer)


@dataclass(frozen=True)
class NcclNetLog:
    selections: tuple[Selection, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    def of(self, what: str) -> list[Selection]:
        return [s for s in self.selections if s.what == what]


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for m in _IFADDR.finditer(text):
        rest = m.group("word")
        while True:
            head, colon, rest = rest.partition(":")
            name = re.split(r"[\[\]]", head)[-1]  # `[0]eth0`: the index is not part of the name
            if not colon or name:
                break
        if colon and name:
            pairs.append((name, rest))
    return tuple(pairs)


def parse_nccl_net_log(text: str) -> NcclNetLog:
    selections: list[Selection] = []
    warnings: list[str] = []
    pending: dict[str, list[tuple[str, str]]] = {}  # old one-per-line socket lists, by host:pid
    pending_ib: dict[str, list[tuple[str, int, str]]] = {}

    def close(who: str) -> None:
        if pending.get(who):
            selections.append(Selection("socket", who, tuple(pending.pop(who))))
        if pending_ib.get(who):
            selections.append(Selection("ib", who, (), tuple(pending_ib.pop(who))))

    for line in text.splitlines():
        m = _PREFIX.match(line.strip())
        body = m.group("body") if m else line
        who = f"{m.group('host')}:{m.group('pid')}" if m and m.group("host") else ""
        warn = _WARN.search(body)
        if warn:
            warnings.append((warn.group("text") or warn.group("old") or "").strip())
            continue
        if (b := _BOOT.search(body)):
            selections.append(Selection("bootstrap", who, _pairs(b.group("rest"))))
        elif (s := _SOCKET.search(body)):
            selections.append(Selection("socket", who, _pairs(s.group("rest"))))
        elif (o := _OLD_ONE.search(body)):
            pair = _pairs(o.group("rest"))
            if pair and pending.get(who) and pair[0] in pending[who]:
                close(who)  # the list printed again: a new group
            pending.setdefault(who, []).extend(pair)
        elif _OLD_COUNT.search(body):
            close(who)
        elif (ib := _IB.search(body)):
            rest = ib.group("rest")
            devices, _sep, oob = rest.partition(";")
            selections.append(Selection("ib", who, (), tuple(
                (d.group("dev"), int(d.group("port")), d.group("ll")) for d in _IB_DEV.finditer(devices))))
            if "OOB" in oob:
                # "; OOB :" with nothing after it: NCCL found no interface for its out-of-band channel
                oob_if = oob.split("OOB", 1)[1].strip().lstrip(":").strip()
                selections.append(Selection("oob", who, _pairs(oob_if) or ((oob_if, ""),)))
        elif (d := _IB_OLD_DEV.search(body)):
            pending_ib.setdefault(who, []).append((d.group("dev"), int(d.group("port")), d.group("ll")))
        elif (sb := _SIDEBAND.search(body)):
            # Releases <= 2.3 print "NET : Using interface X" once more while looking up the IB
            # sideband interface: that line belongs to the sideband, not to the socket list.
            pending.pop(who, None)
            selections.append(Selection("oob", who, ((sb.group("if"), ""),)))
    for who in list(pending) + list(pending_ib):
        close(who)
    return NcclNetLog(tuple(selections), tuple(warnings))
