"""Facts for the 'net' area: the interfaces and what kind each is, InfiniBand ports, and the
routes the kernel would take to the other nodes."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field

from distdoctor import bounded, hostlist, launch
from distdoctor.facts import fact
from distdoctor.netif import Address, Interface, classify, ifindex_order
from distdoctor.parsers import ParseError
from distdoctor.parsers.ip import IpLink, RouteGet, parse_link_json, parse_route_get_json

SYS_NET = "/sys/class/net"
SYS_IB = "/sys/class/infiniband"
IP_TIMEOUT = 3.0


@dataclass(frozen=True)
class InterfaceTable:
    interfaces: tuple[Interface, ...]  # in ifindex order, as NCCL walks them
    default_routes: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # family -> [(gateway, dev)]
    problems: tuple[str, ...] = ()  # sources that could not be read; the table is built from the rest

    def get(self, name: str) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    @property
    def names(self) -> list[str]:
        return [i.name for i in self.interfaces]

    def default_route_devs(self) -> list[str]:
        return [dev for fam in ("inet", "inet6") for _gw, dev in self.default_routes.get(fam, [])]


def _read(host, path: str) -> str | None:
    """A sysfs attribute, or None when absent or unreadable (carrier and speed raise EINVAL on
    a down link: that is 'unknown', not an error)."""
    try:
        text = host.read_text(path, max_bytes=4096)
    except OSError:
        return None
    return None if text is None else text.strip()


def _list(host, path: str) -> list[str] | None:
    """A sysfs directory's entries; None when absent or unreadable."""
    try:
        return host.list_dir(path)
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _prefixlen(netmask: str | None, family: str) -> int | None:
    if not netmask:
        return None
    try:
        return ipaddress.ip_network(f"{'::' if family == 'inet6' else '0.0.0.0'}/{netmask}").prefixlen
    except ValueError:
        return None


def _links(host) -> tuple[dict[str, IpLink], str]:
    result = host.run(["ip", "-d", "-j", "link", "show"], timeout=IP_TIMEOUT)
    if not result.ok:
        if result.missing:
            return {}, ("`ip` (iproute2) is not installed, so interface kinds come from sysfs alone: "
                        "apt-get install iproute2 / dnf install iproute")
        return {}, f"{result.describe()}; interface kinds come from sysfs alone"
    try:
        return {link.name: link for link in parse_link_json(result.stdout)}, ""
    except ParseError as exc:
        return {}, f"`ip -d -j link` printed something unreadable ({exc}); interface kinds come from sysfs alone"


def _sysfs_kind(host, base: str, has_device: bool) -> str:
    """The link kind from sysfs alone, for when `ip -d -j link` is unusable (iproute2 missing,
    or older than 4.13 without -j): bridges, bonds and tun/tap have their own attribute
    directories; a virtual link whose iflink differs from its ifindex has a peer (veth)."""
    if host.exists(f"{base}/bridge"):
        return "bridge"
    if host.exists(f"{base}/bonding"):
        return "bond"
    if host.exists(f"{base}/tun_flags"):
        return "tun"
    if not has_device:
        ifindex, iflink = _read(host, f"{base}/ifindex"), _read(host, f"{base}/iflink")
        if ifindex and iflink and ifindex != iflink:
            return "veth"
    return ""


def _interface(host, name: str, link: IpLink | None, addrs: list[dict], stats: dict | None) -> Interface:
    base = f"{SYS_NET}/{name}"
    notes: list[str] = []
    arphrd = _int(_read(host, f"{base}/type"))
    sys_present = arphrd is not None or host.exists(base)
    if link is None and not sys_present:
        notes.append("vanished while being read: listed by psutil, gone from `ip` and sysfs")
    device = host.readlink(f"{base}/device")
    wireless = host.exists(f"{base}/wireless") or host.exists(f"{base}/phy80211")
    info_kind = link.info_kind if link else _sysfs_kind(host, base, device is not None)
    kind = classify(name, info_kind=info_kind, arphrd=arphrd, has_device=device is not None,
                    wireless=wireless, tun_type=link.tun_type if link else "")
    # "master" links a bridge or bond port to its master; brport/bridge says the same for bridges
    master_link = host.readlink(f"{base}/master") or host.readlink(f"{base}/brport/bridge")
    master = link.master if link and link.master else (master_link.rsplit("/", 1)[-1] if master_link else None)
    members: tuple[str, ...] = ()
    if kind in ("bridge", "container"):
        members = tuple(_list(host, f"{base}/brif") or ())
    if kind == "bond":
        members = tuple((_read(host, f"{base}/bonding/slaves") or "").split())
    flags = (stats or {}).get("flags") or ""
    flag_set = {f.strip().lower() for f in flags.split(",")} if flags else set()
    ip_flags = {f.upper() for f in link.flags} if link else set()
    operstate = (_read(host, f"{base}/operstate") or (link.operstate if link else "")).lower()
    admin_up = "up" in flag_set if flag_set else ("UP" in ip_flags or bool(stats and stats.get("isup")))
    if flag_set:
        running = "running" in flag_set
    elif ip_flags:
        running = "UP" in ip_flags and "LOWER_UP" in ip_flags
    else:
        running = bool(stats and stats.get("isup"))
    carrier_text = _read(host, f"{base}/carrier")
    carrier = None if carrier_text is None else carrier_text == "1"
    speed = _int(_read(host, f"{base}/speed"))
    if speed is None or speed <= 0:
        speed = (stats or {}).get("speed") or None
    if speed is not None and speed < 0:
        speed = None
    mtu = _int(_read(host, f"{base}/mtu")) or (link.mtu if link else None) or (stats or {}).get("mtu")
    driver_link = host.readlink(f"{base}/device/driver") if device else None
    driver = driver_link.rsplit("/", 1)[-1] if driver_link else (link.info_kind if link else "")
    addresses = tuple(Address(a["family"], a["address"], _prefixlen(a.get("netmask"), a["family"]))
                      for a in addrs if a.get("family") in ("inet", "inet6"))
    return Interface(name=name, ifindex=link.ifindex if link else _int(_read(host, f"{base}/ifindex")), kind=kind,
                     link_kind=link.info_kind if link else "", admin_up=admin_up, running=running, carrier=carrier,
                     operstate=operstate, addresses=addresses, speed=speed, mtu=mtu, master=master,
                     members=members, driver=driver, notes=tuple(notes), qdisc=link.qdisc if link else "")


@fact
def interfaces(facts) -> InterfaceTable:
    """Every interface with its kind (from the kernel), state, addresses, speed, MTU and master."""
    host = facts.host
    problems: list[str] = []
    links, problem = _links(host)
    if problem:
        problems.append(problem)
    try:
        addrs = host.net_if_addrs()
        stats = host.net_if_stats()
    except Exception as exc:  # psutil missing or broken: sysfs and ip still describe the links
        problems.append(f"psutil could not list addresses: {exc}")
        addrs, stats = {}, {}
    names = list(dict.fromkeys([*links, *addrs, *stats]))
    if not names:
        names = _list(host, SYS_NET) or []
    table = [_interface(host, n, links.get(n), addrs.get(n, []), stats.get(n)) for n in names]
    try:
        gateways = host.gateways()
    except Exception as exc:
        problems.append(f"netifaces could not read the routing table: {exc}")
        gateways = {}
    return InterfaceTable(tuple(ifindex_order(table)), dict(gateways), tuple(problems))


@dataclass(frozen=True)
class Peer:
    """Another node this one must reach, and the interface the kernel routes it through."""

    name: str
    source: str  # MASTER_ADDR, NCCL_COMM_ID, --hosts
    address: str = ""
    route: RouteGet | None = None
    error: str = ""


def route_to(host, address: str) -> tuple[RouteGet | None, str]:
    result = host.run(["ip", "-j", "route", "get", address], timeout=IP_TIMEOUT)
    if not result.ok:
        text = (result.stderr or result.stdout).strip()
        if not result.missing and text:
            return None, text.splitlines()[-1]
        return None, result.describe()
    try:
        return parse_route_get_json(result.stdout), ""
    except ParseError as exc:
        return None, str(exc)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


MAX_PEERS = 8
_HNP_TCP = re.compile(r"tcp://([0-9.]+):\d+")  # Open MPI's HNP URI: "jobid.0;tcp://10.0.0.1:58385;tcp6://..."


def job_peer_names(facts) -> list[tuple[str, str]]:
    """The other nodes of the job this process runs in, as (name, source): the job's node list
    (launch.nodelist_vars: the Slurm step's, else the allocation's; the allocation's under
    mpirun), and the node Open MPI's mpirun runs on. MASTER_ADDR (torchrun and most launchers)
    is read by `peers` itself."""
    out: list[tuple[str, str]] = []
    try:
        slurm = facts.slurm_env
    except Exception:  # an unreadable Slurm environment is the slurm area's to report
        slurm = None
    if slurm is not None:
        for var in launch.nodelist_vars(facts.host.env):
            names = slurm.nodelists.get(var)
            if names:
                source = f"Slurm job {slurm.job_id}" if slurm.job_id else var
                out.extend((name, source) for name in names)
                break
    env = facts.host.env
    hnp = _HNP_TCP.search(env.get("OMPI_MCA_orte_hnp_uri", ""))
    if hnp:
        out.append((hnp.group(1), "mpirun (OMPI_MCA_orte_hnp_uri)"))
    return out


def own_names(facts) -> set[str]:
    """The names this node goes by: its hostname (full and short) and Slurm's name for it."""
    name = facts.hostname
    names = {name, name.split(".")[0]}
    slurmd = facts.host.env.get("SLURMD_NODENAME", "").strip()
    if slurmd:
        names.add(slurmd)
    return names


def _local_addresses(facts) -> set[str]:
    try:
        table = facts.interfaces
    except Exception:
        return set()
    return {a.address.split("%")[0] for i in table.interfaces for a in i.addresses}


@fact
def peers(facts) -> list[Peer]:
    """The other nodes this one must reach, with the kernel's route to each: MASTER_ADDR,
    NCCL_COMM_ID's host, --hosts, and the job's own nodes (Slurm's node list, mpirun's node),
    at most MAX_PEERS of them."""
    host = facts.host
    env = host.env
    wanted: list[tuple[str, str]] = []
    if env.get("MASTER_ADDR", "").strip():
        wanted.append((env["MASTER_ADDR"].strip(), "MASTER_ADDR"))
    comm_id = env.get("NCCL_COMM_ID", "").strip()
    if comm_id:
        name = comm_id[1:].split("]", 1)[0] if comm_id.startswith("[") else comm_id.rsplit(":", 1)[0]
        wanted.append((name, "NCCL_COMM_ID"))
    options = facts.options
    for expr in options.get("hosts") or []:
        try:
            names = hostlist.expand(expr)
        except hostlist.HostlistError:
            names = [expr]  # reported by the reach checks; a route lookup of it fails cleanly here
        wanted.extend((name, "--hosts") for name in names[:MAX_PEERS])
    job = job_peer_names(facts)
    own = own_names(facts)
    candidates: list[tuple[str, str, bool]] = []
    for name, source in wanted + job:
        # one spare: a job node can turn out to be this node under another name (by address)
        if name in own or any(c[0] == name for c in candidates) or len(candidates) > MAX_PEERS:
            continue
        candidates.append((name, source, (name, source) in job))
    local = _local_addresses(facts)
    # At once: a job's node list can name 8 nodes, and a slow resolver costs its timeout once.
    looked_up = bounded.map(lambda c: _peer(facts, *c, local), candidates, 1.0 + IP_TIMEOUT + 1.0, name="peer")
    out: list[Peer] = []
    for (name, source, _from_job), peer in zip(candidates, looked_up):
        if isinstance(peer, bounded.TimedOut):
            out.append(Peer(name, source, error="the route lookup did not finish in time"))
        elif peer is not None:
            out.append(peer)
    return out[:MAX_PEERS]


def _peer(facts, name: str, source: str, from_job: bool, local: set[str]) -> Peer | None:
    """The peer with its address and route; None when it is this node (a job's node list names it)."""
    host = facts.host
    address = name.strip("[]").split("%", 1)[0]  # MASTER_ADDR=[fd00::1] is common for IPv6
    if not _is_ip(address):
        resolved = host.resolve(name, timeout=1.0)
        if not resolved.addresses:
            return Peer(name, source, error=f"does not resolve: {resolved.error}")
        address = resolved.addresses[0]
    if from_job and address in local:
        return None  # this node under another name (mpirun started here)
    route, error = route_to(host, address)
    if route is not None and route.kind == "local":
        if from_job:
            return None
        # This node is the peer (the master itself): the kernel answers "dev lo"; the
        # interface that matters is the one holding the address.
        owner = next((i.name for i in facts.interfaces.interfaces
                      if any(a.address.split("%")[0] == address for a in i.addresses)), route.dev)
        route = dataclasses.replace(route, dev=owner)
    return Peer(name, source, address, route, error)


@dataclass(frozen=True)
class IbPort:
    hca: str
    port: int
    state: str = ""  # ACTIVE, DOWN, INIT, ARMED
    phys_state: str = ""  # LinkUp, Polling, Disabled ...
    rate: str = ""  # "200 Gb/sec (4X HDR)"
    link_layer: str = ""  # InfiniBand or Ethernet (RoCE)
    netdevs: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return self.state.upper() == "ACTIVE" and self.phys_state.lower() == "linkup"


@dataclass(frozen=True)
class InfinibandTable:
    hcas: tuple[str, ...]
    ports: tuple[IbPort, ...]
    problems: tuple[str, ...] = ()


def _after_colon(text: str | None) -> str:
    # sysfs writes "4: ACTIVE" and "5: LinkUp"
    return (text or "").split(":", 1)[-1].strip()


@fact
def infiniband(facts) -> InfinibandTable:
    """HCAs under /sys/class/infiniband with each port's state, physical state, rate, link layer."""
    host = facts.host
    ports: list[IbPort] = []
    problems: list[str] = []
    try:
        hcas = host.list_dir(SYS_IB) or []
    except OSError as exc:
        return InfinibandTable((), (), (f"{SYS_IB}: {exc.strerror or exc}",))
    for hca in hcas:
        base = f"{SYS_IB}/{hca}"
        netdevs = tuple(_list(host, f"{base}/device/net") or ())
        port_names = _list(host, f"{base}/ports")
        if port_names is None:
            problems.append(f"{base}/ports is missing or unreadable")
            continue
        for p in port_names:
            if not p.isdigit():
                continue
            pb = f"{base}/ports/{p}"
            ports.append(IbPort(hca, int(p), _after_colon(_read(host, f"{pb}/state")),
                                _after_colon(_read(host, f"{pb}/phys_state")), _read(host, f"{pb}/rate") or "",
                                _read(host, f"{pb}/link_layer") or "", netdevs))
    return InfinibandTable(tuple(hcas), tuple(ports), tuple(problems))


def _root_fstype(host) -> str:
    """The filesystem type mounted at / for this process (the last / entry in mountinfo wins)."""
    try:
        text = host.read_text("/proc/self/mountinfo") or ""
    except OSError:
        return ""
    fstype = ""
    for line in text.splitlines():
        fields, _sep, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) > 4 and parts[4] == "/" and rest.split():
            fstype = rest.split()[0]
    return fstype


@fact
def container_network(facts) -> str:
    """What kind of container this process's network belongs to: "kubernetes" (a pod: its
    address is routed between nodes by the CNI), "docker" or "podman" (bridge mode unless
    --network=host: the address is NATed and other nodes cannot connect to it), or "" (the host,
    as far as can be told). /.dockerenv alone proves nothing: VMs built from container images
    keep it, so a container also needs an overlay root or a container cgroup."""
    host = facts.host
    if host.env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    marker = "docker" if host.exists("/.dockerenv") else "podman" if host.exists("/run/.containerenv") else ""
    if not marker:
        return ""
    try:
        cgroup = host.read_text("/proc/self/cgroup") or ""
    except OSError:
        cgroup = ""
    in_container_cgroup = any(word in cgroup for word in ("/docker", "containerd", "libpod", "/lxc"))
    if _root_fstype(host) in ("overlay", "aufs", "fuse.fuse-overlayfs") or in_container_cgroup:
        return marker
    return ""
