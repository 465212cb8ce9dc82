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
    qdisc: str = ""  # the root queueing discipline (noqueue, fq_codel, mq, or a shaper: tbf, netem, ...)


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
            qdisc=str(item.get("qdisc", "") or ""),
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
_BRIEF = re.compile(r"^(?P<name>[^\s@]+)(?:@(?P<peer>\S+))?\s+(?P<state>UP|DOWN|UNKNOWN|LOWERLAYERDOWN|DORMANT|NOTPRESENT|"
                    r"TESTING)\s*(?P<rest>.*)$")


def _peer(text: str | None) -> int | None:
    if text and text.startswith("if") and text[2:].isdigit():
        return int(text[2:])
    return None


_ONELINE = re.compile(r"^(?P<idx>\d+):\s+(?P<name>[^:\s]+?)(?:@(?P<peer>\S+))?\s+(?P<fam>inet6?)\s+(?P<cidr>\S+)"
                      r"(?P<rest>.*)$")
_IFCONFIG = re.compile(r"^(?P<name>[^\s:]+(?::\d+)?):?\s+(?:flags=\d+<(?P<flags>[^>]*)>(?P<rest>.*)|"
                       r"Link encap:(?P<encap>.*))$")


def parse_ip_addr(text: str) -> list[IpAddrLink]:
    """`ip addr [show]`, `ip -brief addr`, `ip -o addr` (one line per address) or `ifconfig`
    (net-tools 1.60 and 2.x). Lines it does not know inside an interface block (valid_lft,
    altname, vf ...) are skipped; a first line that is none of these shapes is an error."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    if _ONELINE.match(lines[0]):
        return _parse_oneline(lines)
    if _HEADER.match(lines[0]):
        return _parse_full(lines)
    if _IFCONFIG.match(lines[0]):
        return parse_ifconfig("\n".join(lines))
    if _BRIEF.match(lines[0]):
        return _parse_brief(lines)
    raise ParseError("ip", "not `ip addr` output", 1, lines[0])


def _parse_oneline(lines: list[str]) -> list[IpAddrLink]:
    """`ip -o addr`: `2: eth0    inet 10.0.0.5/24 brd ... scope global eth0\\ valid_lft ...`;
    `ip -o link` lines (`2: eth0: <UP,...> mtu 1500 ...`) in the same paste give the flags."""
    out: dict[str, dict] = {}
    for n, line in enumerate(lines, 1):
        m = _ONELINE.match(line)
        if m:
            d = out.setdefault(m.group("name"), {"name": m.group("name"), "ifindex": int(m.group("idx")),
                                                 "peer_index": _peer(m.group("peer")), "addresses": []})
            scope = re.search(r"\bscope\s+(\S+)", m.group("rest"))
            d["addresses"].append((m.group("fam"), m.group("cidr"), scope.group(1) if scope else ""))
            continue
        head = _HEADER.match(line.split("\\", 1)[0])
        if head:
            d = out.setdefault(head.group("name"), {"name": head.group("name"), "ifindex": int(head.group("idx")),
                                                    "peer_index": _peer(head.group("peer")), "addresses": []})
            d["flags"] = tuple(f for f in head.group("flags").split(",") if f)
            mtu = re.search(r"\bmtu\s+(\d+)", head.group("rest"))
            d["mtu"] = int(mtu.group(1)) if mtu else None
            state = re.search(r"\bstate\s+(\S+)", head.group("rest"))
            d["state"] = state.group(1) if state else ""
            link = re.search(r"link/(\S+)", line)
            d["link_type"] = link.group(1) if link else ""
            continue
        raise ParseError("ip", "not an `ip -o addr` line", n, line)
    return [IpAddrLink(**{**d, "addresses": tuple(d["addresses"])}) for d in out.values()]


def parse_ifconfig(text: str) -> list[IpAddrLink]:
    """`ifconfig` of net-tools 2.x (`eth0: flags=4163<UP,...>  mtu 1500`, `inet 10.0.0.5  netmask
    255.255.255.0`) and 1.60 (`eth0  Link encap:Ethernet`, `inet addr:10.0.0.5 ... Mask:...`,
    `UP BROADCAST RUNNING MULTICAST  MTU:1500`)."""
    import ipaddress

    out: list[dict] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        head = _IFCONFIG.match(line) if not line[0].isspace() else None
        if head:
            flags = tuple(f for f in (head.group("flags") or "").split(",") if f)
            mtu = re.search(r"\bmtu\s+(\d+)", head.group("rest") or "")
            encap = (head.group("encap") or "").split()
            link_type = {"Ethernet": "ether", "Local": "loopback", "UNSPEC": "none", "InfiniBand": "infiniband"}.get(
                encap[0] if encap else "", "ether" if "ether" in (head.group("rest") or "") else "")
            out.append({"name": head.group("name"), "flags": flags, "mtu": int(mtu.group(1)) if mtu else None,
                        "link_type": link_type, "addresses": []})
            continue
        if not out:
            raise ParseError("ifconfig", "address line before any interface", n, line)
        d = out[-1]
        if not d["link_type"]:
            if re.match(r"\s+loop\b", line):
                d["link_type"] = "loopback"
            elif re.match(r"\s+ether\s", line):
                d["link_type"] = "ether"
            elif re.match(r"\s+infiniband\s", line):
                d["link_type"] = "infiniband"
        if (m := re.search(r"\binet (?:addr:)?(?P<ip>[\d.]+).*?(?:netmask |Mask:)(?P<mask>[\d.]+)", line)):
            try:
                prefix = ipaddress.ip_network(f"0.0.0.0/{m.group('mask')}").prefixlen
            except ValueError:
                prefix = 32
            ip = m.group("ip")
            scope = "host" if ip.startswith("127.") else "link" if ip.startswith("169.254.") else "global"
            d["addresses"].append(("inet", f"{ip}/{prefix}", scope))
        elif (m := re.search(r"\binet6 (?:addr: ?)?(?P<ip>[0-9a-fA-F:]+)(?:/(?P<len>\d+))?(?:.*?prefixlen (?P<plen>\d+))?"
                             r"(?:.*?(?:scopeid 0x[0-9a-f]+<(?P<scope>\w+)>|Scope:(?P<scope2>\w+)))?", line)):
            plen = m.group("len") or m.group("plen") or "128"
            scope = (m.group("scope") or m.group("scope2") or "global").lower()
            d["addresses"].append(("inet6", f"{m.group('ip')}/{plen}", "host" if scope == "host" else scope))
        elif (m := re.search(r"^\s+(?P<flags>(?:[A-Z]+ )+)\s*MTU:(?P<mtu>\d+)", line)):
            d["flags"] = tuple(m.group("flags").split())
            d["mtu"] = int(m.group("mtu"))
    return [IpAddrLink(name=d["name"], flags=d["flags"], mtu=d["mtu"], link_type=d["link_type"],
                       state="UP" if "RUNNING" in d["flags"] else ("DOWN" if d["flags"] else ""),
                       addresses=tuple(d["addresses"])) for d in out]


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
