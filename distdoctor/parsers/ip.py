"""iproute2 output: `ip -d -j link`, `ip -j route get ADDR`, and the text of `ip addr` /
`ip -brief addr` (what users paste into issues, and what old iproute2 without -j prints)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from distdoctor.parsers import ParseError


@dataclass(frozen=True)
class IpLink:
    ifindex: int
    name: str
    flags: tuple[str, ...] = ()
    mtu: int | None = None
    operstate: str = ""
    link_type: str = ""  # ether, loopback, infiniband, none ...
    info_kind: str = ""  # veth, bridge, tun, bond, vlan ... ("" for a plain device)
    slave_kind: str = ""  # bridge, bond: what this interface is enslaved to
    tun_type: str = ""  # tun or tap
    master: str | None = None
    address: str = ""


def _json(text: str, what: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError("ip", f"{what}: not JSON ({exc.msg})", exc.lineno, text.splitlines()[exc.lineno - 1]
                         if text.splitlines() and 0 < exc.lineno <= len(text.splitlines()) else "") from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, arrays nested 1000 deep
        raise ParseError("ip", f"{what}: not usable JSON ({type(exc).__name__}: {str(exc)[:80]})") from None


def parse_link_json(text: str) -> list[IpLink]:
    data = _json(text, "ip -d -j link")
    if not isinstance(data, list):
        raise ParseError("ip", "ip -d -j link: expected a JSON list of links")
    links = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("ifname"), str):
            raise ParseError("ip", f"ip -d -j link: entry {i} has no interface name")
        info = item.get("linkinfo") if isinstance(item.get("linkinfo"), dict) else {}
        data_ = info.get("info_data") if isinstance(info.get("info_data"), dict) else {}
        try:
            ifindex = int(item.get("ifindex", 0))
            mtu = int(item["mtu"]) if item.get("mtu") is not None else None
        except (TypeError, ValueError):
            raise ParseError("ip", f"ip -d -j link: entry {i} ({item['ifname']}) has a non-numeric ifindex or mtu") from None
        flags = item.get("flags") if isinstance(item.get("flags"), list) else []
        links.append(IpLink(
            ifindex=ifindex, name=item["ifname"], flags=tuple(str(f) for f in flags), mtu=mtu,
            operstate=str(item.get("operstate", "")), link_type=str(item.get("link_type", "")),
            info_kind=str(info.get("info_kind", "") or ""), slave_kind=str(info.get("info_slave_kind", "") or ""),
            tun_type=str(data_.get("type", "") or "") if info.get("info_kind") == "tun" else "",
            master=item.get("master") if isinstance(item.get("master"), str) else None,
            address=str(item.get("address", "")),
        ))
    return links


@dataclass(frozen=True)
class RouteGet:
    dst: str
    dev: str = ""
    gateway: str = ""
    prefsrc: str = ""
    kind: str = ""  # "unicast" or unreachable / blackhole / prohibit


def parse_route_get_json(text: str) -> RouteGet:
    data = _json(text, "ip -j route get")
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise ParseError("ip", "ip -j route get: expected a list with one route")
    r = data[0]
    return RouteGet(dst=str(r.get("dst", "")), dev=str(r.get("dev", "")), gateway=str(r.get("gateway", "")),
                    prefsrc=str(r.get("prefsrc", "")), kind=str(r.get("type", "unicast")))


@dataclass(frozen=True)
class IpAddrLink:
    """One interface from `ip addr` (full or -brief)."""

    name: str
    ifindex: int | None = None
    flags: tuple[str, ...] = ()
    mtu: int | None = None
    state: str = ""
    master: str | None = None
    link_type: str = ""
    peer_index: int | None = None  # the "@if10" suffix of a veth name
    addresses: tuple[tuple[str, str, str], ...] = field(default=())  # (family, "addr/prefix", scope)


_HEADER = re.compile(r"^(?P<idx>\d+):\s+(?P<name>[^:\s]+?)(?:@(?P<peer>[^:\s]+))?:\s+<(?P<flags>[^>]*)>(?P<rest>.*)$")
_ADDR = re.compile(r"^\s+(?P<fam>inet6?)\s+(?P<cidr>\S+)(?P<rest>.*)$")
_LINK = re.compile(r"^\s+link/(?P<type>\S+)")
_BRIEF = re.compile(r"^(?P<name>\S+?)(?:@(?P<peer>\S+))?\s+(?P<state>UP|DOWN|UNKNOWN|LOWERLAYERDOWN|DORMANT|NOTPRESENT|"
                    r"TESTING)\s*(?P<rest>.*)$")


def _peer(text: str | None) -> int | None:
    if text and text.startswith("if") and text[2:].isdigit():
        return int(text[2:])
    return None


def parse_ip_addr(text: str) -> list[IpAddrLink]:
    """`ip addr [show]` or `ip -brief addr`. Lines it does not know inside an interface block
    (valid_lft, altname, vf ...) are skipped; a first line that is neither shape is an error."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    if _HEADER.match(lines[0]):
        return _parse_full(lines)
    if _BRIEF.match(lines[0]):
        return _parse_brief(lines)
    raise ParseError("ip", "not `ip addr` output", 1, lines[0])


def _parse_full(lines: list[str]) -> list[IpAddrLink]:
    out: list[dict] = []
    for n, line in enumerate(lines, 1):
        head = _HEADER.match(line)
        if head:
            rest = head.group("rest")
            fields = dict(re.findall(r"\b(mtu|state|master|qlen|qdisc|group)\s+(\S+)", rest))
            out.append({"name": head.group("name"), "ifindex": int(head.group("idx")),
                        "flags": tuple(f for f in head.group("flags").split(",") if f),
                        "mtu": int(fields["mtu"]) if fields.get("mtu", "").isdigit() else None,
                        "state": fields.get("state", ""), "master": fields.get("master"),
                        "peer_index": _peer(head.group("peer")), "addresses": [], "link_type": ""})
            continue
        if not out:
            raise ParseError("ip", "address line before any interface", n, line)
        link = _LINK.match(line)
        if link:
            out[-1]["link_type"] = link.group("type")
            continue
        addr = _ADDR.match(line)
        if addr:
            scope = re.search(r"\bscope\s+(\S+)", addr.group("rest"))
            out[-1]["addresses"].append((addr.group("fam"), addr.group("cidr"), scope.group(1) if scope else ""))
            continue
        if not line.startswith((" ", "\t")):
            raise ParseError("ip", "unexpected line between interfaces", n, line)
    return [IpAddrLink(**{**d, "addresses": tuple(d["addresses"])}) for d in out]


def _parse_brief(lines: list[str]) -> list[IpAddrLink]:
    out = []
    for n, line in enumerate(lines, 1):
        m = _BRIEF.match(line)
        if not m:
            raise ParseError("ip", "not an `ip -brief addr` line", n, line)
        addrs = []
        for token in m.group("rest").split():
            if "/" not in token:
                continue  # "metric 100" and similar attributes between addresses
            fam = "inet6" if ":" in token else "inet"
            ip = token.split("/", 1)[0]
            scope = "link" if ip.lower().startswith("fe80") else ("host" if ip in ("::1",) or ip.startswith("127.")
                                                                  else "global")
            addrs.append((fam, token, scope))
        out.append(IpAddrLink(name=m.group("name"), state=m.group("state"), peer_index=_peer(m.group("peer")),
                              addresses=tuple(addrs)))
    return out
