"""Live faults, scored: a real two-node Slurm cluster (tests/harness/slurm.py: network namespaces,
slurmctld and two slurmd), one real fault at a time, diagnosed as a user would (`srun -N2 -n2
distdoctor check` and `srun -N2 -n2 distdoctor nccl-test`), every printed fix applied as printed,
then the same runs again. Labelled: REAL components (nftables, `ip link set mtu`, /etc/hosts bind
mounts, a masquerading container namespace, UTS hostnames, tc), nothing simulated; the machine is
shared, so times carry the load.

    sudo DISTDOCTOR_TEST_PREFIX=lv143 python bench/live_faults.py [--only NAME ...] [--dump DIR]

Scored per fault, on five criteria (issue 25):
  flagged  a WARN/FAIL finding (or a failed run) the healthy cluster does not show
  cause    a new finding whose words name the fault's class (the fault's `cause` pattern)
  node     that finding names the node that has the fault
  fix      its printed fix, applied as printed (`export` lines into the job's environment, `ssh
           NODE cmd` and `# as root on NODE:` blocks inside that node's namespaces; a comment
           is not a fix; a line for no node is never run: the login node is this machine),
           and the re-run no longer shows the findings whose fixes were applied
  time     wall seconds of the first diagnosis (check + nccl-test)

What the lab cannot do as a real cluster would, said in the table rather than hidden: the nodes
share this machine's root filesystem and init, so a line that writes /etc (other than the node's
own /etc/hosts) or asks systemd is not run (`not runnable`); `hostnamectl set-hostname X` is run
as `hostname X` in the node's UTS namespace (no systemd-hostnamed there, and the machine's would
rename the machine); "restart its container with host networking" is done by the harness,
running the rank in the node's own namespace instead of the container's. This kernel has no
netem, so tc faults use tbf.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from distdoctor.hostlist import expand  # noqa: E402
from tests.conftest import distdoctor_argv  # noqa: E402
from tests.harness import apt  # noqa: E402
from tests.harness.runprefix import RUN  # noqa: E402
from tests.harness.slurm import SlurmCluster  # noqa: E402

CHECK_TIMEOUT = 10
NCCL_TIMEOUT = 25
NODES = ("node1", "node2")


@dataclass
class Fault:
    name: str
    node: str                      # the node that has the fault
    cause: str                     # regex over a finding's summary + explanation naming the class
    inject: Callable[["Lab"], None]
    undo: Callable[["Lab"], None] = lambda lab: None
    wrap: str = ""                 # a per-task shell snippet (a node-local profile), before the command
    env: dict[str, str] = field(default_factory=dict)  # the job's environment (what the user exported)
    host_networking: bool = False  # the container's "--network=host" is the harness's to apply
    note: str = ""


class Lab:
    """The cluster plus what the faults need: nftables in a node, per-node /etc/hosts, a container
    namespace behind NAT."""

    def __init__(self, cluster: SlurmCluster, home: str):
        self.cluster = cluster
        self.home = home
        self.containers: dict[str, subprocess.Popen] = {}
        self.wrap = ""

    def on(self, node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        done = self.cluster.run_on(node, list(argv), timeout=30)
        if check and done.returncode != 0:
            raise RuntimeError(f"{node}: {' '.join(argv)}: {done.stderr.strip()}")
        return done

    def nft_drop(self, node: str, rule: str) -> None:
        self.on(node, "nft", "add", "table", "inet", "filter")
        self.on(node, "nft", "add", "chain", "inet", "filter", "input", "{ type filter hook input priority 0 ; }")
        self.on(node, "nft", "add", "rule", "inet", "filter", "input", *rule.split())

    def hosts_file(self, node: str, loopback: bool, stale: str = "") -> None:
        """node's own /etc/hosts (a bind mount in its mount namespace), with Debian's `127.0.1.1
        node` line when loopback, and `stale` mapped to an address no node has."""
        path = os.path.join(self.cluster.base, f"hosts-{node}")
        lines = ["127.0.0.1\tlocalhost"] + ([f"127.0.1.1\t{node}"] if loopback else [])
        lines += [f"{self.cluster.address(n).rsplit('.', 1)[0] + '.99' if n == stale else self.cluster.address(n)}"
                  f"\t{n}" for n in self.cluster.nodes if not (loopback and n == node)]
        with open(path, "w") as fh:
            fh.write("\n".join(lines) + "\n\n::1     localhost ip6-localhost ip6-loopback\n")
        os.chmod(path, 0o644)
        self.on(node, "mount", "--bind", path, "/etc/hosts")

    def unmount_hosts(self, node: str) -> None:
        self.on(node, "umount", "/etc/hosts", check=False)

    def container(self, node: str) -> str:
        """A container on a NATed bridge network on node: a network namespace holding eth0
        (172.31.<k>.2) whose traffic leaves through node's eth0 masqueraded, as Docker's default
        bridge does. Returns the wrapper that runs a task inside it (with its own sysfs)."""
        k = NODES.index(node) + 1
        ns = RUN.name("lfc", self.cluster.uid, k)
        hostside, inside = RUN.ifname("lfd", k), RUN.ifname("lfe", k)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        for argv in (["ip", "netns", "add", ns],
                     ["ip", "link", "add", hostside, "type", "veth", "peer", "name", inside, "netns", ns],
                     ["ip", "link", "set", hostside, "netns", f"/run/netns/{self.cluster.netns(node)}"]):
            subprocess.run(argv, check=True, capture_output=True, timeout=10)
        inner = ["ip", "netns", "exec", ns]
        for argv in ([*inner, "ip", "link", "set", "lo", "up"],
                     [*inner, "ip", "link", "set", inside, "name", "eth0"],
                     [*inner, "ip", "addr", "add", f"172.31.{k}.2/24", "dev", "eth0"],
                     [*inner, "ip", "link", "set", "eth0", "up"],
                     [*inner, "ip", "route", "add", "default", "via", f"172.31.{k}.1"]):
            subprocess.run(argv, check=True, capture_output=True, timeout=10)
        self.on(node, "ip", "link", "set", hostside, "name", "docker0")
        self.on(node, "ip", "addr", "add", f"172.31.{k}.1/24", "dev", "docker0")
        self.on(node, "ip", "link", "set", "docker0", "up")
        self.on(node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self.on(node, "nft", "add", "table", "ip", "nat")
        self.on(node, "nft", "add", "chain", "ip", "nat", "post", "{ type nat hook postrouting priority 100 ; }")
        self.on(node, "nft", "add", "rule", "ip", "nat", "post", "oifname", "eth0", "masquerade")
        holder = subprocess.Popen([*inner, "sleep", "3600"])
        self.containers[node] = holder
        return (f'if [ "$(hostname)" = {node} ]; then exec nsenter --net=/proc/{holder.pid}/ns/net unshare --mount '
                "sh -c 'mount -t sysfs sysfs /sys && exec \"$@\"' sh \"$@\"; fi")

    def remove_container(self, node: str) -> None:
        holder = self.containers.pop(node, None)
        if holder:
            holder.kill()
            holder.wait(timeout=10)
        k = NODES.index(node) + 1
        subprocess.run(["ip", "netns", "del", RUN.name("lfc", self.cluster.uid, k)], capture_output=True, timeout=10)
        self.on(node, "ip", "link", "del", "docker0", check=False)
        self.on(node, "nft", "delete", "table", "ip", "nat", check=False)
        self.on(node, "sysctl", "-qw", "net.ipv4.ip_forward=0", check=False)

    def offloads(self, node: str, on: bool) -> None:
        # A veth hands 64 KB GSO packets to its peer whatever the MTU; a NIC cuts them first.
        self.on(node, "ethtool", "-K", "eth0", "tso", "on" if on else "off", "gso", "on" if on else "off")


def _mtu(node: str, mtu: int) -> Callable[[Lab], None]:
    return lambda lab: lab.on(node, "ip", "link", "set", "dev", "eth0", "mtu", str(mtu))


def _path_mtu(nodes: tuple[str, ...]) -> Callable[[Lab], None]:
    """Jumbo frames on the hosts, 1500 on the switch ports (the root namespace's veths)."""
    def inject(lab: Lab) -> None:
        for node in nodes:
            lab.offloads(node, False)
            lab.on(node, "ip", "link", "set", "dev", "eth0", "mtu", "9000")
    return inject


def _jumbo(lab: Lab) -> None:
    """9000 end to end: the nodes and the switch (the root namespace's bridge and its ports,
    this cluster's own)."""
    for node in NODES:
        subprocess.run(["ip", "link", "set", "dev", lab.cluster._veth(node), "mtu", "9000"], check=True, timeout=10)
        lab.offloads(node, False)
        lab.on(node, "ip", "link", "set", "dev", "eth0", "mtu", "9000")


def _jumbo_undo(lab: Lab) -> None:
    for node in NODES:
        lab.on(node, "ip", "link", "set", "dev", "eth0", "mtu", "1500", check=False)
        subprocess.run(["ip", "link", "set", "dev", lab.cluster._veth(node), "mtu", "1500"], timeout=10)
        lab.offloads(node, True)


def _path_mtu_undo(lab: Lab) -> None:
    for node in NODES:
        lab.offloads(node, True)


def _rename(node: str, new: str, old: str = "eth0") -> Callable[[Lab], None]:
    def go(lab: Lab) -> None:
        lab.on(node, "ip", "link", "set", old, "down")
        lab.on(node, "ip", "link", "set", old, "name", new)
        lab.on(node, "ip", "link", "set", new, "up")
        # the connected route comes back with the link; slurmd's default route is that one
    return go


def _cni(node: str) -> Callable[[Lab], None]:
    def go(lab: Lab) -> None:
        lab.on(node, "ip", "link", "add", "cni0", "type", "bridge")
        lab.on(node, "ip", "link", "add", "vethcni0", "type", "veth", "peer", "name", "vethcni1")
        lab.on(node, "ip", "link", "set", "vethcni0", "master", "cni0")
        lab.on(node, "ip", "addr", "add", "10.244.1.1/24", "dev", "cni0")
        for dev in ("cni0", "vethcni0", "vethcni1"):
            lab.on(node, "ip", "link", "set", dev, "up")
    return go


def _cni_undo(node: str) -> Callable[[Lab], None]:
    def go(lab: Lab) -> None:
        lab.on(node, "ip", "link", "del", "vethcni0", check=False)
        lab.on(node, "ip", "link", "del", "cni0", check=False)
    return go


def _ib_v6_only(node: str, address: str = "") -> Callable[[Lab], None]:
    """An `ib0` with only an IPv6 link-local address (one end of a veth pair, up with carrier:
    the name is what NCCL's rule 2 takes first, and link-local is all it has)."""
    def go(lab: Lab) -> None:
        lab.on(node, "ip", "link", "add", "ib0", "type", "veth", "peer", "name", "vib0p")
        lab.on(node, "ip", "link", "set", "vib0p", "up")
        if address:
            lab.on(node, "ip", "-6", "addr", "add", address, "dev", "ib0", "nodad")
        lab.on(node, "ip", "link", "set", "ib0", "up")
        time.sleep(2.5)  # duplicate address detection, then the fe80:: address is usable
    return go


def _fw(node: str, rule: str) -> Callable[[Lab], None]:
    return lambda lab: lab.nft_drop(node, rule.format(**{n: lab.cluster.address(n) for n in NODES}))


def _nft_undo(node: str) -> Callable[[Lab], None]:
    return lambda lab: lab.on(node, "nft", "delete", "table", "inet", "filter", check=False)


def _tc(node: str, spec: str) -> Callable[[Lab], None]:
    return lambda lab: lab.on(node, "tc", "qdisc", "add", "dev", "eth0", "root", *spec.split())


def _hostname(node: str, name: str) -> Callable[[Lab], None]:
    return lambda lab: lab.on(node, "hostname", name)


def _nat(node: str) -> Callable[[Lab], None]:
    def go(lab: Lab) -> None:
        lab.wrap = lab.container(node)
    return go


def _nat_undo(node: str) -> Callable[[Lab], None]:
    def go(lab: Lab) -> None:
        lab.wrap = ""
        lab.remove_container(node)
    return go


def faults(addr: Callable[[str], str]) -> list[Fault]:
    only = '[ "$(hostname)" = {} ] && {} || true'
    return [
        Fault("healthy", "", "", lambda lab: None),
        Fault("mtu-1400-node2", "node2", r"\bMTU\b|\bmtu\b", _mtu("node2", 1400)),
        Fault("mtu-1400-node1", "node1", r"\bMTU\b|\bmtu\b", _mtu("node1", 1400)),
        Fault("mtu-9000-node2", "node2", r"\bMTU\b|\bmtu\b|path carries", _path_mtu(("node2",)), _path_mtu_undo,
              note="node2 jumbo behind 1500 switch ports"),
        Fault("path-mtu-hop", "node1,node2", r"path carries|\bMTU\b", _path_mtu(NODES), _path_mtu_undo,
              note="both nodes 9000, a 1500 hop between"),
        Fault("firewall-rank0-drop", "node1", r"firewall|nft|timed out|filter",
              _fw("node1", "ip saddr {node2} ct state new drop"), _nft_undo("node1")),
        Fault("firewall-rank0-reject", "node1", r"firewall|nft|refused|filter",
              _fw("node1", "ip saddr {node2} ct state new reject with tcp reset"), _nft_undo("node1")),
        Fault("firewall-node2-ephemeral", "node2", r"firewall|nft|timeout|timed out|blocked",
              _fw("node2", "tcp dport 32768-60999 ct state new drop"), _nft_undo("node2")),
        Fault("loopback-name-node1", "node1", r"loopback|127\.0\.1\.1",
              lambda lab: lab.hosts_file("node1", True), lambda lab: lab.unmount_hosts("node1")),
        Fault("loopback-name-node2", "node2", r"loopback|127\.0\.1\.1",
              lambda lab: lab.hosts_file("node2", True), lambda lab: lab.unmount_hosts("node2")),
        Fault("cloned-hostname-node2", "node2", r"hostname|host hash", _hostname("node2", "node1"),
              _hostname("node2", "node2")),
        Fault("cloned-hostname-node1", "node1", r"hostname|host hash", _hostname("node1", "node2"),
              _hostname("node1", "node1")),
        Fault("wrong-master-addr", "node1", r"MASTER_ADDR|rendezvous", lambda lab: None,
              env={"MASTER_ADDR": addr("node1").rsplit(".", 1)[0] + ".99"},
              note="MASTER_ADDR exported to an address no node has"),
        Fault("master-addr-not-rank0", "node2", r"MASTER_ADDR|rank 0", lambda lab: None, env={"MASTER_ADDR": "node2"},
              note="MASTER_ADDR names node2, rank 0 runs on node1"),
        Fault("memlock-node2", "node2", r"memlock|locked memory|ulimit -l", lambda lab: None,
              wrap=only.format("node2", "ulimit -l 64")),
        Fault("cni-bridge-node2", "node2", r"cni0|bridge", _cni("node2"), _cni_undo("node2")),
        Fault("rename-node2", "node2", r"ens5|NCCL_SOCKET_IFNAME|interface", _rename("node2", "ens5"),
              _rename("node2", "eth0", "ens5"), env={"NCCL_SOCKET_IFNAME": "=eth0"},
              note="the job exports NCCL_SOCKET_IFNAME==eth0; node2's NIC is ens5"),
        Fault("ib0-ipv6-link-local-node2", "node2", r"ib0|link-local|fe80", _ib_v6_only("node2"),
              lambda lab: lab.on("node2", "ip", "link", "del", "ib0", check=False)),
        Fault("nat-node2", "node2", r"NAT|network=host", _nat("node2"), _nat_undo("node2"), host_networking=True),
        Fault("nat-rank0", "node1", r"NAT|network=host", _nat("node1"), _nat_undo("node1"), host_networking=True),
        Fault("tbf-1mbit-node2", "node2", r"slow|GB/s|rate limit|shaping|bandwidth|qdisc",
              _tc("node2", "tbf rate 1mbit burst 32kbit latency 400ms"),
              note="tc tbf: node2's egress at 1 Mbit/s (this kernel has no netem)"),
        # Siblings added after the fixes above, scored at first sight (faults the fixes were not tuned on).
        Fault("healthy-jumbo", "", "", _jumbo, _jumbo_undo, note="9000 on both nodes and every switch port: no fault"),
        Fault("firewall-node2-all", "node2", r"firewall|nft|timed out|timeout|blocked",
              _fw("node2", "ip saddr {node1} ct state new drop"), _nft_undo("node2"),
              note="node2 drops every new connection from node1"),
        Fault("loopback-name-both", "node1,node2", r"loopback|127\.0\.1\.1",
              lambda lab: [lab.hosts_file(n, True) for n in NODES], lambda lab: [lab.unmount_hosts(n) for n in NODES]),
        Fault("stale-hosts-node2", "node2", r"node1|resolve|rendezvous|rank 0",
              lambda lab: lab.hosts_file("node2", False, stale="node1"), lambda lab: lab.unmount_hosts("node2"),
              note="node2's /etc/hosts maps node1 to an address nobody has"),
        Fault("cni-bridge-node1", "node1", r"cni0|bridge", _cni("node1"), _cni_undo("node1")),
        Fault("ib0-ipv6-only-node2", "node2", r"ib0|fd99|IPv6|route", _ib_v6_only("node2", "fd99::2/64"),
              lambda lab: lab.on("node2", "ip", "link", "del", "ib0", check=False),
              note="an ib0 with only a global IPv6 address no other node routes to"),
        Fault("ib0-ipv6-link-local-node1", "node1", r"ib0|link-local|fe80", _ib_v6_only("node1"),
              lambda lab: lab.on("node1", "ip", "link", "del", "ib0", check=False)),
    ]


# --- running and reading ---------------------------------------------------------------------


def _findings(doc: object, node: str = "") -> list[dict]:
    """Every WARN/FAIL/ERROR/TIMEOUT finding anywhere in a report: the job's checks, and each
    node's checks that ended otherwise there (under `nodes.<name>`: that node's, so `_node`)."""
    out: list[dict] = []
    if isinstance(doc, dict):
        if "summary" in doc and "fix" in doc and doc.get("status") in ("warn", "fail", "error", "timeout"):
            out.append({**doc, "_node": node})
        for key, value in doc.items():
            if key == "nodes" and isinstance(value, dict):
                for name, sub in value.items():
                    out.extend(_findings(sub, name))
            elif key not in ("evidence", "inventory", "remedy"):
                out.extend(_findings(value, node))
    elif isinstance(doc, list):
        for item in doc:
            out.extend(_findings(item, node))
    return out


def _stranded(stderr: str) -> list[dict]:
    """A node whose report could not reach rank 0 prints its own to stderr (the job's log): the
    JSON documents there are read like rank 0's."""
    out, decoder, at = [], json.JSONDecoder(), 0
    while (start := stderr.find("{", at)) >= 0:
        try:
            doc, end = decoder.raw_decode(stderr, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        out += _findings(doc)
        at = end
    return out


@dataclass
class Run:
    findings: list[dict]
    wall: float
    codes: tuple[int, int]
    raw: dict


def diagnose(lab: Lab, fault: Fault, env: dict[str, str], wrap: str) -> Run:
    dd = distdoctor_argv()
    full_env = {"HOME": lab.home, "NO_COLOR": "1", **fault.env, **env}
    snippet = "; ".join(s for s in (fault.wrap, wrap) if s)
    prefix = ["bash", "-c", snippet + '; exec "$@"', "wrap"] if snippet else []
    srun = ["-w", ",".join(NODES), "-N2", "-n2"]
    t0 = time.monotonic()
    check = lab.cluster.srun([*srun, *prefix, *dd, "check", "--format", "json", "--timeout", str(CHECK_TIMEOUT)],
                             env=full_env, timeout=CHECK_TIMEOUT + 60)
    nccl = lab.cluster.srun([*srun, *prefix, *dd, "nccl-test", "--json", "--timeout", str(NCCL_TIMEOUT)],
                            env=full_env, timeout=NCCL_TIMEOUT + 60)
    wall = time.monotonic() - t0
    found, raw = [], {}
    for tool, proc in (("check", check), ("nccl-test", nccl)):
        try:
            doc = json.loads(proc.stdout)
        except json.JSONDecodeError:
            doc = {}
            found.append({"status": "fail", "summary": f"{tool}: no report ({proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()[-300:]}", "explanation": "", "subject": "",
                          "fix": "", "_where": tool})
        raw[tool] = {"rc": proc.returncode, "doc": doc, "stderr": proc.stderr[-20000:]}
        for f in _findings(doc) + _stranded(proc.stderr):
            f["_where"] = tool
            found.append(f)
    return Run(found, wall, (check.returncode, nccl.returncode), raw)


def _key(f: dict) -> str:
    # numbers differ run to run (ports, pids, timings): a finding is the same finding without them
    return f"{f['_where']}:{f.get('_node', '')}:" + re.sub(r"\d+", "N", f.get("summary", ""))


def _names(text: str, node: str) -> bool:
    for word in re.findall(r"[A-Za-z0-9_.-]+(?:\[[0-9,\-]+\])?", text):
        try:
            if node in expand(word):
                return True
        except ValueError:
            continue
    return False


def apply_fix(lab: Lab, fix: str, env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """fix as printed: environment lines through bash into the job's environment, `ssh NODE cmd`
    and `# as root on NODE:` blocks in that node. Returns the new environment and what was done."""
    done: list[str] = []
    exports = [line for line in fix.splitlines() if re.match(r"\s*(export|unset)\s", line)]
    if exports:
        script = "\n".join(exports) + "\nenv -0"
        out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, timeout=10).stdout
        pairs = (item.split(b"=", 1) for item in out.split(b"\0") if b"=" in item)
        env = {k.decode(): v.decode() for k, v in pairs if k not in (b"PWD", b"SHLVL", b"_", b"OLDPWD")}
        done += exports
    node = ""
    for line in fix.splitlines():
        text = line.strip()
        if not text or re.match(r"(export|unset)\s", text):
            continue
        if text.startswith("#"):
            named = re.match(r"#\s*(?:as root )?on ([A-Za-z0-9._-]+)[:,]", text)
            node = named.group(1) if named and named.group(1) in NODES else (node if not named else "")
            continue
        # what a shell runs: the line itself, or for `ssh NODE words...` the words joined by
        # spaces, which ssh hands to the node's shell
        script, target = text, node
        argv = shlex.split(text, comments=True) if text.startswith("ssh ") else []
        if argv:
            target, script = argv[1], " ".join(argv[2:])
        if target not in NODES or not script:
            done.append(f"(not run: for no node) {text}")
            continue
        shared = [p for p in re.findall(r"/etc/[\w./-]+", script) if p != "/etc/hosts"]
        if shared or "systemctl" in script:
            # the nodes share this machine's root filesystem and init (only /etc/hosts is their
            # own): such a line would change the machine, not the node
            done.append(f"(not run: would change this machine's {', '.join(shared) or 'systemd'}) {text}")
            continue
        stand_in = re.fullmatch(r"hostnamectl set-hostname ([\w.-]+)", script)
        if stand_in:
            # hostnamectl asks the machine's systemd-hostnamed; `hostname` is what it does to the
            # node's own UTS namespace, without the persistence
            script = f"hostname {stand_in.group(1)}"
            done.append("(harness) hostnamectl set-hostname run as hostname: the nodes have no systemd")
        proc = lab.cluster.run_on(target, ["bash", "-c", script], timeout=30)
        done.append(f"{target}$ {script} -> {proc.returncode}{': ' + proc.stderr.strip()[:200] if proc.returncode else ''}")
    return env, done


@dataclass
class Score:
    fault: Fault
    flagged: bool = False
    cause: bool = False
    node: bool = False
    fix: str = "-"
    wall: float = 0.0
    first: str = ""
    detail: dict = field(default_factory=dict)


def score(lab: Lab, fault: Fault, healthy: set[str]) -> Score:
    s = Score(fault)
    base_env = {k: v for k, v in os.environ.items() if k.startswith(("PATH", "VIRTUAL_ENV", "PYTHON"))}
    run = diagnose(lab, fault, {}, lab.wrap)
    s.wall = run.wall
    new = list({_key(f): f for f in run.findings if _key(f) not in healthy}.values())
    s.flagged = bool(new)
    pattern = re.compile(fault.cause, re.I) if fault.cause else None
    named = [f for f in new if pattern and pattern.search(f.get("summary", "") + " " + f.get("explanation", ""))]
    s.cause = bool(named)
    nodes = fault.node.split(",") if fault.node else []
    on_node = [f for f in named if nodes and all(_names(" ".join(str(f.get(k) or "") for k in (
        "summary", "subject", "fix", "_node")), n) for n in nodes)]
    s.node = bool(on_node)
    s.first = (on_node or named or new or [{"summary": ""}])[0].get("summary", "")[:150]
    s.detail = {"codes": run.codes, "checks": {t: {c["id"]: c["status"] for c in r["doc"].get("checks", [])}
                                               for t, r in run.raw.items()},
                "stderr": {t: r["stderr"][-1500:] for t, r in run.raw.items()},
                "new": [{k: f.get(k) for k in ("_where", "_node", "status", "summary", "fix")} for f in new]}
    fixes = [f["fix"] for f in (on_node or named) if f.get("fix")]
    if not fault.node or not named:
        return s
    if not fixes:
        s.fix = "none"
        return s
    env = dict(base_env)
    applied: list[str] = []
    for fix in dict.fromkeys(fixes):
        env, done = apply_fix(lab, fix, env)
        applied += done
    wrap = lab.wrap
    if fault.host_networking and any("network=host" in f for f in fixes):
        wrap = ""  # the harness's host networking: the rank runs in the node's own namespace
        applied.append("(harness) the rank runs with host networking")
    s.detail["applied"] = applied
    if not any(not a.startswith("(not run") for a in applied):
        s.fix = "comment" if all(line.lstrip().startswith("#") for fx in fixes for line in fx.splitlines()
                                 if line.strip()) else "not runnable"
        return s
    extra = {k: v for k, v in env.items() if k not in base_env or base_env[k] != v}
    again = diagnose(lab, fault, extra, wrap)
    # the findings whose fixes were applied must be gone (fixlint.persisting's test, by summary
    # with the numbers taken out: ports and pids change run to run)
    fixed = {_key(f) for f in (on_node or named)}
    left = [f for f in again.findings if _key(f) in fixed]
    s.fix = "clears" if not left else "stays"
    s.detail["after"] = [{k: f.get(k) for k in ("_where", "_node", "status", "summary", "fix")} for f in left]
    return s


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", action="append", default=[], help="fault names (default: all)")
    parser.add_argument("--dump", help="write each fault's findings and applied fixes as JSON here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, a real Slurm)", file=sys.stderr)
        return 2
    apt.ensure("nftables", "ethtool", "iproute2")
    cluster = SlurmCluster(prefix="lf", nodes=2)
    home = os.path.join("/tmp", RUN.name("-lfhome"))
    os.makedirs(home, exist_ok=True)
    scores: list[Score] = []
    try:
        cluster.start()
        snap = cluster.snapshot()
        lab = Lab(cluster, home)
        lab.wrap = ""
        table = faults(cluster.address)
        wanted = [f for f in table if not args.only or f.name in args.only or f.name == "healthy"]
        healthy: set[str] = set()
        for fault in wanted:
            print(f"-- {fault.name} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
            try:
                fault.inject(lab)
                s = score(lab, fault, healthy)
            except Exception as exc:  # a fault the harness could not make is reported, not fatal
                s = Score(fault, first=f"harness: {exc}"[:150])
            finally:
                try:
                    fault.undo(lab)
                except Exception as exc:
                    print(f"   undo: {exc}", file=sys.stderr)
                cluster.restore(snap)
            if fault.name == "healthy":  # what a healthy cluster says, twice over, is no fault's doing
                healthy = {_key(f) for f in s.detail.get("new", [])} | {
                    _key(f) for f in diagnose(lab, fault, {}, "").findings}
            scores.append(s)
            print(f"   flagged={s.flagged} cause={s.cause} node={s.node} fix={s.fix} {s.wall:.1f}s {s.first}",
                  file=sys.stderr, flush=True)
            if args.dump:
                os.makedirs(args.dump, exist_ok=True)
                with open(os.path.join(args.dump, f"{fault.name}.json"), "w") as fh:
                    json.dump({"fault": fault.name, "node": fault.node, "note": fault.note, **s.detail}, fh, indent=1)
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)
    mark = {True: "yes", False: "no"}
    print(f"\nlive faults on a real two-node Slurm cluster (load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)")
    print(f"{'fault':28} {'node':12} {'flagged':8} {'cause':6} {'node':6} {'fix':13} {'time':>6}  first finding")
    full = 0
    for s in scores:
        ok = not s.fault.node and not s.flagged or (s.flagged and s.cause and s.node and s.fix == "clears")
        full += ok
        print(f"{s.fault.name:28} {s.fault.node or '-':12} {mark[s.flagged]:8} {mark[s.cause]:6} {mark[s.node]:6} "
              f"{s.fix:13} {s.wall:6.1f}  {s.first}")
    print(f"\nfully diagnosed (flagged, cause, node, fix clears; healthy: nothing flagged): {full} of {len(scores)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
