"""NCCL's socket interface selection, modelled on NCCL 2.30 (src/misc/socket.cc, src/os/linux.cc,
src/bootstrap.cc) and checked against the real library in tests/net/test_nccl_oracle.py. Pure.

    choice = predict_nccl_interfaces(interfaces, {"NCCL_SOCKET_IFNAME": "=eth0"})
    choice.bootstrap    # NcclPick("eth0", "10.0.0.5", "inet"): what ncclGetUniqueId advertises
    choice.sockets      # every interface the NET/Socket transport will use (up to 16)
    choice.error        # "no socket interface found" when nothing matches

The rules, in NCCL's order:
1. `NCCL_SOCKET_IFNAME` longer than one character: only the interfaces it selects, or fail.
2. Otherwise names starting with `ib`.
3. Otherwise, with `NCCL_COMM_ID`, the first address in the same subnet as that address.
4. Otherwise `^docker,lo,virbr`; then `docker`, `lo`, `virbr` as last resorts.
Only addresses of interfaces with IFF_RUNNING count, IPv4 before IPv6 (getifaddrs lists every
IPv4 address, in interface order, before any IPv6 one), never ::1; `NCCL_SOCKET_FAMILY=AF_INET`
or `AF_INET6` keeps one family. The bootstrap takes the first match; with `NCCL_COMM_ID` set it
takes the same-subnet address whatever `NCCL_SOCKET_IFNAME` says.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from distdoctor.netif import Address, Interface, ifindex_order

MAX_IFS = 16  # NCCL's MAX_IFS: the NET/Socket transport keeps at most this many interfaces
DEFAULT_EXCLUDE = "^docker,lo,virbr"
LAST_RESORTS = ("docker", "lo", "virbr")


@dataclass(frozen=True)
class IfnameSpec:
    """A parsed NCCL_SOCKET_IFNAME / NCCL_IB_HCA value: `[^][=]name[:port],...`."""

    raw: str
    exclude: bool = False
    exact: bool = False
    entries: tuple[tuple[str, int], ...] = ()  # (prefix or name, port or -1)
    problems: tuple[str, ...] = field(default=())  # what in the value is probably a mistake

    def matches(self, name: str, port: int = -1) -> bool:
        """NCCL's matchIfList XOR the '^': an empty list matches everything."""
        if not self.entries:
            hit = True
        else:
            hit = any(self._match(name, entry, port) for entry in self.entries)
        return hit != self.exclude

    def _match(self, name: str, entry: tuple[str, int], port: int) -> bool:
        prefix, entry_port = entry
        named = name == prefix if self.exact else name.startswith(prefix)
        return named and (port == -1 or entry_port == -1 or port == entry_port)

    def matching_entries(self, name: str) -> list[str]:
        return [p for p, _port in self.entries if (name == p if self.exact else name.startswith(p))]

    def __str__(self) -> str:
        return self.raw


def parse_ifname_list(value: str) -> IfnameSpec:
    """Parse the way NCCL's parseStringList does: a leading '^' excludes, then a leading '='
    means exact names; items are split on ','; ':N' after a name is a port (for NCCL_IB_HCA);
    empty items are dropped; spaces are NOT trimmed (' eth0' matches nothing)."""
    rest = value
    exclude = rest.startswith("^")
    if exclude:
        rest = rest[1:]
    exact = rest.startswith("=")
    if exact:
        rest = rest[1:]
    entries: list[tuple[str, int]] = []
    problems: list[str] = []
    for item in rest.split(","):
        if item == "":
            continue
        name, sep, port_text = item.partition(":")
        if name == "":
            continue  # NCCL drops ':1' without a name
        port = _atoi(port_text) if sep else -1
        if len(entries) < MAX_IFS:
            entries.append((name, port))
        else:
            problems.append(f"more than {MAX_IFS} entries: NCCL ignores {name!r} and the rest")
    if value != value.strip() or any(n != n.strip() for n, _ in entries):
        problems.append("contains spaces: NCCL does not trim them, so ' eth0' or 'eth0 ' matches no interface")
    if "," in rest and ("" in rest.split(",")):
        problems.append("has an empty item (a stray comma)")
    if not entries:
        problems.append("names no interface" + (": it excludes nothing, so every interface is excluded"
                                                if exclude else ": it selects every interface, loopback first"))
    if "^" in rest or "=" in rest:
        problems.append("has '^' or '=' after the start: only a leading '^' then '=' are special, so "
                        "this is taken as part of a name")
    return IfnameSpec(value, exclude, exact, tuple(entries), tuple(problems))


def _atoi(text: str) -> int:
    digits = ""
    for ch in text.lstrip():
        if ch.isdigit() or (ch in "+-" and not digits):
            digits += ch
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return 0


@dataclass(frozen=True)
class NcclPick:
    interface: str
    address: str  # as NCCL prints it: "10.0.0.5", "fe80::1%ib0"
    family: str  # "inet" or "inet6"

    def __str__(self) -> str:
        return f"{self.interface}:{self.address}"


@dataclass(frozen=True)
class NcclChoice:
    bootstrap: NcclPick | None  # what ncclGetUniqueId / the bootstrap advertises to other ranks
    sockets: tuple[NcclPick, ...]  # what the NET/Socket transport uses (all matches, up to 16)
    rule: str  # which step decided, in words
    setting: str | None = None  # NCCL_SOCKET_IFNAME when NCCL honours it
    spec: IfnameSpec | None = None
    ignored: str = ""  # why a set NCCL_SOCKET_IFNAME is ignored, if it is
    family: str | None = None  # forced by NCCL_SOCKET_FAMILY
    error: str = ""  # NCCL's own words when it finds nothing

    @property
    def interfaces(self) -> tuple[str, ...]:
        names = [p.interface for p in self.sockets]
        if self.bootstrap and self.bootstrap.interface not in names:
            names.insert(0, self.bootstrap.interface)
        return tuple(names)


def _getifaddrs(interfaces: Iterable[Interface]) -> list[tuple[Interface, Address]]:
    """The (interface, address) pairs in getifaddrs() order: all IPv4, then all IPv6, each in
    interface-index order, each interface's addresses in the kernel's order."""
    ordered = ifindex_order(list(interfaces))
    out: list[tuple[Interface, Address]] = []
    for family in ("inet", "inet6"):
        for iface in ordered:
            out.extend((iface, a) for a in iface.addresses if a.family == family)
    return out


def _find(pairs, spec: IfnameSpec, family: str | None, limit: int) -> list[NcclPick]:
    found: list[NcclPick] = []
    for iface, addr in pairs:
        if len(found) >= limit:
            break
        if not iface.running:
            continue
        if family and addr.family != family:
            continue
        if addr.family == "inet6" and addr.scope == "host":
            continue
        if not spec.matches(iface.name):
            continue
        if any(p.interface == iface.name for p in found):
            continue  # the first address of an interface wins
        found.append(NcclPick(iface.name, addr.address, addr.family))
    return found


def _comm_id_address(value: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address | None, str]:
    """NCCL_COMM_ID is '<ipv4>:<port>', '[<ipv6>]:<port>' or '<hostname>:<port>'."""
    text = value.strip()
    if text.startswith("["):
        host = text[1:].split("]", 1)[0].split("%", 1)[0]
    else:
        host = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(host), ""
    except ValueError:
        return None, host


def _same_subnet(pairs, remote) -> NcclPick | None:
    # NCCL's ncclFindInterfaceMatchSubnet: no IFF_RUNNING test, no family filter, loopback allowed.
    for iface, addr in pairs:
        net = addr.network()
        if net is None or net.version != remote.version:
            continue
        if addr.family == "inet6" and addr.scope == "link":
            continue  # the scope ids differ: NCCL_COMM_ID's address has scope 0
        if remote in net:
            return NcclPick(iface.name, addr.address, addr.family)
    return None


def predict_nccl_interfaces(interfaces: Sequence[Interface], settings: Mapping[str, Any] | Any,
                            resolve=None) -> NcclChoice:
    """What NCCL will pick on this node. `interfaces`: Interface records (facts.interfaces
    .interfaces, or built from a rank's report). `settings`: anything with .get(name) giving the
    effective NCCL_* values (a dict of env vars, or the nccl_settings fact). `resolve(host)`
    may turn a hostname in NCCL_COMM_ID into an IP address string; without it a hostname
    there counts as unresolvable."""
    raw_family = _get(settings, "NCCL_SOCKET_FAMILY")
    family = {"AF_INET": "inet", "AF_INET6": "inet6"}.get(raw_family or "")
    pairs = _getifaddrs(interfaces)
    ifname = _get(settings, "NCCL_SOCKET_IFNAME")
    comm_id = _get(settings, "NCCL_COMM_ID")

    ignored = ""
    if ifname is not None and len(ifname) > 1:
        spec = parse_ifname_list(ifname)
        sockets = _find(pairs, spec, family, MAX_IFS)
        rule = f"NCCL_SOCKET_IFNAME={ifname}"
        error = "" if sockets else "no socket interface found"
        setting: str | None = ifname
    else:
        if ifname is not None:
            ignored = (f"NCCL_SOCKET_IFNAME={ifname!r} is ignored: NCCL only honours values longer than one "
                       "character")
        setting, spec, error = None, None, ""
        sockets = _find(pairs, parse_ifname_list("ib"), family, MAX_IFS)
        rule = "NCCL's first choice: names starting with ib"
        if not sockets and comm_id and len(comm_id) > 1:
            remote = _resolve_comm_id(comm_id, resolve)
            pick = _same_subnet(pairs, remote) if remote is not None else None
            if pick:
                sockets, rule = [pick], f"same subnet as NCCL_COMM_ID={comm_id}"
        if not sockets:
            sockets = _find(pairs, parse_ifname_list(DEFAULT_EXCLUDE), family, MAX_IFS)
            rule = "NCCL's default: any interface but docker*, lo*, virbr*"
        for last in LAST_RESORTS:
            if sockets:
                break
            sockets = _find(pairs, parse_ifname_list(last), family, MAX_IFS)
            rule = f"NCCL's last resort: {last}*"
        if not sockets:
            error = "no socket interface found"
            rule = "nothing usable"

    bootstrap = sockets[0] if sockets else None
    if comm_id is not None:  # set at all, even empty: NCCL then refuses it as invalid
        # The bootstrap listens on the address in NCCL_COMM_ID's subnet, ignoring the rest.
        remote = _resolve_comm_id(comm_id, resolve)
        bootstrap = _same_subnet(pairs, remote) if remote is not None else None
        if remote is None:
            error = (f"Invalid NCCL_COMM_ID={comm_id!r}: use <ipv4>:<port>, [<ipv6>]:<port> or "
                     "<hostname>:<port> with a hostname this node resolves")
        elif bootstrap is None:
            error = (f"NET/Socket : No usable listening interface found (no address in the same subnet as "
                     f"NCCL_COMM_ID={comm_id})")
    return NcclChoice(bootstrap, tuple(sockets), rule, setting, spec, ignored, family, error)


def _resolve_comm_id(comm_id: str, resolve):
    ip, host = _comm_id_address(comm_id)
    if ip is None and host and resolve is not None:
        try:
            ip = ipaddress.ip_address(str(resolve(host)).split("%", 1)[0])
        except (ValueError, TypeError):
            ip = None
    return ip


def _get(settings, name: str) -> str | None:
    value = settings.get(name)
    if value is None:
        return None
    return getattr(value, "value", value)  # a Setting record or a plain string


def shell_word(value: str) -> str:
    """A list value as it goes after `export NAME=`: an exact-match list starts with '=', and
    unquoted (`NCCL_SOCKET_IFNAME==eth0`) it reads as a typo."""
    return f"'{value}'" if value.startswith("=") and "'" not in value else value


def suggest_ifname(names: Sequence[str]) -> str:
    """The NCCL_SOCKET_IFNAME value for these interface names (one per node, in any order):
    exact-match syntax, so that `eth1` does not also take `eth10`."""
    unique = list(dict.fromkeys(n for n in names if n))
    return "=" + ",".join(unique) if unique else ""

