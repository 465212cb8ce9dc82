"""Network interface records and what kind of thing each interface is. Pure: no I/O.

The kind comes from what the kernel says (`ip -d -j link`'s `linkinfo.info_kind`, the sysfs
`type`, whether `/sys/class/net/<if>/device` exists), never from the name: a veth named
`enp1s0f0` is a veth. Names only refine a virtual kind into "container networking" (cni0,
flannel.1, cali*, ...), which is the same thing to NCCL but a clearer word for the user.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

# Kinds a cross-node NCCL job can use as they are.
PHYSICAL_KINDS = ("ethernet", "infiniband", "bond", "vlan", "wireless")
# Kinds that exist only inside this host: traffic on them never leaves it on its own.
VIRTUAL_KINDS = ("bridge", "veth", "container", "tun", "tap", "vpn", "macvlan", "overlay", "dummy", "virtual")

# Container networking by name, only ever applied to interfaces the kernel already calls virtual.
# docker0, br-*, virbr* stay "bridge": that is the word users know them by.
_CONTAINER_PREFIXES = ("cni", "flannel", "cali", "weave", "kube", "cilium", "vxlan.calico", "tunl", "antrea",
                       "ovn", "genev", "nodelocaldns", "lxc")
_KIND_OF_LINK = {
    "bond": "bond", "team": "bond", "vlan": "vlan", "bridge": "bridge", "veth": "veth", "netkit": "veth",
    "macvlan": "macvlan", "macvtap": "macvlan", "ipvlan": "macvlan", "ipvtap": "macvlan",
    "vxlan": "overlay", "geneve": "overlay", "gre": "overlay", "gretap": "overlay", "ipip": "overlay", "sit": "overlay",
    "ip6tnl": "overlay", "wireguard": "vpn", "ifb": "dummy", "dummy": "dummy", "nlmon": "dummy", "vrf": "virtual",
    "ipoib": "infiniband",
}
ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772
ARPHRD_NONE = 65534  # tun devices and wireguard


@dataclass(frozen=True)
class Address:
    family: str  # "inet" or "inet6"
    address: str  # IPv6 link-local addresses carry their "%ifname" scope, as NCCL prints them
    prefixlen: int | None = None

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        try:
            return ipaddress.ip_address(self.address.split("%", 1)[0])
        except ValueError:
            return None

    @property
    def scope(self) -> str:
        """host (loopback), link (fe80::/10, 169.254/16) or global."""
        ip = self.ip
        if ip is None:
            return "global"
        if ip.is_loopback:
            return "host"
        if ip.is_link_local:
            return "link"
        return "global"

    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        ip = self.ip
        if ip is None or self.prefixlen is None:
            return None
        return ipaddress.ip_network(f"{ip}/{self.prefixlen}", strict=False)

    def __str__(self) -> str:
        return self.address if self.prefixlen is None else f"{self.address}/{self.prefixlen}"


# Root qdiscs that limit, delay or drop on purpose (the defaults, noqueue, fq_codel, pfifo_fast,
# mq and fq, are not listed): what each does to a job's traffic.
SHAPING_QDISCS = {
    "tbf": "a rate limit (token bucket filter)",
    "netem": "emulated delay, loss or reordering",
    "htb": "a rate limit (hierarchical token bucket)",
    "hfsc": "a rate limit (hierarchical fair service curve)",
    "cbq": "a rate limit (class based queueing)",
    "cake": "a rate limit (CAKE shaper)",
}


@dataclass(frozen=True)
class Interface:
    name: str
    ifindex: int | None = None
    kind: str = "virtual"  # see PHYSICAL_KINDS, VIRTUAL_KINDS, "loopback"
    link_kind: str = ""  # the kernel's info_kind (veth, bridge, tun, ...) or "" for a plain device
    admin_up: bool = False  # IFF_UP: `ip link set X up`
    running: bool = False  # IFF_RUNNING: up with carrier. NCCL skips addresses of interfaces without it
    carrier: bool | None = None
    operstate: str = ""
    addresses: tuple[Address, ...] = ()
    speed: int | None = None  # Mb/s; None when unknown (down links, virtual devices)
    mtu: int | None = None
    master: str | None = None  # the bridge or bond this interface is enslaved to
    members: tuple[str, ...] = ()  # for bridges and bonds: their enslaved interfaces
    driver: str = ""
    notes: tuple[str, ...] = field(default=())  # what could not be read about it
    qdisc: str = ""  # root queueing discipline, from `ip -d -j link`

    @property
    def state(self) -> str:
        """up, down (administratively) or no-carrier."""
        if not self.admin_up:
            return "down"
        if not self.running:
            return "no-carrier"
        return "up"

    @property
    def virtual(self) -> bool:
        return self.kind in VIRTUAL_KINDS

    @property
    def ipv4(self) -> tuple[Address, ...]:
        return tuple(a for a in self.addresses if a.family == "inet")

    @property
    def ipv6_global(self) -> tuple[Address, ...]:
        return tuple(a for a in self.addresses if a.family == "inet6" and a.scope == "global")

    @property
    def link_local_only(self) -> bool:
        """Addresses, but none another subnet could route to (only fe80::/169.254)."""
        return bool(self.addresses) and all(a.scope == "link" for a in self.addresses)

    @property
    def routable(self) -> bool:
        return any(a.scope == "global" for a in self.addresses)

    @property
    def addressing(self) -> str:
        """ipv4, ipv6-global (no IPv4), link-local-only, or none."""
        if self.ipv4:
            return "ipv4"
        if self.ipv6_global:
            return "ipv6-global"
        return "link-local-only" if self.link_local_only else "none"

    def describe(self) -> str:
        """'veth, member of docker0' - the words a finding uses."""
        words = {"ethernet": "physical Ethernet", "infiniband": "IPoIB", "container": "container networking",
                 "dummy": "dummy (no wire)", "overlay": "overlay tunnel"}.get(self.kind, self.kind)
        if self.link_kind and self.link_kind != self.kind and self.kind in ("container", "dummy", "overlay", "vpn"):
            words += f" ({self.link_kind})"
        if self.master:
            words += f", member of {self.master}"
        return words


def classify(name: str, *, info_kind: str = "", arphrd: int | None = None, has_device: bool = False,
             wireless: bool = False, tun_type: str = "") -> str:
    """The kind of an interface from kernel facts. `arphrd` is /sys/class/net/X/type,
    `has_device` whether /sys/class/net/X/device exists (a bus device: PCI, USB, vmbus...)."""
    if arphrd == ARPHRD_LOOPBACK or name == "lo" and not info_kind:
        return "loopback"
    kind = info_kind.lower()
    if arphrd == ARPHRD_INFINIBAND or kind == "ipoib":
        return "infiniband"
    if kind == "tun":
        mapped = "tap" if tun_type == "tap" else "tun"
        return "vpn" if _looks_like_vpn(name) else mapped
    if kind:
        mapped = _KIND_OF_LINK.get(kind, "virtual")
        if mapped in ("bond", "vlan"):
            return mapped
        if mapped in VIRTUAL_KINDS and name.startswith(_CONTAINER_PREFIXES) and mapped != "vpn":
            return "container"
        return mapped
    if has_device:
        return "wireless" if wireless else "ethernet"
    if arphrd == ARPHRD_NONE:
        return "vpn" if _looks_like_vpn(name) else "tun"
    # No driver kind and no bus device: a virtual device iproute2 cannot name (or a
    # container's view, where sysfs hides the device link).
    return "container" if name.startswith(_CONTAINER_PREFIXES) else "virtual"


def _looks_like_vpn(name: str) -> bool:
    return name.startswith(("tailscale", "wg", "zt", "tun", "utun", "nordlynx", "ppp"))


def ifindex_order(interfaces) -> list:
    """Interfaces in the order the kernel lists them (ifindex), which is the order getifaddrs()
    and therefore NCCL walk them. Unknown indexes go last, keeping their given order."""
    return sorted(interfaces, key=lambda i: (i.ifindex is None, i.ifindex or 0))


def from_ip_addr(links) -> list[Interface]:
    """Interface records from parsed `ip addr` text (distdoctor.parsers.ip.parse_ip_addr): what a
    user pastes, or what another node reports. Text output does not say what kind a link is, so
    only loopback, IPoIB (link/infiniband) and veth peers (the `@ifN` suffix) are named; the
    rest are "unknown". IFF_RUNNING is read from LOWER_UP, or from the state in -brief output."""
    out = []
    for link in links:
        if link.link_type == "loopback" or "LOOPBACK" in link.flags or link.name == "lo":
            kind = "loopback"
        elif link.link_type == "infiniband":
            kind = "infiniband"
        elif link.peer_index is not None:
            kind = "veth"
        else:
            kind = "unknown"
        if link.flags:
            admin_up = "UP" in link.flags
            running = admin_up and "LOWER_UP" in link.flags and "NO-CARRIER" not in link.flags
        else:
            admin_up = running = link.state in ("UP", "UNKNOWN")
        addresses = []
        for family, cidr, scope in link.addresses:
            address, _slash, prefix = cidr.partition("/")
            if scope == "link" and family == "inet6" and "%" not in address:
                address = f"{address}%{link.name}"  # as getifaddrs, and so NCCL, print it
            addresses.append(Address(family, address, int(prefix) if prefix.isdigit() else None))
        out.append(Interface(name=link.name, ifindex=link.ifindex, kind=kind, admin_up=admin_up, running=running,
                             operstate=link.state.lower(), addresses=tuple(addresses), mtu=link.mtu,
                             master=link.master))
    return out
