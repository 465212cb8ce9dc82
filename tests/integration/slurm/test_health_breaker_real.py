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
