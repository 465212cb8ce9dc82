"""A real two-node Slurm 22.05 cluster on this one machine, for integration tests.

    with SlurmCluster() as cluster:                       # installs (idempotent), starts
        out = cluster.srun(["-N2", "-n2", "hostname"])    # -> CompletedProcess
        cluster.run_on("node1", ["ip", "-br", "addr"])    # inside node1's namespaces
    # stopped: daemons killed by PID, namespaces, bridge and the base directory removed

Layout (after /work/shared/lab/slurm2.sh, proven on this kind of machine):

    root netns: bridge <tag>sb<k> at <net>.1/24      <- munged, slurmctld
      veth <tag>sv<k><i> <-> eth0 in netns <tag><area><k>n<i> at <net>.1<i>/24
        slurmd -N node<i> in its own UTS namespace (hostname node<i>) and a private mount
        namespace: a fresh sysfs (so /sys/class/net shows only eth0 and lo), /sys/fs/cgroup
        re-bound from the host (slurmd 22.05 refuses to start without it), /etc/hosts
        bind-mounted from the base directory so every node name resolves to its eth0 address
        (torch gloo then works without GLOO_SOCKET_IFNAME).

Everything is unique per run and per cluster, so that two clusters (and two runs of the suite)
can run side by side: <tag> is DISTDOCTOR_TEST_PREFIX and the pid (tests/harness/runprefix.py),
<k> counts the clusters of this process, the /24 is a free one of the run's /16 and the ports
come from the run's block. Job steps (`srun`) run with the caller's environment, so the
installed `distdoctor` and the venv's torch work inside them.

The suite shares one three-node cluster (the `slurm_cluster` fixture in
tests/integration/conftest.py); start your own only for another shape (GPUs, CPUs) or to test
starting and stopping. `snapshot()` and `restore()` are how the shared one stays as it was.

Optional fake GPUs: `gpus_per_node=N` declares `Gres=gpu:N` with per-node stand-in device files,
so Slurm sets CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS / SLURM_STEP_GPUS as on a GPU node, and puts
a stand-in `nvidia-smi` (replaying a captured `nvidia-smi -L`, the one tool we may fake) in
`fake_bin`, visible only inside the nodes. Prepend `cluster.fake_bin` to PATH to use it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from typing import Mapping, Sequence

import pytest

from tests.harness import apt
from tests.harness.procs import pids_with_environ
from tests.harness.runprefix import RUN, free_port, xdist_worker

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client", "iproute2", "util-linux")


class SlurmError(RuntimeError):
    pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes: it holds nothing and will be reaped
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/status") as fh:
                pid = int(next(line.split()[1] for line in fh if line.startswith("PPid:")))
        except (OSError, StopIteration, ValueError):
            break
    return pids


_instances = 0


def _free_subnet(seed: int) -> str:
    """A /24 of this worker's share of the run's free block that no interface on this machine
    uses yet (two xdist workers starting clusters at once never look at the same /24)."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=10).stdout
    used = {m.group(1) for m in re.finditer(r"inet (\d+\.\d+\.\d+)\.\d+/", out)}
    share = RUN.free_subnets(*xdist_worker())
    for k in range(len(share)):
        candidate = share[(seed + k) % len(share)]
        if candidate not in used:
            return candidate
    raise SlurmError(f"no free /24 left in this worker's share of the run's block of {RUN.net16}.0.0/16")


class SlurmCluster:
    def __init__(self, prefix: str = "s", nodes: int = 2, gpus_per_node: int = 0, cpus: int | None = None,
                 net16: str | None = None):
        """prefix: a few letters naming the test area in namespace and directory names (the run's
        own prefix, from DISTDOCTOR_TEST_PREFIX, always comes first)."""
        if net16 is not None:  # tests written before the run prefix: say what replaced it
            raise SlurmError("SlurmCluster(net16=...) is gone: every subnet comes from DISTDOCTOR_TEST_PREFIX "
                             "(tests/harness/runprefix.py). Use the shared `slurm_cluster` fixture, or "
                             "SlurmCluster(prefix=..., nodes=...) for another shape")
        global _instances
        _instances += 1
        if not 1 <= nodes <= 9:
            raise SlurmError("a test cluster has 1 to 9 nodes (one digit in interface names)")
        self.prefix = prefix
        self.pid = RUN.pid
        # a per-process counter: two clusters in one session must not collide either
        self.uid = str(_instances % 10)
        self.base = f"/tmp/{RUN.name('-', prefix, '-slurm-', self.uid)}"
        self.net = ""
        self.bridge = RUN.ifname("sb", self.uid)
        self.nodes = [f"node{i}" for i in range(1, nodes + 1)]
        self.gpus_per_node = gpus_per_node
        self.cpus = cpus or os.cpu_count() or 1
        self.conf = os.path.join(self.base, "etc", "slurm.conf")
        self.fake_bin = os.path.join(self.base, "fakebin")
        self.ctld_port = 0
        self.slurmd_port = 0
        self.controller = socket.gethostname().split(".")[0]
        self.started = False
        self.start_seconds = 0.0
        self._daemon_pids: set[int] = set()
        self._entered = False  # a test entered a node (run_on, netns) since the last restore

    # --- names --------------------------------------------------------------------------

    def netns(self, node: str) -> str:
        """The node's network namespace, for a test to enter: it may change what is inside, so
        the shared cluster's guard looks there after this test (see restore)."""
        self._entered = True
        return self._netns(node)

    def _netns(self, node: str) -> str:
        return RUN.name(self.prefix, self.uid, "n", self._index(node))

    def _veth(self, node: str) -> str:
        return RUN.ifname("sv", self.uid, self._index(node))

    def _index(self, node: str) -> int:
        if node not in self.nodes:
            raise SlurmError(f"no node {node!r} in this cluster ({', '.join(self.nodes)})")
        return self.nodes.index(node) + 1

    def address(self, node: str) -> str:
        return f"{self.net}.{10 + self._index(node)}"

    @property
    def env(self) -> dict[str, str]:
        """The caller's environment plus SLURM_CONF, without any job variables (a login node)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_"))}
        env["SLURM_CONF"] = self.conf
        return env

    # --- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> "SlurmCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 40) -> None:
        if os.geteuid() != 0:
            pytest.skip("a real Slurm cluster in network namespaces needs root")
        apt.ensure(*PACKAGES)
        t0 = time.monotonic()
        try:
            self.net = _free_subnet(RUN.pid + int(self.uid))
            self._write_config()
            self._net_up()
            self._start_daemons(timeout)
        except BaseException:
            self.stop()
            raise
        self.started = True
        self.start_seconds = time.monotonic() - t0

    def _sh(self, argv: Sequence[str], timeout: float = 20, check: bool = True, **kw) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
        return proc

    def _write_config(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
        for sub in ("etc", "state", "log", "run", "fakebin", *(f"spool/{n}" for n in self.nodes),
                    *(f"tmp/{n}" for n in self.nodes), *(f"nodes/{n}/bin" for n in self.nodes),
                    *(f"nodes/{n}/dev" for n in self.nodes)):
            os.makedirs(os.path.join(self.base, sub), exist_ok=True)
        # munged insists the socket directory is o+x ("Socket is inaccessible")
        for path in (self.base, os.path.join(self.base, "run")):
            os.chmod(path, 0o755)
        key = os.path.join(self.base, "etc", "munge.key")
        if os.path.exists("/etc/munge/munge.key"):
            shutil.copyfile("/etc/munge/munge.key", key)
        else:
            with open(key, "wb") as fh:
                fh.write(os.urandom(1024))
        os.chmod(key, 0o600)
        with open(os.path.join(self.base, "etc", "hosts"), "w") as fh:
            fh.write(f"127.0.0.1 localhost\n{self.net}.1 {self.controller} controller\n")
            for node in self.nodes:
                fh.write(f"{self.address(node)} {node}\n")
        self.ctld_port = free_port()
        self.slurmd_port = free_port()
        gres_type, gres = "", ""
        if self.gpus_per_node:
            gres_type, gres = "GresTypes=gpu\n", f" Gres=gpu:{self.gpus_per_node}"
            self._write_fake_gpus()
        nodes = "".join(
            f"NodeName={n} NodeHostname={n} NodeAddr={self.address(n)} CPUs={self.cpus} RealMemory=1000"
            f"{gres} State=UNKNOWN\n" for n in self.nodes)
        # More CPUs than the machine has (to fit e.g. 4 tasks per node on a 2-core box):
        # slurmd must trust the configuration instead of invalidating the node.
        overrides = "SlurmdParameters=config_overrides\n" if self.cpus > (os.cpu_count() or 1) else ""
        b = self.base
        with open(self.conf, "w") as fh:
            fh.write(f"""# generated by tests/harness/slurm.py for pid {self.pid}
ClusterName=c{self.pid}{self.uid}
SlurmctldHost={self.controller}({self.net}.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={b}/run/munge.sock
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool/%n
# mpi/pmix puts its app dirs under TmpFS; a shared /tmp makes the second node fail (File exists)
TmpFS={b}/tmp/%n
SlurmctldPidFile={b}/run/slurmctld.pid
SlurmdPidFile={b}/run/slurmd-%n.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/builtin
# test all pending jobs every second: a batch job otherwise waits about 2.5 s before it starts
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=30
KillWait=5
Waittime=0
{overrides}{gres_type}{nodes}PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP
""")

    def _write_fake_gpus(self) -> None:
        lines = []
        for node in self.nodes:
            dev = os.path.join(self.base, "nodes", node, "dev")
            files = []
            for i in range(self.gpus_per_node):
                path = os.path.join(dev, f"nvidia{i}")
                # Slurm accepts only character or block devices in gres.conf; a /dev/null twin
                # is harmless and satisfies it.
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                files.append(path)
            lines.append(f"NodeName={node} Name=gpu File={dev}/nvidia[0-{self.gpus_per_node - 1}]\n")
            # A stand-in nvidia-smi that prints `nvidia-smi -L` for this node's GPUs; it is
            # bind-mounted over fake_bin inside the node only.
            listing = "".join(
                f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{self.pid % 2**32:08x}-{self._index(node):04x}-0000-0000-{i:012x})\\n"
                for i in range(self.gpus_per_node))
            script = os.path.join(self.base, "nodes", node, "bin", "nvidia-smi")
            with open(script, "w") as fh:
                fh.write(f'#!/bin/sh\nif [ "$1" = "-L" ]; then printf \'{listing}\'; exit 0; fi\n'
                         'echo "stand-in nvidia-smi: only -L is supported" >&2; exit 9\n')
            os.chmod(script, 0o755)
        with open(os.path.join(self.base, "etc", "gres.conf"), "w") as fh:
            fh.write("AutoDetect=off\n" + "".join(lines))

    def _net_up(self) -> None:
        self._net_down()
        self._sh(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._sh(["ip", "addr", "add", f"{self.net}.1/24", "dev", self.bridge])
        self._sh(["ip", "link", "set", self.bridge, "up"])
        for node in self.nodes:
            ns, veth = self._netns(node), self._veth(node)
            self._sh(["ip", "netns", "add", ns])
            self._sh(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            self._sh(["ip", "link", "set", veth, "master", self.bridge, "up"])
            self._sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            self._sh(["ip", "-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0"])
            self._sh(["ip", "-n", ns, "link", "set", "eth0", "up"])

    def _net_down(self) -> None:
        for node in self.nodes:
            subprocess.run(["ip", "netns", "del", self._netns(node)], capture_output=True, timeout=10)
            subprocess.run(["ip", "link", "del", self._veth(node)], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)

    def _node_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """argv wrapped to run in a fresh set of node namespaces (used to start slurmd)."""
        cg = os.path.join(self.base, "run", f"cg-{node}")
        os.makedirs(cg, exist_ok=True)
        fake = ""
        if self.gpus_per_node:
            fake = f'mount --bind "{self.base}/nodes/{node}/bin" "{self.fake_bin}"\n'
        script = f"""set -e
mount --rbind /sys/fs/cgroup "$3"
mount -t sysfs sysfs /sys
mount --rbind "$3" /sys/fs/cgroup
umount -l "$3"
mount --bind "$1" /etc/hosts
{fake}hostname "$2"
shift 3
exec "$@"
"""
        return ["nsenter", f"--net=/run/netns/{self._netns(node)}", "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", script, "sh",
                os.path.join(self.base, "etc", "hosts"), node, cg, *argv]

    def _start_daemons(self, timeout: float) -> None:
        b = self.base
        self._sh(["munged", f"--socket={b}/run/munge.sock", f"--key-file={b}/etc/munge.key",
                  f"--log-file={b}/log/munged.log", f"--pid-file={b}/run/munged.pid",
                  f"--seed-file={b}/run/munged.seed"])
        self._remember_pid("munged.pid")
        self._sh(["slurmctld", "-f", self.conf], env=self.env)
        self._remember_pid("slurmctld.pid")
        self._wait(lambda: self.scontrol(["ping"], timeout=5).returncode == 0, timeout,
                   "slurmctld does not answer", "slurmctld.log")
        for node in self.nodes:
            self._sh(self._node_argv(node, ["slurmd", "-f", self.conf, "-N", node]), env=self.env)
            self._remember_pid(f"slurmd-{node}.pid")

        def all_idle() -> bool:
            out = self._sh(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, env=self.env, timeout=5).stdout
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            return all(states.get(n) == "idle" for n in self.nodes)

        self._wait(all_idle, timeout, "nodes did not become idle", *(f"slurmd-{n}.log" for n in self.nodes))

    def _remember_pid(self, name: str) -> None:
        path = os.path.join(self.base, "run", name)
        for _ in range(50):
            try:
                with open(path) as fh:
                    self._daemon_pids.add(int(fh.read().strip()))
                return
            except (OSError, ValueError):
                time.sleep(0.02)

    def _wait(self, ready, timeout: float, what: str, *logs: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ready():
                return
            time.sleep(0.1)
        tails = []
        for log in logs:
            try:
                with open(os.path.join(self.base, "log", log)) as fh:
                    tails.append(f"--- {log}\n" + "".join(fh.readlines()[-8:]))
            except OSError:
                pass
        raise SlurmError(f"{what} within {timeout:g} s\n" + "\n".join(tails))

    # --- stopping -----------------------------------------------------------------------

    def _our_pids(self) -> set[int]:
        """Every process this cluster owns: daemons, everything inside our node namespaces,
        srun/sbatch clients and job tasks whose environment names our SLURM_CONF."""
        pids = set(self._daemon_pids)
        for name in os.listdir(os.path.join(self.base, "run")) if os.path.isdir(os.path.join(self.base, "run")) else ():
            if name.endswith(".pid"):
                try:
                    with open(os.path.join(self.base, "run", name)) as fh:
                        pids.add(int(fh.read().strip()))
                except (OSError, ValueError):
                    pass
        for node in self.nodes:
            proc = subprocess.run(["ip", "netns", "pids", self._netns(node)], capture_output=True, text=True,
                                  timeout=10)
            pids.update(int(p) for p in proc.stdout.split() if p.isdigit())
        pids |= pids_with_environ(f"SLURM_CONF={self.conf}")
        return pids - _ancestors()

    def _cancel_jobs(self) -> None:
        """Let Slurm signal its own job tasks while the daemons still run; whatever is left a
        moment later is killed by PID."""
        if not any(_alive(p) for p in self._daemon_pids):
            return
        try:
            jobs = self.squeue_ids()
            if jobs:
                subprocess.run(["scancel", *jobs], capture_output=True, timeout=10, env=self.env)
                end = time.monotonic() + 1
                while self.squeue_ids() and time.monotonic() < end:
                    time.sleep(0.1)
        except (subprocess.TimeoutExpired, OSError):
            pass

    @staticmethod
    def _is_client(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/comm") as fh:
                return fh.read().strip() in ("srun", "sbatch", "salloc", "sattach", "scontrol", "squeue")
        except OSError:
            return False

    def stop(self) -> None:
        """Stop everything, even after a failed start. PIDs are collected before any signal:
        slurmd removes its pid file on SIGTERM and can then hang on a stuck slurmstepd. Clients
        (srun ignores a single SIGTERM and then waits for daemons we are killing) get SIGKILL at
        once, daemons TERM and, after 3 s, KILL. Collection repeats in case a slurmstepd was
        forking a task meanwhile."""
        self._cancel_jobs()
        for round_ in range(3):
            pids = self._our_pids() if os.path.isdir(self.base) else {p for p in self._daemon_pids if _alive(p)}
            pids = {p for p in pids if _alive(p)}
            if not pids:
                break
            for pid in pids:
                sig = signal.SIGKILL if round_ or self._is_client(pid) else signal.SIGTERM
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            end = time.monotonic() + 3
            while time.monotonic() < end and any(_alive(p) for p in pids):
                time.sleep(0.05)
            for pid in pids:
                if _alive(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
        self._net_down()
        self._remove_cgroups()
        shutil.rmtree(self.base, ignore_errors=True)
        self._daemon_pids.clear()
        self.started = False

    def _remove_cgroups(self) -> None:
        # Only the cgroup plugins create these; we use proctrack/linuxproc, but a changed
        # config must not leave directories behind either.
        root = "/sys/fs/cgroup"
        for controller in os.listdir(root) if os.path.isdir(root) else ():
            for node in self.nodes:
                path = os.path.join(root, controller, f"slurm_{node}")
                if os.path.isdir(path) and self._owned_cgroup(path):
                    for dirpath, _dirs, _files in sorted(os.walk(path, topdown=False)):
                        try:
                            os.rmdir(dirpath)
                        except OSError:
                            pass

    def _owned_cgroup(self, path: str) -> bool:
        """A slurm_<node> cgroup is ours only if no other live slurmd could be using it."""
        try:
            with open(os.path.join(path, "cgroup.procs")) as fh:
                return not fh.read().strip()
        except OSError:
            return False

    # --- keeping a shared cluster as it was --------------------------------------------

    def _slurmd_pid(self, node: str) -> str:
        with open(os.path.join(self.base, "run", f"slurmd-{node}.pid")) as fh:
            return fh.read().strip()

    def _inside(self, node: str, entered: bool = True) -> dict[str, object]:
        """What tests change inside a node, read with as few processes as possible (this runs
        after every test): eth0 and the mounts through slurmd's /proc entries (its root is the
        node's own mount namespace and sysfs); the hostname, qdisc and nftables ruleset with one
        process each, and only when a test entered a node through run_on or netns (a job step that
        changed them would go unseen: none does)."""
        pid, ns = self._slurmd_pid(node), self._netns(node)
        eth0 = {}
        for name in ("mtu", "operstate"):
            with open(f"/proc/{pid}/root/sys/class/net/eth0/{name}") as fh:
                eth0[name] = fh.read().strip()
        with open(f"/proc/{pid}/mountinfo") as fh:
            # (mount id, mount point): a tmpfs over /dev/shm has the host's mount point, not its id
            mounts = [tuple(line.split()[0:5:4]) for line in fh]
        if not entered:
            return {**eth0, "mounts": mounts}
        hostname = self._sh(["nsenter", "-t", pid, "--uts", "hostname"], check=False, timeout=10).stdout.strip()
        qdisc = self._sh(["tc", "-n", ns, "qdisc", "show", "dev", "eth0"], check=False, timeout=10).stdout
        nft = self._sh(["nsenter", f"--net=/run/netns/{ns}", "nft", "list", "ruleset"], check=False, timeout=10).stdout \
            if shutil.which("nft") else ""
        return {"hostname": hostname, **eth0, "qdisc": qdisc, "nft": nft, "mounts": mounts}

    def snapshot(self, entered: bool = True) -> dict[str, object]:
        """The state tests may change: each node's Slurm state and reason, hostname, eth0's MTU
        and state, qdisc, nftables ruleset and mounts (a tmpfs over /dev/shm)."""
        out = self._sh(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], check=False, env=self.env, timeout=10).stdout
        slurm = {n: (t, r) for n, t, r in (line.split("|", 2) for line in out.splitlines() if line.count("|") == 2)}
        return {node: {"slurm": slurm.get(node), **self._inside(node, entered)} for node in self.nodes}

    def _busy(self) -> bool:
        """Jobs still queued, or a node still busy or not answering: a step's end and a resumed
        node's return (it shows `idle*` until slurmctld next pings it) are asynchronous."""
        if self.squeue_ids():
            return True
        out = self._sh(["sinfo", "-h", "-N", "-o", "%T"], check=False, env=self.env, timeout=10).stdout
        return any(t.endswith("*") or t.startswith(("alloc", "mix", "compl")) for t in out.split())

    def restore(self, before: dict[str, object]) -> list[str]:
        """Put back what changed since `before` (a snapshot()), and say what that was. The
        cluster first gets a few seconds to settle (jobs ending, a resumed node answering
        again); only then are jobs cancelled and differences put back and reported."""
        end = time.monotonic() + 15
        busy = self._busy()
        while busy and time.monotonic() < end:
            time.sleep(0.1)
            busy = self._busy()
        if busy:
            self._cancel_jobs()
        entered, self._entered = self._entered, False
        now = self.snapshot(entered)
        changed: list[str] = []
        for node in self.nodes:
            was, is_, ns = before[node], now[node], self._netns(node)
            for _id, mount in reversed([m for m in is_["mounts"] if m not in was["mounts"]]):
                changed.append(f"{node}: {mount} mounted")
                self._sh(["nsenter", "-t", self._slurmd_pid(node), "--mount", "umount", "-l", mount], check=False)
            if is_.get("hostname", was["hostname"]) != was["hostname"]:
                changed.append(f"{node}: hostname {is_['hostname']} (was {was['hostname']})")
                self._sh(["nsenter", "-t", self._slurmd_pid(node), "--uts", "hostname", was["hostname"]], check=False)
            if (is_["mtu"], is_["operstate"]) != (was["mtu"], was["operstate"]):
                changed.append(f"{node}: eth0 mtu {is_['mtu']} {is_['operstate']} (was {was['mtu']} {was['operstate']})")
                self._sh(["ip", "-n", ns, "link", "set", "eth0", "mtu", was["mtu"],
                          *(["up"] if was["operstate"] != "down" else [])], check=False)
            if is_.get("qdisc", was["qdisc"]) != was["qdisc"]:
                changed.append(f"{node}: eth0 qdisc changed")
                self._sh(["tc", "-n", ns, "qdisc", "del", "dev", "eth0", "root"], check=False)
            if is_.get("nft", was["nft"]) != was["nft"]:
                changed.append(f"{node}: nftables ruleset changed")
                self._sh(["ip", "netns", "exec", ns, "nft", "flush", "ruleset"], check=False)
            if is_["slurm"] != was["slurm"]:
                changed.append(f"{node}: Slurm state {is_['slurm']} (was {was['slurm']})")
                self.scontrol(["update", f"nodename={node}", "state=resume"])
        if changed:
            def back() -> bool:
                again = self.snapshot()
                return all({k: v for k, v in again[n].items() if k != "mounts"}
                           == {k: v for k, v in before[n].items() if k != "mounts"} for n in self.nodes)

            self._wait(back, 15, "the shared cluster did not return to its state: " + "; ".join(changed),
                       *(f"slurmd-{n}.log" for n in self.nodes))
        return changed

    # --- using it -----------------------------------------------------------------------

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        merged = self.env
        if env:
            merged.update(env)
        return merged

    def scontrol(self, argv: Sequence[str], timeout: float = 10) -> subprocess.CompletedProcess:
        return subprocess.run(["scontrol", *argv], capture_output=True, text=True, timeout=timeout, env=self.env)

    def squeue_ids(self) -> list[str]:
        out = subprocess.run(["squeue", "-h", "-o", "%A"], capture_output=True, text=True, timeout=5,
                             env=self.env).stdout
        return out.split()

    def srun(self, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 60,
             check: bool = False) -> subprocess.CompletedProcess:
        """`srun argv...` from the root namespace (the login node) with the caller's environment."""
        proc = subprocess.run(["srun", *argv], capture_output=True, text=True, timeout=timeout,
                              env=self._env(env))
        if check and proc.returncode != 0:
            raise SlurmError(f"srun {' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def sbatch(self, script: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
               timeout: float = 60) -> tuple[str, str]:
        """Submit a batch script, wait for the job to leave the queue, return (job id, output)."""
        path = os.path.join(self.base, f"job-{time.monotonic_ns()}.sh")
        with open(path, "w") as fh:
            fh.write(script if script.startswith("#!") else "#!/bin/bash\n" + script)
        out = os.path.join(self.base, "job-%j.out")
        proc = subprocess.run(["sbatch", "--parsable", "-o", out, *args, path], capture_output=True, text=True,
                              timeout=20, env=self._env(env))
        if proc.returncode != 0:
            raise SlurmError(f"sbatch failed ({proc.returncode}): {proc.stderr.strip()}")
        job = proc.stdout.strip().split(";")[0]
        end = time.monotonic() + timeout
        while job in self.squeue_ids():
            if time.monotonic() > end:
                subprocess.run(["scancel", job], capture_output=True, timeout=10, env=self.env)
                raise SlurmError(f"job {job} did not finish within {timeout:g} s")
            time.sleep(0.1)
        result = out.replace("%j", job)
        # the output file can appear on the shared filesystem just after the job leaves the queue
        deadline = time.monotonic() + 5
        while not os.path.exists(result) and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            with open(result) as fh:
                return job, fh.read()
        except FileNotFoundError:
            return job, ""

    def run_on(self, node: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
        """argv inside node's namespaces (network, hostname, mounts), entered through its slurmd,
        outside any job: what a shell on that node would see."""
        self._entered = True
        return subprocess.run(["nsenter", "-t", self._slurmd_pid(node), "--net", "--uts", "--mount", *argv], capture_output=True,
                              text=True, timeout=timeout, env=self._env(env))

