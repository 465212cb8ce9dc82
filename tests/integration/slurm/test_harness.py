"""The harness itself: a real two-node cluster whose nodes are distinct hosts, and a stop that
leaves nothing behind."""

import glob
import os
import subprocess

import pytest

from tests.harness import apt
from tests.harness.slurm import SlurmCluster



def test_two_nodes_with_their_own_hostnames(slurm_cluster):
    proc = slurm_cluster.srun(["-N2", "-n2", "hostname"], check=True)
    assert sorted(proc.stdout.split()) == ["node1", "node2"]


def test_each_node_resolves_its_own_name_to_its_own_interface(slurm_cluster):
    proc = slurm_cluster.srun(["-N2", "-n2", "-l", "sh", "-c", 'getent hosts "$(hostname)"; ls /sys/class/net'],
                              check=True)
    lines = sorted(proc.stdout.splitlines())
    for node in ("node1", "node2"):
        assert any(line.split()[1:] == [slurm_cluster.address(node), node] for line in lines), lines
    assert sorted({line.split(":", 1)[1].strip() for line in lines if line.count(" ") == 1}) == ["eth0", "lo"]


def test_run_on_enters_the_node(slurm_cluster):
    proc = slurm_cluster.run_on("node2", ["hostname"])
    assert proc.stdout.strip() == "node2"


def test_sbatch_runs_a_batch_step_then_an_inner_srun(slurm_cluster):
    _job, out = slurm_cluster.sbatch('echo "batch $(hostname)"\nsrun hostname | sort\n', ["-N2", "-n2"])
    assert out.splitlines() == ["batch node1", "node1", "node2"]


def _leftovers(cluster: SlurmCluster) -> list[str]:
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    found += [n for n in cluster.nodes if cluster.netns(n) in netns]
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, timeout=10).stdout
    if cluster.bridge in links.split():
        found.append(cluster.bridge)
    if os.path.exists(cluster.base):
        found.append(cluster.base)
    marker = f"SLURM_CONF={cluster.conf}".encode()
    for pid in cluster._daemon_pids_seen:
        if os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1][:3]:
            found.append(f"pid {pid}")
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in open(f"/proc/{entry}/environ", "rb").read().split(b"\0"):
                found.append(f"pid {entry} (job task)")
        except OSError:
            pass
    return found


def _slurm_cgroups() -> set[str]:
    return set(glob.glob("/sys/fs/cgroup/*/slurm*"))


def test_stop_leaves_no_daemon_namespace_or_directory_even_with_a_running_job():
    cgroups_before = _slurm_cgroups()
    cluster = SlurmCluster()
    cluster.start()
    try:
        cluster._daemon_pids_seen = set(cluster._daemon_pids)
        job = subprocess.run(["sbatch", "--parsable", "-N2", "-o", "/dev/null", "--wrap", "srun sleep 300"],
                             capture_output=True, text=True, timeout=20, env=cluster.env)
        assert job.returncode == 0, job.stderr
        hanging = subprocess.Popen(["srun", "-N1", "sleep", "300"], env=cluster.env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        cluster.stop()
    hanging.wait(timeout=15)
    assert _leftovers(cluster) == []
    assert _slurm_cgroups() <= cgroups_before


class _FailsAfterDaemons(SlurmCluster):
    def _start_daemons(self, timeout):
        super()._start_daemons(timeout)
        self._daemon_pids_seen = set(self._daemon_pids)
        raise RuntimeError("injected failure after the daemons started")


def test_a_failed_start_cleans_up_what_it_started():
    cluster = _FailsAfterDaemons()
    with pytest.raises(RuntimeError, match="injected"):
        cluster.start()
    assert len(cluster._daemon_pids_seen) == 4  # munged, slurmctld, two slurmd
    assert _leftovers(cluster) == []


def test_the_shared_cluster_is_put_back_and_the_change_named(slurm_cluster):
    """What the slurm_cluster fixture does after every test: a node drained, a tmpfs over
    /dev/shm, another MTU and hostname, a qdisc and an nftables table inside a node are each
    named and undone."""
    before = slurm_cluster.snapshot()
    slurm_cluster.run_on("node2", ["ip", "link", "set", "dev", "eth0", "mtu", "1400"], timeout=10)
    slurm_cluster.run_on("node2", ["hostname", "node9"], timeout=10)
    slurm_cluster.run_on("node2", ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", "/dev/shm"], timeout=10)
    assert slurm_cluster.scontrol(["update", "nodename=node3", "state=drain", "reason=left-by-a-test"]).returncode == 0
    apt.ensure("nftables")
    ns = slurm_cluster.netns("node1")
    subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "100mbit", "burst", "32kbit",
                    "latency", "50ms"], check=True, capture_output=True, timeout=10)
    subprocess.run(["ip", "netns", "exec", ns, "nft", "add", "table", "inet", "left_by_a_test"], check=True,
                   capture_output=True, timeout=10)
    changed = slurm_cluster.restore(before)
    assert "node1: eth0 qdisc changed" in changed and "node1: nftables ruleset changed" in changed
    assert "node2: /dev/shm mounted" in changed
    assert "node2: hostname node9 (was node2)" in changed and "node2: eth0 mtu 1400 up (was 1500 up)" in changed
    assert any(c.startswith("node3: Slurm state") for c in changed), changed
    after = slurm_cluster.snapshot()
    for node in slurm_cluster.nodes:
        assert after[node] == before[node], node
    assert slurm_cluster.restore(before) == []
