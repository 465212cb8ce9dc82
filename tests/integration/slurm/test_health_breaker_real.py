"""`distdoctor health`'s two safeguards on a real two-node Slurm cluster of its own (the breaker
counts the partition's nodes, so not the session's shared three-node one):
the circuit breaker (no drain when more than --max-drained-share of the partition is already
drained by distdoctor) and a node whose state cannot be read (the controller unreachable) that is
never drained. The fault is a real mismatch: an [expect] table no node meets."""

from __future__ import annotations

import re
import time

import pytest

from distdoctor.parsers.slurm import parse_node_show
from tests.conftest import distdoctor_argv, load_report
from tests.harness.slurm import SlurmCluster


@pytest.fixture(scope="module")
def cluster():
    c = SlurmCluster(prefix="hh", nodes=2)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def impossible(tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text('[expect]\n"cpu.count" = 100000\n')
    return cfg


def _health(cluster, node, *args, env=None):
    return cluster.run_on(node, [*distdoctor_argv(), "health", "--only", "node.expectations", *args], timeout=70,
                          env={"XDG_CONFIG_HOME": "/nonexistent", **(env or {})})


def _state(cluster, node):
    return parse_node_show(cluster.scontrol(["show", "node", node]).stdout)


def _resume_all(cluster):
    for node in cluster.nodes:
        if _state(cluster, node).drained:
            cluster.scontrol(["update", f"nodename={node}", "state=resume"])


def test_circuit_breaker_holds_the_second_drain(cluster, impossible):
    try:
        first = _health(cluster, "node1", "--config", str(impossible))
        assert first.returncode == 1, first.stdout + first.stderr
        assert "draining node1: distdoctor: node.expectations: cpu.count" in first.stdout
        assert _state(cluster, "node1").drained

        # the same fault on node2: 1 of the partition's 2 nodes is drained by distdoctor already
        second = _health(cluster, "node2", "--config", str(impossible), "--format", "json")
        doc = load_report(second.stdout)
        verdict = doc["health"]
        assert verdict["action"] == "none", verdict
        assert "1 of 2 nodes of debug are already drained by distdoctor (50% > 10%)" in verdict["why"]
        assert verdict["breaker"]["drained_by_distdoctor"] == ["node1"] and verdict["breaker"]["nodes"] == 2
        assert not _state(cluster, "node2").drained

        # a site that accepts more: the breaker opens above its share
        third = _health(cluster, "node2", "--config", str(impossible), "--max-drained-share", "0.6")
        assert "draining node2" in third.stdout, third.stdout
        node2 = _state(cluster, "node2")
        assert node2.drained and node2.reason.startswith("distdoctor: node.expectations: cpu.count")
    finally:
        _resume_all(cluster)


def test_unreadable_node_state_never_drains(cluster, impossible, tmp_path):
    # The controller's port changed under the node (a slurm.conf copy pointing at a closed port):
    # scontrol cannot read the state, so health reports and does not act.
    text = open(cluster.conf).read()
    bad = tmp_path / "slurm.conf"
    bad.write_text(re.sub(r"^SlurmctldPort=\d+$", "SlurmctldPort=1", text, flags=re.M))
    started = time.monotonic()
    proc = _health(cluster, "node1", "--config", str(impossible), "--timeout", "40", env={"SLURM_CONF": str(bad)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cannot read the state of node node1" in proc.stdout
    assert "not draining node1: its state cannot be read" in proc.stdout and "Traceback" not in proc.stderr
    assert time.monotonic() - started < 45
    assert not _state(cluster, "node1").drained


def test_a_login_shell_snapshot_drains_nothing_under_slurmds_empty_environment(cluster, tmp_path):
    # The user's shell on node1 has `module load cuda openmpi` on its PATH; slurmd's environment
    # has nothing but what slurmd was started with (here SLURM_CONF).
    tools = tmp_path / "modules" / "bin"
    tools.mkdir(parents=True)
    (tools / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.48'\n")
    (tools / "mpirun").write_text("#!/bin/sh\necho 'mpirun (Open MPI) 5.0.9'\n")
    for name in ("nvcc", "mpirun"):
        (tools / name).chmod(0o755)
    login = {"PATH": f"{tools}:/usr/local/bin:/usr/bin:/bin", "XDG_CONFIG_HOME": "/nonexistent"}
    snap = cluster.run_on("node1", [*distdoctor_argv(), "inventory", "--snapshot"], env=login, timeout=120)
    assert snap.returncode == 0, snap.stderr
    cfg = tmp_path / "site.toml"
    cfg.write_text(snap.stdout)
    assert '"slurm.version"' in snap.stdout and "cuda.toolkit" not in snap.stdout and "mpi.version" not in snap.stdout
    try:
        proc = cluster.run_on("node1", ["env", "-i", f"SLURM_CONF={cluster.conf}", *distdoctor_argv(), "health",
                                        "--config", str(cfg), "--format", "json"], timeout=120)
        doc = load_report(proc.stdout)
        assert proc.returncode == 0, doc["health"]
        assert doc["health"]["action"] == "none" and "node1 passes" in doc["health"]["why"]
        expectations = next(r for r in doc["checks"] if r["id"] == "node.expectations")
        assert expectations["status"] == "ok", expectations["findings"]
        assert not _state(cluster, "node1").drained
    finally:
        _resume_all(cluster)
