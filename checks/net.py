"""Which network interface NCCL, Gloo and Open MPI will use on this node, and whether it can work.

The classic multi-node failure is NCCL advertising an address the other nodes cannot reach: a
docker/CNI bridge, the host side of a veth, loopback, or an IPv6 link-local address. These
checks predict the choice with NCCL's own rules (distdoctor.nccl_socket), judge the interface
by what the kernel says it is, and print the one setting that fixes it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Iterator

from distdoctor import fixes, loopback_name
from distdoctor.api import Context, Finding, Fix, check, fail, ok, skip, warn
from distdoctor.parsers.etc_hosts import HostsLine, loopback_lines
from distdoctor.facts.net import InterfaceTable, Peer
from distdoctor.netif import PHYSICAL_KINDS, SHAPING_QDISCS, Interface
from distdoctor.nccl_socket import (NcclChoice, parse_ifname_list, predict_nccl_interfaces, shell_word)

_q = shlex.quote  # a value from the machine, as one shell word in a fix

# ---------------------------------------------------------------------------------------------
# Judging an interface


# What a container's own interface can be: a veth (bridge networks) or a tap (rootless Podman's
# slirp4netns and pasta, which NAT like a bridge).
_NAT_KINDS = ("veth", "container", "virtual", "tap", "tun")


@dataclass(frozen=True)
class Network:
    """What the judgement of an interface needs: the interfaces, the routes to the other nodes,
    and whether this is a container. In a Docker/Podman container a veth is the container's end
    of a NATed bridge: other nodes cannot open connections to it, however the routes look from
    inside."""

    table: InterfaceTable
    peers: tuple[Peer, ...] = ()
    container: str = ""  # the container_network fact

    @classmethod
    def of(cls, ctx: Context) -> "Network":
        return cls(ctx.facts.interfaces, tuple(ctx.facts.peers), ctx.facts.container_network)

    def peer_devs(self) -> list[str]:
        return [p.route.dev for p in self.peers if p.route and p.route.dev]

    def peers_through(self, iface: Interface) -> list[Peer]:
        return [p for p in self.peers if p.route and p.route.dev == iface.name
                and p.route.kind in ("", "unicast", "local")]

    def nat(self, iface: Interface) -> str:
        """Why the other nodes cannot connect back to iface's address although it carries the
        route to them, or ''. A Docker/Podman bridge-mode container is NATed by definition. A
        veth whose route to every peer leaves through a gateway, holding a private address, is
        the inside of a NATed container bridge (docker0, podman's cni-podman0, a netns with
        MASQUERADE) unless Kubernetes' CNI routes pod addresses between nodes. A route that
        reaches the peers on the link itself (no gateway) is shared L2: they can answer."""
        if self.container in ("docker", "podman") and iface.kind in _NAT_KINDS:
            return (f"{iface.describe()}: this {self.container} container's end of a bridge network; other "
                    "nodes cannot connect to its address (NAT)")
        if self.container == "kubernetes" or iface.kind not in _NAT_KINDS:
            return ""
        through = self.peers_through(iface)
        if not through or not all(p.route.gateway for p in through):
            return ""
        private = [a for a in iface.addresses if a.ip is not None and a.ip.is_private and a.scope == "global"]
        if not private:
            return ""
        gateways = ", ".join(dict.fromkeys(p.route.gateway for p in through))
        return (f"{iface.describe()} with private address {private[0].address}, and the route to the other "
                f"nodes leaves through gateway {gateways}: the inside of a NATed container network; the other "
                "nodes cannot connect to its address")

    def judge(self, iface: Interface) -> tuple[bool, str]:
        """(usable across nodes, why) for an interface NCCL might advertise. Judged by
        reachability: what matters is whether the other nodes of the job can connect to its
        address, not what kind of link it is."""
        table = self.table
        if iface.kind == "loopback":
            return False, "loopback: other nodes cannot reach it"
        if not iface.running:
            return False, f"{iface.state}"
        if iface.link_local_only:
            return False, "only an IPv6 link-local address: not routable, and the scope id breaks connects"
        if iface.master:
            master = table.get(iface.master)
            what = "bridge" if master and master.kind in ("bridge", "container") else "bond/team"
            return False, f"{iface.describe()}: a {what} port, traffic never leaves this host through it"
        nat = self.nat(iface)
        if nat:
            return False, nat
        if iface.kind in PHYSICAL_KINDS or iface.kind == "macvlan":
            return True, iface.describe()
        if iface.kind in ("bridge", "container") and iface.members:
            physical = [m for m in iface.members if (table.get(m) and table.get(m).kind in PHYSICAL_KINDS)]
            if physical:
                return True, f"bridge over physical {', '.join(physical)}"
        through = self.peers_through(iface)
        if through:
            how = "on its own link" if not any(p.route.gateway for p in through) else "through it"
            return True, f"{iface.describe()}, and the kernel routes the other nodes {how}"
        if iface.kind in ("veth", "container", "virtual", "overlay", "vpn") and \
                iface.name in table.default_route_devs():
            return True, f"{iface.describe()} carrying the default route: this network namespace's way out"
        if iface.kind in ("bridge", "container") and not iface.members:
            return False, f"{iface.describe()} with no ports: a host-internal network"
        if iface.kind in ("bridge", "container"):
            return False, f"{iface.describe()} of container/VM ports: its addresses exist only inside this host"
        return False, f"{iface.describe()}: a virtual interface without the route to the other nodes"

    def natted(self) -> bool:
        """Every interface that carries a route to the other nodes is NATed: no variable helps."""
        devs = [self.table.get(d) for d in dict.fromkeys(self.peer_devs())]
        devs = [d for d in devs if d is not None]
        if not devs and self.container in ("docker", "podman"):
            return True
        return bool(devs) and all(self.nat(d) for d in devs)

    def suggest(self) -> Interface | None:
        """The interface NCCL and Gloo should use: up, with a routable address, judged usable;
        the one the kernel routes the other nodes through when they are known."""
        usable = [i for i in self.table.interfaces
                  if i.running and i.routable and i.kind != "loopback" and self.judge(i)[0]]
        for dev in self.peer_devs():
            hit = next((i for i in usable if i.name == dev), None)
            if hit:
                return hit
        default_devs = self.table.default_route_devs()

        def rank(i: Interface) -> tuple:
            return (i.kind != "infiniband", i.kind not in PHYSICAL_KINDS, i.name not in default_devs,
                    -(i.speed or 0), i.ifindex or 0)

        return min(usable, key=rank, default=None)

    def fix(self, node: str = "") -> str | Fix:
        if self.natted():
            return self.host_networking_fix(node)
        best = self.suggest()
        if best:
            return fixes.socket_ifname([best.name], gloo=best.name)
        on = f" on {node}" if node else ""
        return (f"# no interface{on} is known to reach the other nodes: bring up a physical or IPoIB interface "
                "with an address (ip link set IF up), or run the container with --network=host")

    def host_networking_fix(self, node: str = "") -> str:
        runtime = self.container if self.container in ("docker", "podman") else "docker"
        on = f" on {node}" if node else ""
        return (f"{runtime} run --network=host ...   # restart this container{on} with host networking; on "
                "Kubernetes: hostNetwork: true. No NCCL_SOCKET_IFNAME can make a NATed address reachable")


def _interface_table(table: InterfaceTable, choice: NcclChoice | None = None) -> dict:
    used = set(choice.interfaces) if choice else set()
    rows = []
    for i in table.interfaces:
        shown = [a for a in i.addresses if a.scope != "link"] or list(i.addresses)
        addrs = " ".join(str(a).split("%")[0] + (" (link-local)" if a.scope == "link" else "") for a in shown) or "-"
        rows.append([i.name, i.describe(), i.state, addrs, f"{i.speed} Mb/s" if i.speed else "-",
                     i.mtu or "-", "yes" if i.name in used else ""])
    return {"columns": ["interface", "kind", "state", "addresses", "speed", "mtu", "NCCL"], "rows": rows}


def _records(table: InterfaceTable) -> list[dict]:
    return [{"name": i.name, "kind": i.kind, "link_kind": i.link_kind, "virtual": i.virtual, "state": i.state,
             "addressing": i.addressing, "mtu": i.mtu, "speed": i.speed, "master": i.master,
             "addresses": [str(a) for a in i.addresses]}
            for i in table.interfaces]


def _source(ctx: Context, name: str) -> str:
    setting = ctx.facts.nccl_settings.values.get(name)
    if setting is None:
        return ""
    return "the environment" if setting.source == "environment" else setting.source


def _table_problems(table: InterfaceTable) -> Iterator[Finding]:
    for problem in table.problems:
        yield warn(f"interface facts incomplete: {problem}", subject="interfaces",
                   explanation="distdoctor judges interfaces by what the kernel says they are; without this "
                               "source some kinds are guesses.",
                   fix="apt-get install iproute2   # or dnf install iproute" if "iproute2" in problem else "")


def _resolver(ctx: Context):
    def resolve(name: str) -> str | None:
        answer = ctx.host.resolve(name, timeout=1.0)
        return answer.addresses[0] if answer.addresses else None
    return resolve


# ---------------------------------------------------------------------------------------------
# NCCL


@check("net.nccl-socket-interface", title="NCCL will advertise an interface the other nodes can reach",
       tags=("net", "nccl"), timeout=10)
def nccl_socket_interface(ctx: Context):
    """Predicts, with NCCL's own rules, the interface and address NCCL's bootstrap will advertise
    and the interfaces its socket transport will use: NCCL_SOCKET_IFNAME (prefixes, `^`, `=`),
    else `ib*`, else NCCL_COMM_ID's subnet, else anything but docker/lo/virbr, then those as last
    resorts; NCCL_SOCKET_FAMILY; values from /etc/nccl.conf and NCCL_CONF_FILE. Warns when that
    is a bridge, a veth port, loopback or IPv6 link-local only; fails when the setting matches
    nothing usable (NCCL then dies with `Bootstrap : no socket interface found`)."""
    table: InterfaceTable = ctx.facts.interfaces
    yield from _table_problems(table)
    if not table.interfaces:
        yield fail("no network interfaces could be listed", subject="interfaces",
                   explanation="Neither psutil, `ip` nor /sys/class/net answered.",
                   fix="findmnt /sys; ip -o link   # /sys must be mounted (sysfs) for the interface list")
        return
    settings = ctx.facts.nccl_settings
    network = Network.of(ctx)
    peers = network.peers
    choice = predict_nccl_interfaces(table.interfaces, settings, resolve=_resolver(ctx))
    best = network.suggest()
    fix = network.fix(ctx.facts.hostname)
    source = _source(ctx, "NCCL_SOCKET_IFNAME")
    evidence = {"rule": choice.rule, "bootstrap": str(choice.bootstrap) if choice.bootstrap else None,
                "sockets": [str(p) for p in choice.sockets], "NCCL_SOCKET_IFNAME": choice.setting,
                "NCCL_SOCKET_FAMILY": settings.get("NCCL_SOCKET_FAMILY"), "source": source or None,
                "suggested": best.name if best else None,
                "peers": [{"name": p.name, "source": p.source, "address": p.address,
                           "dev": p.route.dev if p.route else None, "error": p.error} for p in peers]}

    if choice.ignored:
        yield warn(choice.ignored, subject="NCCL_SOCKET_IFNAME", evidence=evidence,
                   explanation="NCCL then chooses by itself, as if the variable were unset.", fix=fix)
    if choice.spec is not None:
        for problem in choice.spec.problems:
            yield warn(f"NCCL_SOCKET_IFNAME={choice.setting!r} {problem}", subject="NCCL_SOCKET_IFNAME",
                       evidence=evidence, fix=fix)

    if choice.bootstrap is None:
        yield from _no_interface(choice, table, evidence, fix, source)
        return

    yield from _overmatch(choice, network, evidence)

    pick = choice.bootstrap
    iface = table.get(pick.interface)
    usable, why = network.judge(iface) if iface else (False, "not in the interface list")
    addr_scope = next((a.scope for a in iface.addresses if a.address == pick.address), "global") if iface else ""
    if usable and addr_scope == "link":
        usable, why = False, "an IPv6 link-local address: other nodes need the %scope, which is theirs, not ours"
    if iface is not None and iface.kind == "loopback" and not _spans_nodes(ctx):
        yield ok(f"NCCL will use {pick.interface} {pick.address}: fine on one node, unreachable from any other "
                 f"({choice.rule})", subject=pick.interface, evidence={**evidence, "interfaces": _records(table)},
                 explanation="For a multi-node job set NCCL_SOCKET_IFNAME to the interface the nodes share.",
                 fix=fix)
        return
    if not usable:
        yield warn(f"NCCL will advertise {pick.interface}:{pick.address} - {why}", subject=pick.interface,
                   evidence={**evidence, "table": _interface_table(table, choice)},
                   explanation=f"Chosen by {choice.rule}. Other ranks connect to the address NCCL "
                               "advertises; if they cannot reach it the job hangs at init or fails with "
                               "'Connection refused' / 'Network is unreachable' / 'No route to host'."
                               + (f" Use {best.name} ({network.judge(best)[1]})." if best else ""),
                   fix=fix)
    else:
        # one cause, said once: the interfaces that share a reason are named together
        # (six link-local-only veths once repeated the IPv6 reason six times, cut off mid-list)
        by_reason: dict[str, list[str]] = {}
        for p in choice.sockets[1:]:
            other = table.get(p.interface)
            good, reason = network.judge(other) if other else (False, "unknown")
            if not good:
                by_reason.setdefault(reason, []).append(p.interface)
        bad_others = [f"{', '.join(names)} ({reason})" for reason, names in by_reason.items()]
        if bad_others:
            yield warn(f"NCCL's socket transport will also use {'; '.join(bad_others)}", subject=pick.interface,
                       evidence={**evidence, "table": _interface_table(table, choice)},
                       explanation="NET/Socket spreads traffic over every interface it selected; connections "
                                   "over an unreachable one hang.", fix=fix)
        else:
            yield ok(f"NCCL will use {pick.interface} {pick.address} ({why}; {choice.rule})", subject=pick.interface,
                     evidence={**evidence, "interfaces": _records(table)})


def _no_interface(choice: NcclChoice, table: InterfaceTable, evidence: dict, fix: str | Fix, source: str):
    if choice.sockets:  # interfaces exist, but the bootstrap follows NCCL_COMM_ID and finds none
        yield fail(f"NCCL will fail at init: {choice.error}", subject="NCCL_COMM_ID",
                   evidence={**evidence, "table": _interface_table(table)},
                   explanation="With NCCL_COMM_ID set, NCCL's bootstrap listens on the local address in the same "
                               "subnet as that address, whatever NCCL_SOCKET_IFNAME says.",
                   fix="unset NCCL_COMM_ID   # let the framework pass the unique id; or set it to rank 0's "
                       "ADDRESS:PORT on a subnet every node shares")
    elif choice.setting is not None and choice.spec is not None:
        named = [i for i in table.interfaces if choice.spec.matches(i.name)]
        reasons = []
        for i in named:
            if not i.running:
                reasons.append(f"{i.name} is {i.state}")
            elif not i.addresses:
                reasons.append(f"{i.name} has no IP address")
            elif choice.family and not any(a.family == choice.family for a in i.addresses):
                reasons.append(f"{i.name} has no {'IPv6' if choice.family == 'inet6' else 'IPv4'} address "
                               f"(NCCL_SOCKET_FAMILY)")
            elif i.kind == "loopback":
                reasons.append(f"{i.name} has only ::1")
        detail = "; ".join(reasons) if reasons else f"no interface here is named like that ({', '.join(table.names)})"
        where = f" (set in {source})" if source and source != "the environment" else ""
        yield fail(f"NCCL_SOCKET_IFNAME={choice.setting}{where} matches no usable interface: {detail}",
                   subject="NCCL_SOCKET_IFNAME", evidence={**evidence, "table": _interface_table(table)},
                   explanation="NCCL will fail with 'Bootstrap : no socket interface found' (or, on some "
                               "versions, 'connecting to address ... with family ... is neither AF_INET nor "
                               "AF_INET6'). Interface names often differ between nodes; the setting may be "
                               "a list of names.", fix=fix)
    else:
        yield fail(f"NCCL will find no usable interface: {choice.error}", subject="interfaces",
                   evidence={**evidence, "table": _interface_table(table)},
                   explanation="Nothing is up with an IP address (NCCL needs IFF_RUNNING and an IPv4/IPv6 "
                               "address), or NCCL_COMM_ID points at a subnet this node has no address in.",
                   fix=fix)


def _overmatch(choice: NcclChoice, network: Network, evidence: dict):
    """A prefix that also takes interfaces the user probably did not mean: `eth1` taking eth10,
    or `enp` taking a dummy next to the NIC. Several good NICs under one prefix are left alone:
    that is how NET/Socket is told to use them all."""
    spec = choice.spec
    if spec is None or spec.exact or spec.exclude:
        return
    used = [p.interface for p in choice.sockets]
    for prefix, _port in spec.entries:
        hits = [n for n in used if n.startswith(prefix)]
        if len(hits) < 2:
            continue
        table = network.table
        good = [n for n in hits if table.get(n) and network.judge(table.get(n))[0]]
        if prefix not in hits and len(good) == len(hits):
            continue
        meant = [prefix] if prefix in hits else good or hits[:1]
        yield warn(f"NCCL_SOCKET_IFNAME prefix {prefix!r} matches {', '.join(hits)}: NCCL uses all of them",
                   subject="NCCL_SOCKET_IFNAME", evidence=evidence,
                   explanation="Names are prefixes unless the value starts with '=': 'eth1' also takes eth10 "
                               "and eth11, and NCCL spreads traffic over every match.",
                   fix=fixes.socket_ifname(meant))


# ---------------------------------------------------------------------------------------------
# Gloo


def _loopback_hosts_line(ctx: Context, hostname: str) -> HostsLine | None:
    """The /etc/hosts line that maps this node's name to loopback (Debian's 127.0.1.1), if any."""
    try:
        text = ctx.host.read_text("/etc/hosts", max_bytes=1 << 20) or ""
    except OSError:
        return None
    found = loopback_lines(text, hostname)
    return found[0] if found else None


def _spans_nodes(ctx: Context) -> bool:
    env = ctx.env
    for name in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_STEP_NUM_NODES", "NNODES", "PET_NNODES",
                 "OMPI_MCA_orte_num_nodes"):
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 1:
            return True
    rc = ctx.run_context
    if rc.world_size and rc.local_world_size and rc.world_size > rc.local_world_size:
        return True
    if len(ctx.facts.options.get("hosts") or []) > 1:
        return True
    master = env.get("MASTER_ADDR", "").strip()
    if master and master not in ("localhost", "127.0.0.1", "::1"):
        table = ctx.facts.interfaces
        local = {a.address.split("%")[0] for i in table.interfaces for a in i.addresses}
        return master not in local and master != ctx.facts.hostname
    return False


@check("net.gloo-socket-interface", title="Gloo will bind to an address the other nodes can reach",
       tags=("net", "gloo", "torch"), timeout=10)
def gloo_socket_interface(ctx: Context):
    """torch.distributed's Gloo backend (and the CPU side of many NCCL jobs) binds to the
    interfaces named in GLOO_SOCKET_IFNAME (exact names, comma-separated), else to the address
    this node's hostname resolves to; when that is 127.0.0.1 every rank advertises loopback and a
    multi-node job hangs at init."""
    table: InterfaceTable = ctx.facts.interfaces
    network = Network.of(ctx)
    best = network.suggest()
    value = ctx.env.get("GLOO_SOCKET_IFNAME")
    fix = fixes.gloo_ifname(best.name) if best and not network.natted() else network.fix(ctx.facts.hostname)
    if value is not None:
        names = [n for n in value.split(",")]
        if not value.strip() or any(n == "" for n in names):
            yield fail(f"GLOO_SOCKET_IFNAME={value!r} has an empty name", subject="GLOO_SOCKET_IFNAME",
                       explanation="torch splits the value on commas and asks Gloo for each name; an empty one "
                                   "fails at init_process_group.", fix=fix)
            return
        bad = False
        for name in names:
            iface = table.get(name)
            if iface is None:
                near = [n for n in table.names if n.startswith(name.strip())]
                hint = f" (names are exact: did you mean {', '.join(near)}?)" if near else ""
                yield fail(f"GLOO_SOCKET_IFNAME names {name!r}, which does not exist here{hint}", subject=name,
                           evidence={"interfaces": table.names},
                           explanation="Gloo fails at init_process_group with 'Unable to find address for: ...'.",
                           fix=fix)
                bad = True
            elif not iface.running or not iface.addresses:
                state = iface.state if not iface.running else "up but has no IP address"
                yield fail(f"GLOO_SOCKET_IFNAME names {name}, which is {state}", subject=name, fix=fix,
                           explanation="Gloo cannot bind to an interface without a usable address.")
                bad = True
            else:
                usable, why = network.judge(iface)
                if not usable:
                    yield warn(f"GLOO_SOCKET_IFNAME={name}: {why}", subject=name, fix=fix,
                               explanation="Other ranks connect to the address Gloo advertises.")
                    bad = True
        if not bad:
            yield ok(f"GLOO_SOCKET_IFNAME={value}: up with an address", subject="GLOO_SOCKET_IFNAME")
        return
    hostname = ctx.facts.hostname
    answer = ctx.host.resolve(hostname, timeout=2.0)
    addresses = list(answer.addresses)
    loopback = not addresses or all(a.startswith("127.") or a == "::1" for a in addresses)
    evidence = {"hostname": hostname, "resolves_to": addresses, "error": answer.error}
    if loopback:
        said = f"resolves to {', '.join(addresses)}" if addresses else f"does not resolve ({answer.error})"
        if _spans_nodes(ctx):
            line = _loopback_hosts_line(ctx, hostname)
            where = ""
            if line is not None:
                where = f" (/etc/hosts line {line.number}: {' '.join(line.text.split())[:120]})"
                evidence["etc_hosts_line"] = {"line": line.number, "text": line.text[:200]}
                address = next((a.address for a in (best.addresses if best else ()) if a.family == "inet"), "")
                if address:
                    # GLOO_SOCKET_IFNAME at once; the line, mapped to the node's address, for good.
                    fix = [*(fix if isinstance(fix, list) else [fix]),
                           loopback_name.hosts_fix(hostname, line, hostname, address)]
            yield warn(f"GLOO_SOCKET_IFNAME is unset and hostname {hostname!r} {said}{where}: "
                       "Gloo will advertise loopback",
                       subject="GLOO_SOCKET_IFNAME", evidence=evidence,
                       explanation="Without GLOO_SOCKET_IFNAME Gloo binds to the hostname's address (falling "
                                   "back to 127.0.0.1); ranks on other nodes then connect to their own loopback "
                                   "and init_process_group hangs. /etc/hosts often maps the hostname to "
                                   "127.0.1.1 or 127.0.0.1.", fix=fix)
        else:
            yield ok(f"hostname {hostname!r} {said}; fine for a single-node job", subject="GLOO_SOCKET_IFNAME",
                     evidence=evidence,
                     explanation="Across nodes Gloo would advertise loopback: set GLOO_SOCKET_IFNAME then.")
    else:
        yield ok(f"Gloo will bind to {addresses[0]} (hostname {hostname})", subject="GLOO_SOCKET_IFNAME",
                 evidence=evidence)


# ---------------------------------------------------------------------------------------------
# Open MPI


@check("net.infiniband", title="InfiniBand/RoCE ports are active and NCCL_IB_HCA matches them",
       tags=("net", "ib", "nccl"), timeout=5)
def infiniband(ctx: Context):
    """Reads /sys/class/infiniband: each HCA port's state (want ACTIVE), physical state (LinkUp),
    rate and link layer. Checks that NCCL_IB_HCA (same syntax as NCCL_SOCKET_IFNAME, plus `:port`)
    selects existing ports, and that NCCL_IB_DISABLE is not switching off healthy InfiniBand."""
    ib = ctx.facts.infiniband
    settings = ctx.facts.nccl_settings
    hca_value = settings.get("NCCL_IB_HCA")
    disable = (settings.get("NCCL_IB_DISABLE") or "").strip()
    for problem in ib.problems:
        yield warn(f"InfiniBand sysfs unreadable: {problem}", subject="infiniband")
    if not ib.ports:
        if hca_value:
            yield warn(f"NCCL_IB_HCA={hca_value} is set but this node has no InfiniBand/RoCE device",
                       subject="NCCL_IB_HCA", explanation="NCCL falls back to TCP sockets.",
                       fix="unset NCCL_IB_HCA   # or load the HCA driver (modprobe mlx5_ib) and check ibstat")
        else:
            yield skip("no InfiniBand/RoCE devices under /sys/class/infiniband")
        return
    rows = [[p.hca, p.port, p.state, p.phys_state, p.rate, p.link_layer, ",".join(p.netdevs)] for p in ib.ports]
    table = {"columns": ["hca", "port", "state", "physical", "rate", "link layer", "netdev"], "rows": rows}
    healthy = [p for p in ib.ports if p.healthy]
    selected = ib.ports
    if hca_value and len(hca_value) > 1:
        spec = parse_ifname_list(hca_value)
        selected = tuple(p for p in ib.ports if spec.matches(p.hca, p.port))
        if not selected:
            yield fail(f"NCCL_IB_HCA={hca_value} matches none of {', '.join(ib.hcas)}", subject="NCCL_IB_HCA",
                       evidence={"table": table},
                       explanation="NCCL then finds no IB device and falls back to sockets (or fails when "
                                   "NCCL_IB_DISABLE=0 is required by the site).",
                       fix=f"export NCCL_IB_HCA={shell_word('=' + ','.join(f'{p.hca}:{p.port}' for p in healthy))}"
                       if healthy else "unset NCCL_IB_HCA")
            return
        for problem in spec.problems:
            yield warn(f"NCCL_IB_HCA={hca_value!r} {problem}", subject="NCCL_IB_HCA")
    down = [p for p in selected if not p.healthy]
    for p in down:
        yield warn(f"{p.hca} port {p.port} is {p.state or '?'} / {p.phys_state or '?'}", subject=f"{p.hca}:{p.port}",
                   evidence={"table": table},
                   explanation="A rank bound to a port that is not ACTIVE/LinkUp hangs; NCCL may still pick it.",
                   fix=(f"export NCCL_IB_HCA={shell_word('=' + ','.join(f'{h.hca}:{h.port}' for h in healthy))}   "
                        "# and check the cable / subnet manager (ibstat, sminfo)") if healthy
                   else f"ibstat {shell_word(p.hca)}   # then check the cable, and that a subnet manager runs: sminfo")
    if disable and disable != "0" and healthy:
        yield warn(f"NCCL_IB_DISABLE={disable} while {len(healthy)} InfiniBand port(s) are ACTIVE",
                   subject="NCCL_IB_DISABLE", evidence={"table": table},
                   explanation="NCCL then moves all inter-node traffic over TCP sockets: many times slower.",
                   fix="unset NCCL_IB_DISABLE")
    if healthy and not down:
        rates = sorted({p.rate for p in healthy if p.rate})
        yield ok(f"{len(healthy)} port(s) ACTIVE/LinkUp ({'; '.join(rates) or 'rate unknown'})",
                 subject="infiniband", evidence={"ports": rows})


# ---------------------------------------------------------------------------------------------
# Link speed and MTU


@check("net.link-speed-mtu", title="NCCL's interfaces are fast enough and agree on MTU",
       tags=("net", "nccl"), timeout=5, params={"min_speed_mbps": 10000})
def link_speed_mtu(ctx: Context):
    """A 1 GbE link on a training node makes every all-reduce crawl; interfaces with different
    MTUs on the same path fragment or drop jumbo frames. Looks at the interfaces NCCL will use."""
    table: InterfaceTable = ctx.facts.interfaces
    choice = predict_nccl_interfaces(table.interfaces, ctx.facts.nccl_settings, resolve=_resolver(ctx))
    used = [table.get(n) for n in choice.interfaces if table.get(n)]
    network = [i for i in used if i.kind != "loopback"]
    if not network:
        what = (f"NCCL would use only loopback ({', '.join(i.name for i in used)}), no network interface"
                if used else "NCCL would use no network interface")
        yield skip(f"{what}: no link speed or MTU to judge (see net.nccl-socket-interface)")
        return
    minimum = int(ctx.params["min_speed_mbps"])
    slow = [i for i in network if i.speed and 0 < i.speed < minimum and i.kind in PHYSICAL_KINDS]
    for i in slow:
        yield warn(f"{i.name} runs at {i.speed} Mb/s (below {minimum} Mb/s)", subject=i.name,
                   evidence={"speed_mbps": i.speed, "min_speed_mbps": minimum},
                   explanation="NCCL's socket transport is bound by the link; gradients of a large model take "
                               "seconds per step over 1 GbE. Check the cable/switch port (ethtool shows the "
                               "negotiated speed) or use the fast interface.",
                   fix=f"ethtool {_q(i.name)}   # negotiated speed; or pick a faster NCCL_SOCKET_IFNAME")
    # Only the links that leave the node: a host-local bridge's MTU says nothing about the path,
    # and matching a VM's uplink (often 1400 or 1450, set by the cloud) to it would break the VM.
    mtus = {i.name: i.mtu for i in network if i.mtu and i.kind in PHYSICAL_KINDS}
    if len(set(mtus.values())) > 1:
        names = " ".join(map(shlex.quote, mtus))
        yield warn(f"NCCL's interfaces have different MTUs: {', '.join(f'{n}={m}' for n, m in mtus.items())}",
                   subject="mtu", evidence={"mtu": mtus},
                   explanation="Every hop of a path must carry the MTU its ends send; which side is wrong is decided "
                               "by what the path carries, not by this node alone. nccl-test measures each pair of "
                               "nodes' path when a large transfer stalls and names the interface to change.",
                   fix=f"ip -br link show {names}   # compare with the other nodes; then: srun -N2 distdoctor nccl-test")
    shaped = [i for i in network if i.qdisc in SHAPING_QDISCS]
    for i in shaped:
        yield warn(f"{i.name} has a {i.qdisc} queueing discipline: {SHAPING_QDISCS[i.qdisc]}", subject=i.name,
                   evidence={"qdisc": i.qdisc},
                   explanation="A shaper on the interface NCCL uses makes every transfer of the job crawl or stall; "
                               "nothing on a training node needs one. Removing the root qdisc gives the interface "
                               "its default queue back, and takes away only the limit.",
                   fix=fixes.remove_shaper(i.name, here=ctx.facts.hostname))
    if not slow and not shaped and len(set(mtus.values())) <= 1:
        desc = ", ".join(f"{i.name} {i.speed or '?'} Mb/s mtu {i.mtu or '?'}" for i in network)
        yield ok(desc, evidence={"interfaces": {i.name: {"speed": i.speed, "mtu": i.mtu} for i in network}},
                 explanation="Compare the MTU with the other nodes: it must match along the path.")


CHECKS = [nccl_socket_interface, gloo_socket_interface, infiniband, link_speed_mtu]
