"""`distdoctor health`'s decision, as a pure function of the check results and the node's state
(read from real `scontrol show node` captures); the real drain/resume is in test_health_real."""

from __future__ import annotations

import pytest

from distdoctor import health
from distdoctor.model import CheckRun, Finding, Status
from distdoctor.parsers import ParseError
from distdoctor.parsers.slurm import NodeState, parse_node_show
from distdoctor.testing import FakeHost
from tests.conftest import data_path


def run(check_id, status, summary):
    return CheckRun(check_id, "title", (), status, (Finding(status, summary),), 0.1)


def capture(name):
    with open(data_path("slurm", name)) as fh:
        return fh.read()


def test_node_state_from_real_captures():
    drained = parse_node_show(capture("scontrol_show_node_drained.txt"))
    assert drained == NodeState("node1", "IDLE+DRAIN", "distdoctor: host.shm-size: /dev/shm is only 16 MiB",
                                "10.120.192.11")
    assert drained.drained
    idle = parse_node_show(capture("scontrol_show_node_idle_oneliner.txt"))
    assert idle.state == "IDLE" and idle.reason == "" and not idle.drained
    assert NodeState("n", "DRAINED").drained and NodeState("n", "MIXED+DRAIN").drained
    assert not NodeState("n", "DOWN+NOT_RESPONDING").drained
    with pytest.raises(ParseError):
        parse_node_show("Node node9 not found\n")


def test_reason_names_the_worst_check_and_fits_sinfo():
    bad = health.failing([run("host.shm-size", Status.WARN, "/dev/shm is only 64 MiB (want at least 1 GiB)"),
                          run("node.expectations", Status.FAIL,
                              "gpu.count = 7, expected 8 and a very long tail of words that goes on and on"),
                          run("net.infiniband", Status.OK, "fine")], "warn")
    assert [r.id for r in bad] == ["node.expectations", "host.shm-size"]
    reason = health.reason_for(bad)
    assert reason.startswith("distdoctor: node.expectations: gpu.count = 7, expected 8")
    assert reason.endswith("... (+1)") and len(reason) == health.REASON_MAX
    assert health.failing(bad, "fail") == [bad[0]]
    assert health.reason_for([run("host.memlock-limit", Status.FAIL, "short")]) == \
        "distdoctor: host.memlock-limit: short"


BAD = [run("node.expectations", Status.FAIL, "shm.size = 16777216, expected >= 1073741824")]
REASON = health.reason_for(BAD)


@pytest.mark.parametrize("state, bad, kind, words", [
    (NodeState("n1", "IDLE"), BAD, "drain", "draining n1"),
    (None, BAD, "none", "not draining n1: its state cannot be read"),
    (NodeState("n1", "IDLE+DRAIN", REASON), BAD, "none", "stays drained"),
    (NodeState("n1", "IDLE+DRAIN", "distdoctor: host.shm-size: old"), BAD, "drain", "draining n1"),
    (NodeState("n1", "IDLE+DRAIN", "maint"), BAD, "none", "already drained by someone else (maint)"),
    (NodeState("n1", "IDLE+DRAIN", "distdoctor: node.expectations: old"), [], "resume", "resuming n1"),
    (NodeState("n1", "IDLE+DRAIN", "distdoctor: host.shm-size: old"), [], "none", "host.shm-size, which drained it, did not run"),
    (NodeState("n1", "MIXED+DRAIN", "maint"), [], "none", "not distdoctor's (maint)"),
    (NodeState("n1", "IDLE"), [], "none", "n1 passes"),
    (None, [], "none", "could not be read, so nothing is resumed"),
])
def test_decide(state, bad, kind, words):
    runs = bad or [run("node.expectations", Status.OK, "fine")]
    action = health.decide("n1", state, bad, runs=runs)
    assert action.kind == kind and words in action.why
    if kind == "drain":
        assert action.argv == ("scontrol", "update", "nodename=n1", "state=drain", f"reason={REASON}")
        assert action.shell() == f"scontrol update nodename=n1 state=drain 'reason={REASON}'"
    elif kind == "resume":
        assert action.argv == ("scontrol", "update", "nodename=n1", "state=resume")
    else:
        assert action.argv == ()


def test_node_name_prefers_slurms_name():
    assert health.node_name(FakeHost({"SLURMD_NODENAME": "gpu-a01"}, hostname="x.example")) == "gpu-a01"
    assert health.node_name(FakeHost({}, hostname="gpu-a02.cluster.example")) == "gpu-a02"


def test_unreadable_state_is_a_message_not_a_traceback():
    host = FakeHost(commands={("scontrol", "show", "node", "n1"): "garbage\n"})
    state, problem = health.node_state(host, "n1")
    assert state is None and "NodeName=" in problem
    state, problem = health.node_state(FakeHost(), "n1")
    assert state is None and "not found" in problem


def test_only_out_of_service_actions_drain_and_the_action_is_in_the_reason():
    def finding_run(check_id, action, summary, status=Status.FAIL):
        return CheckRun(check_id, "t", (), status, (Finding(status, summary, action=action),), 0.1)

    app = finding_run("gpu.xid", "app-error", "GPU0 (0000:38:00): Xid 13 x16")
    config = finding_run("gpu.device-nodes", "fix-config", "missing /dev/nvidia-uvm")
    xid79 = finding_run("gpu.xid", "reboot", "GPU3 (0000:3b:00): Xid 79 (GPU has fallen off the bus)")
    expect = run("node.expectations", Status.FAIL, "shm.size = 16777216, expected >= 1073741824")
    broken = CheckRun("gpu.nvlink", "t", (), Status.ERROR, (Finding(Status.ERROR, "boom"),), 0.1)
    assert health.draining([app, config], "fail") == []
    assert [r.id for r in health.draining([app, xid79, config], "fail")] == ["gpu.xid"]
    assert health.draining([expect, broken], "fail") == [broken, expect]  # no action named: drains as before
    reason = health.reason_for([xid79])
    assert reason.startswith("distdoctor: reboot: gpu.xid: GPU3 (0000:3b:00): Xid 79") and len(reason) <= 64
    # a run with a draining finding and an app error: the reason names the draining one
    both = CheckRun("gpu.xid", "t", (), Status.FAIL, (app.findings[0], xid79.findings[0]), 0.1)
    assert health.reason_for([both]).startswith("distdoctor: reboot: gpu.xid: GPU3")


SINFO = ("node1|debug*|idle|none\nnode2|debug*|drained|distdoctor: reboot: gpu.xid: GPU3 Xid 79\n"
         "node3|debug*|drained|maint by ops\nnode4|debug*|mixed|none\nnode1|gpu|idle|none\n"
         "node9|other|drained|distdoctor: node.expectations: kernel\n")


def test_breaker_counts_only_distdoctor_drains_in_the_nodes_partitions():
    host = FakeHost(commands={("sinfo", "-h", "-N", "-o", "%N|%P|%T|%E"): SINFO})
    breaker = health.partition_load(host, "node1")
    assert breaker.partitions == ("debug", "gpu") and breaker.total == 4 and breaker.drained == ("node2",)
    assert breaker.share == 0.25
    action = health.decide("node1", NodeState("node1", "IDLE"), BAD, breaker, 0.10)
    assert action.kind == "none" and "1 of 4 nodes of debug,gpu are already drained by distdoctor (25% > 10%)" in action.why
    assert health.decide("node1", NodeState("node1", "IDLE"), BAD, breaker, 0.30).kind == "drain"
    # a node already drained by distdoctor gets its new reason whatever the breaker says
    ours = NodeState("node1", "IDLE+DRAIN", "distdoctor: host.shm-size: old")
    assert health.decide("node1", ours, BAD, breaker, 0.10).kind == "drain"
    # and the breaker never stops a resume
    passed = [run("host.shm-size", Status.OK, "fine")]
    assert health.decide("node1", ours, [], breaker, 0.10, runs=passed).kind == "resume"


def test_breaker_unreadable_refuses_to_drain():
    host = FakeHost()  # no sinfo: exit 127
    breaker = health.partition_load(host, "node1")
    assert breaker.problem
    action = health.decide("node1", NodeState("node1", "IDLE"), BAD, breaker)
    assert action.kind == "none" and "partition's state cannot be read" in action.why
    alone = FakeHost(commands={("sinfo", "-h", "-N", "-o", "%N|%P|%T|%E"): "node2|debug|idle|none\n"})
    assert "in no partition" in health.partition_load(alone, "node1").problem
    garbage = FakeHost(commands={("sinfo", "-h", "-N", "-o", "%N|%P|%T|%E"): "what\n"})
    assert health.partition_load(garbage, "node1").problem
