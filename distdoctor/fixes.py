"""Named remedies, each written once: the locked-memory limit, /dev/shm, the interface NCCL and
gloo use, a firewall letting peers in, a shaper on the interface, host networking for a rank
behind NAT, the MTU, and a hostname that resolves to loopback.

Each returns a `Fix` record (distdoctor/remote.py renders it); checks, the node comparison,
nccl-test and the log doctor call these instead of spelling the commands themselves, so a
remedy corrected here is corrected in every report. nodes: where it runs (ssh/clush/srun);
empty with `here`: this node, named in the comment so the operator knows where to paste it.
Values that go into commands must be plain words (remote.plain); a remedy given one that is not
says what to do in a comment instead.
"""

from __future__ import annotations

import re
import shlex
from typing import Iterable, Sequence

from distdoctor.nccl_socket import shell_word, suggest_ifname
from distdoctor.remote import Fix, plain, shown

_SLURMD_UNIT = "/etc/systemd/system/slurmd.service.d"


def _where(here: str, text: str) -> str:
    return f"as root on {here}: {text}" if here else text


# --- locked memory (RDMA registers memory under it: nccl-tests#206) -----------------------------

MEMLOCK_LIMITS_CONF = 'echo "* - memlock unlimited" > /etc/security/limits.d/90-memlock.conf'
MEMLOCK_SLURMD = (
    f"mkdir -p {_SLURMD_UNIT}",
    f'printf "[Service]\\nLimitMEMLOCK=infinity\\n" > {_SLURMD_UNIT}/memlock.conf',
    "systemctl daemon-reload",
    "systemctl restart slurmd",
)


def memlock(nodes: Sequence[str] = (), slurm: bool = False, here: str = "") -> Fix:
    """An unlimited locked-memory limit. Under Slurm the tasks inherit slurmd's own limit, so the
    daemon's unit is what to change; elsewhere limits.conf, which new logins pick up."""
    if slurm:
        return Fix(MEMLOCK_SLURMD, nodes,
                   _where(here, "slurmd's tasks inherit its locked-memory limit; give the daemon an unlimited one "
                                "(outside Slurm: limits.conf)"))
    return Fix((MEMLOCK_LIMITS_CONF,), nodes,
               _where(here, "new logins get it (start the job's sessions again); Slurm tasks inherit slurmd's "
                            "limit instead (LimitMEMLOCK=infinity in its unit); in a container: "
                            "docker run --ulimit memlock=-1"))


# --- /dev/shm (NCCL's shared-memory transport: nccl#342, #290) -----------------------------------

SHM_SUGGESTED = "16g"  # NCCL needs far less; DataLoader workers passing batches can use several GB

SHM_CONTAINER = ("outside a container; in one, start it with --shm-size={size} or --ipc=host (Docker's default "
                 "is 64 MB), on Kubernetes mount an emptyDir with medium: Memory at /dev/shm")


def shm_size(size: object, nodes: Sequence[str] = (), here: str = "") -> Fix:
    """/dev/shm resized to size (a mount size: bytes, or 16g); no fix when size is not a plain
    value (a tie between nodes has none: the caller says what to make the same)."""
    if size is None or not plain(size):
        return Fix()
    return Fix((f"mount -o remount,size={size} /dev/shm",), nodes,
               _where(here, SHM_CONTAINER.format(size=size)))


def shm_missing(nodes: Sequence[str] = (), here: str = "") -> Fix:
    """A tmpfs at /dev/shm where there is none."""
    return Fix(("mount -t tmpfs -o size=8g tmpfs /dev/shm",), nodes,
               _where(here, "or run the container with --ipc=host"))


# --- the interface NCCL and gloo use (pytorch#68893, nccl#286) ------------------------------------

def socket_ifname(names: Iterable[str], gloo: str = "", comment: str = "") -> Fix:
    """export NCCL_SOCKET_IFNAME selecting exactly these interfaces (exact-match syntax, so eth1
    does not also take eth10; loopback never offered), and GLOO_SOCKET_IFNAME when gloo names the
    one interface gloo should use (gloo takes exact names, all of which must exist)."""
    chosen = [n for n in dict.fromkeys(names) if n and not n.startswith("lo") and plain(n)]
    if not chosen:
        return Fix((), (), comment or "set NCCL_SOCKET_IFNAME to the interface that reaches the other nodes "
                                      "(see `ip -br addr`)")
    line = f"export NCCL_SOCKET_IFNAME={shell_word(suggest_ifname(chosen))}"
    if gloo and plain(gloo) and not gloo.startswith("lo"):
        line += f" GLOO_SOCKET_IFNAME={gloo}"
    return Fix((line,), (), comment)


def gloo_ifname(name: str, comment: str = "") -> Fix:
    """export GLOO_SOCKET_IFNAME: one interface name, as gloo takes it."""
    if not plain(name) or name.startswith("lo"):
        return Fix((), (), comment or "set GLOO_SOCKET_IFNAME to the interface on the cluster network "
                                      "(see `ip -br addr`)")
    return Fix((f"export GLOO_SOCKET_IFNAME={name}",), (), comment)


# --- a firewall letting peers in (nccl#1105) ---------------------------------------------------------

def firewall_allow_from(node: str, addresses: Sequence[str]) -> Fix:
    """Accept these peers' packets on node, inserted at the top of its input chain: `nft add rule`
    would append after the drop rule that causes the failure, and change nothing."""
    addrs = [a for a in dict.fromkeys(addresses) if plain(a)]
    if not addrs:
        return Fix((), (node,), "let the other nodes' addresses in ahead of the drop rule (nft list ruleset)")
    family = "ip6" if any(":" in a for a in addrs) else "ip"
    match = addrs[0] if len(addrs) == 1 else "{ " + ", ".join(addrs) + " }"
    return Fix((f"nft insert rule inet filter input {family} saddr {match} accept",), (node,))


def firewall_open_port(nodes: Sequence[str], port: int) -> tuple[Fix, ...]:
    """Open a TCP port on nodes (firewalld), with the iptables and cloud alternatives in words."""
    return (
        Fix((f"firewall-cmd --permanent --add-port={int(port)}/tcp", "firewall-cmd --reload"), nodes,
            f"open {int(port)}/tcp (to every source; for the cluster subnet only, the iptables line below)"),
        Fix((), (), f"or: iptables -I INPUT -p tcp --dport {int(port)} -s CLUSTER_SUBNET -j ACCEPT on each of them "
                    f"(the subnet, e.g. 10.0.0.0/16); in a cloud, allow {int(port)}/tcp between the nodes in "
                    "the security group"),
    )


# --- a shaper on the interface (tc tbf/netem/...: a rate limit, emulated delay or loss) -------------

def remove_shaper(interface: str, nodes: Sequence[str] = (), here: str = "") -> Fix:
    """The interface's root qdisc deleted: the kernel gives it its default queue back."""
    if not plain(interface):
        return Fix((), tuple(nodes), _where(here, "remove the shaper on its interface: tc qdisc del dev IF root"))
    return Fix((f"tc qdisc show dev {interface}", f"tc qdisc del dev {interface} root"), tuple(nodes),
               _where(here, "unless someone set it on purpose"))


# --- a rank behind NAT (a container on a bridge network: nccl#929, pytorch#79388) -----------------

HOST_NETWORKING = ("restart its container with host networking: docker run --network=host (podman the same; "
                   "Kubernetes: hostNetwork: true), or run the rank on the host itself; no NCCL_SOCKET_IFNAME or "
                   "MASTER_ADDR makes a NATed address reachable")


def host_networking(nodes: Sequence[str] = ()) -> Fix:
    """No command can be right here: the container is restarted by whoever starts it."""
    return Fix((), tuple(nodes), HOST_NETWORKING)


# --- the MTU (every hop must agree; a smaller one black-holes full-size packets) -----------------

MTU_PERSIST = ("lasts until a reboot: the distribution's network config, and every switch port on the path, must "
               "say the same")


def mtu(interface: str, value: object, nodes: Sequence[str] = (), here: str = "") -> Fix:
    """The interface's MTU set to value (no fix unless both are plain values)."""
    if value is None or not plain(interface) or not plain(value):
        return Fix()
    return Fix((f"ip link set dev {interface} mtu {value}",), nodes, _where(here, MTU_PERSIST))


def mtus(settings: Iterable[tuple[str, object]], nodes: Sequence[str] = (), here: str = "") -> Fix:
    """Several interfaces' MTUs on the same nodes, in one record."""
    pairs = [(i, v) for i, v in settings]
    if not pairs or not all(plain(i) and plain(v) for i, v in pairs):
        return Fix()
    return Fix(tuple(f"ip link set dev {i} mtu {v}" for i, v in pairs), nodes, _where(here, MTU_PERSIST))


# --- a hostname that resolves to loopback (Debian's 127.0.1.1 line; gloo, MASTER_ADDR) ------------

def hostname_address(name: str, nodes: Sequence[str] = ()) -> tuple[Fix, ...]:
    """Look the name up, then map it to the node's cluster address in /etc/hosts (where no
    command can know which address that is: said in words)."""
    if not plain(name):
        return (Fix((), nodes, "map the node's name to its cluster address, not 127.x, in /etc/hosts"),)
    return (Fix((f"getent hosts {name}",), nodes),
            Fix((), (), f"in /etc/hosts{' on ' + shown(nodes) if nodes else ''}, map {name} to its "
                        "cluster address, not 127.x"))


# --- a Python package at a version (pip.<package> in the node comparison) -------------------------

PIP_ENV = ("with the Python the job runs there (its venv or conda env): a Debian 12 / Ubuntu 24.04 system python3 "
           "refuses pip install (PEP 668)")


def pip_install(package: str, version: object, nodes: Sequence[str] = ()) -> Fix:
    """package==version on nodes. A local build (2.13.0+cpu, +cu121) is not on PyPI: the public
    version from PyTorch's index for that build."""
    if not plain(package) or not plain(version):
        return Fix()
    public, _, build = str(version).partition("+")
    index = f" --index-url https://download.pytorch.org/whl/{build}" if build else ""
    return Fix((f"python3 -m pip install {package}=={public}{index}",), nodes, PIP_ENV)


# --- a setting left in the environment or a config file ----------------------------------------

_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def drop_setting(name: str, source: str = "environment") -> Fix:
    """name unset (source "environment") or its line deleted from the file source. The path
    comes from the machine ($NCCL_CONF_FILE, a home directory): quoted as one word, never read
    as shell."""
    if not _VARIABLE.match(name):
        return Fix(comment=f"remove the setting {name!r} from {source}")
    if source == "environment":
        return Fix((f"unset {name}",))
    return Fix((f"sed -i {shlex.quote(f'/^{name}=/d')} {shlex.quote(source)}",))


# Remedies a data file names (signatures.toml: `remedy = "memlock"`), each for the nodes given.
NAMED = {
    "memlock": lambda nodes: (memlock(nodes),),
    "shm": lambda nodes: (shm_size(SHM_SUGGESTED, nodes),),
    # the node's own name, as the log names the node
    "hostname": lambda nodes: hostname_address(nodes[0] if nodes else "", nodes),
}


def named(name: str, nodes: Sequence[str] = ()) -> tuple[Fix, ...]:
    """The remedy called name (a key of NAMED) for nodes."""
    return NAMED[name](nodes)
