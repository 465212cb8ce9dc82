"""`distdoctor health` on the real two-node Slurm cluster: a real fault on one node (a 16 MiB
tmpfs on /dev/shm in node1's own mount namespace, against an [expect] of at least 1 GiB) drains
that node with a readable reason, leaves the other alone, resumes it once the fault is gone,
and never resumes a node a person drained."""

from __future__ import annotations

import subprocess
import time

import pytest

from distdoctor import health
from tests.conftest import distdoctor_argv


GIB = 1024 ** 3


@pytest.fixture
def cluster(slurm_cluster):
    return slurm_cluster


@pytest.fixture
def expect_shm(tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[expect]\n"shm.size" = ">= {GIB}"\n')
    return cfg


def _health(cluster, node, *args, env=None):
    start = time.monotonic()
    proc = cluster.run_on(node, [*distdoctor_argv(), "health", *args], timeout=70,
                          env={"XDG_CONFIG_HOME": "/nonexistent", **(env or {})})
    return proc, time.monotonic() - start


def _state(cluster, node):
    proc = cluster.scontrol(["show", "node", node])
    from distdoctor.parsers.slurm import parse_node_show

    return parse_node_show(proc.stdout)


def _sinfo_reasons(cluster):
    out = subprocess.run(["sinfo", "-R", "-h", "-o", "%n|%E"], capture_output=True, text=True, timeout=10,
                         env=cluster.env).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def test_fault_drains_only_that_node_and_its_repair_resumes_it(cluster, expect_shm):
    cluster.run_on("node1", ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", "/dev/shm"])
    try:
        # dry run first: the command is printed, nothing changes
        proc, _ = _health(cluster, "node1", "--only", "node.expectations", "--config", str(expect_shm), "--dry-run")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "would run: scontrol update nodename=node1 state=drain 'reason=distdoctor: node.expectations:" \
            in proc.stdout
        assert not _state(cluster, "node1").drained

        proc, seconds = _health(cluster, "node1", "--only", "node.expectations", "--config", str(expect_shm))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "FAIL node.expectations: shm.size = 16777216, expected >= 1073741824" in proc.stdout
        node1 = _state(cluster, "node1")
        assert node1.drained and "DRAIN" in node1.state
        assert node1.reason.startswith("distdoctor: node.expectations: shm.size = 16777216")
        assert len(node1.reason) <= health.REASON_MAX
        assert _sinfo_reasons(cluster).get("node1") == node1.reason
        assert seconds < health.DEFAULT_TIMEOUT

        proc, _ = _health(cluster, "node2", "--only", "node.expectations", "--config", str(expect_shm))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        node2 = _state(cluster, "node2")
        assert not node2.drained and node2.reason == "" and "node2" not in _sinfo_reasons(cluster)

        # running again while still broken keeps the drain (and its reason) as it is
        proc, _ = _health(cluster, "node1", "--only", "node.expectations", "--config", str(expect_shm))
        assert proc.returncode == 1 and "node1 stays drained" in proc.stdout
    finally:
        cluster.run_on("node1", ["umount", "/dev/shm"])

    proc, _ = _health(cluster, "node1", "--only", "node.expectations", "--config", str(expect_shm))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resuming node1" in proc.stdout
    node1 = _state(cluster, "node1")
    assert not node1.drained and "node1" not in _sinfo_reasons(cluster)


def test_a_persons_drain_is_never_resumed(cluster, expect_shm):
    assert cluster.scontrol(["update", "nodename=node2", "state=drain", "reason=maint"]).returncode == 0
    try:
        proc, _ = _health(cluster, "node2", "--only", "node.expectations", "--config", str(expect_shm))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "stays drained: the reason is not distdoctor's (maint)" in proc.stdout
        node2 = _state(cluster, "node2")
        assert node2.drained and node2.reason == "maint"
    finally:
        cluster.scontrol(["update", "nodename=node2", "state=resume"])


def test_every_check_within_slurmds_bound_on_a_healthy_node(cluster):
    proc, seconds = _health(cluster, "node2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "node2 passes" in proc.stdout
    assert seconds < health.DEFAULT_TIMEOUT
    assert not _state(cluster, "node2").drained


def test_a_node_slurm_does_not_know_is_an_error_not_a_traceback(cluster, tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text('[expect]\n"gpu.count" = 8\n')  # these nodes have no GPU: a failure to act on
    proc, _ = _health(cluster, "node1", "--only", "node.expectations", "--config", str(cfg), "--node", "node9")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cannot read the state of node node9" in proc.stdout and "Traceback" not in proc.stderr
    assert "not draining node9: its state cannot be read" in proc.stdout and "scontrol update" not in proc.stdout
    assert not _state(cluster, "node1").drained
