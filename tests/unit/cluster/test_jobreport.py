"""Who does what under a launcher, and the wire format: pure logic and a loopback socket."""

import socket
import threading
import time

import pytest

from distdoctor.crosscheck import jobreport
from distdoctor.launch import detect_context


def _slurm(procid, localid, nodeid, ntasks=4, nodes="node[1-2]"):
    return {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(localid),
            "SLURM_NODEID": str(nodeid), "SLURM_NTASKS": str(ntasks), "SLURM_STEP_NODELIST": nodes,
            "SLURM_STEP_NUM_NODES": "2", "SLURMD_NODENAME": f"node{nodeid + 1}"}


def _plan(env, **kw):
    return jobreport.plan(detect_context(env), env, "h", **kw)


def test_roles_under_srun_two_nodes_two_tasks_each():
    assert _plan(_slurm(0, 0, 0)).role == "gatherer"
    assert _plan(_slurm(1, 1, 0)).role == "quiet"
    leader = _plan(_slurm(2, 0, 1))
    assert leader.role == "leader" and leader.address == "node1" and leader.node == "node2"
    assert leader.expected == ("node1", "node2") and leader.nodes == 2
    assert _plan(_slurm(3, 1, 1)).role == "quiet"
    assert 30000 <= leader.port < 32000 and leader.port == _plan(_slurm(0, 0, 0)).port
    assert leader.seed == "slurm:42.0"


def test_no_launcher_one_task_or_each_task_is_unchanged():
    assert _plan({}).role == "alone"
    assert _plan(_slurm(0, 0, 0, ntasks=1)).role == "alone"
    assert _plan(_slurm(1, 1, 0), each_task=True).role == "alone"


def test_all_tasks_on_one_node_print_once():
    env = dict(_slurm(0, 0, 0), SLURM_STEP_NUM_NODES="1", SLURM_STEP_NODELIST="node1")
    assert _plan(env).role == "solo"


def test_torchrun_nodes_from_world_and_local_size_and_master_addr():
    env = {"TORCHELASTIC_RUN_ID": "abc", "RANK": "4", "LOCAL_RANK": "0", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
           "GROUP_RANK": "1", "MASTER_ADDR": "gpu001", "MASTER_PORT": "29500"}
    p = _plan(env)
    assert (p.role, p.nodes, p.address, p.expected) == ("leader", 2, "gpu001", ())


def test_a_fixed_port_can_be_asked_for():
    env = dict(_slurm(0, 0, 0), DISTDOCTOR_GATHER_PORT="32123")
    assert _plan(env).port == 32123


def test_frames_are_authenticated_and_bound_to_the_key():
    key, other = jobreport.job_key(b"s" * 32, "slurm:1.0"), jobreport.job_key(b"s" * 32, "slurm:1.1")
    a, b = socket.socketpair()
    with a, b:
        a.sendall(jobreport.frame(key, {"x": 1}))
        assert jobreport.read_frame(b, key, time.monotonic() + 2) == {"x": 1}
        a.sendall(jobreport.frame(other, {"x": 1}))
        with pytest.raises(ValueError, match="authentication"):
            jobreport.read_frame(b, key, time.monotonic() + 2)


def test_gatherer_takes_a_report_over_loopback_and_confirms():
    p = jobreport.Plan("gatherer", 2, ("a", "b"), "127.0.0.1", 0, "slurm:7.0", "a")
    key = jobreport.job_key(b"k" * 32, p.seed)
    g = jobreport.Gatherer(p, key, "127.0.0.1")
    try:
        port = g.sock.getsockname()[1]
        sender = jobreport.Plan("leader", 2, ("a", "b"), "127.0.0.1", port, "slurm:7.0", "b")
        box = {}
        t = threading.Thread(target=lambda: box.update(why=jobreport.send_report(sender, key, {"host": "b"},
                                                                                  time.monotonic() + 10)))
        t.start()
        got = g.wait(1, time.monotonic() + 10)
        t.join(10)
        assert got == {"b": {"host": "b"}} and box["why"] == ""
    finally:
        g.close()


def test_secret_file_is_made_private_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {"HOME": str(tmp_path)}
    first = jobreport.read_secret(env)
    assert jobreport.read_secret(env) == first and len(first) >= 32
    path = tmp_path / ".config" / "distdoctor" / "job-secret"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert jobreport.read_secret({"DISTDOCTOR_JOB_SECRET": "given"}) == b"given"


def test_a_report_with_another_key_is_refused_at_once_and_named_by_its_claim():
    p = jobreport.Plan("gatherer", 2, ("a", "b"), "127.0.0.1", 0, "slurm:7.0", "a")
    g = jobreport.Gatherer(p, jobreport.job_key(b"k" * 32, p.seed), "127.0.0.1")
    try:
        sender = jobreport.Plan("leader", 2, ("a", "b"), "127.0.0.1", g.sock.getsockname()[1], "slurm:7.0", "b")
        start = time.monotonic()
        why = jobreport.send_report(sender, jobreport.job_key(b"x" * 32, p.seed), {"host": "b"}, time.monotonic() + 20)
        assert time.monotonic() - start < 5
        assert why == "rank 0 could not authenticate this node's report: its job secret differs"
        assert g.wait(1, time.monotonic() + 1) == {}  # refused, not a report: nothing was kept
        assert list(g.rejected) == ["b"] and "failed authentication" in g.rejected["b"]
    finally:
        g.close()


def test_mpirun_meets_on_the_first_node_inside_slurm_else_on_mpiruns_host():
    env = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "123",
           "OMPI_MCA_orte_hnp_uri": "123.0;tcp://10.0.0.5:4242"}
    p = _plan(env)
    assert (p.role, p.nodes, p.address, p.seed) == ("leader", 2, "10.0.0.5", "ompi:123")
    inside = dict(env, SLURM_JOB_ID="9", SLURM_JOB_NODELIST="gpu[01-02]")
    assert _plan(inside).address == "gpu01"


def test_rank_0_listens_only_on_its_own_routable_address():
    from distdoctor.testing import FakeHost

    addrs = {"lo": [{"family": "inet", "address": "127.0.0.1"}], "eth0": [{"family": "inet", "address": "10.1.0.11"}]}
    host = FakeHost(if_addrs=addrs, resolve={"node1": ["10.1.0.11"], "vm": ["127.0.1.1"], "node2": ["10.1.0.12"]})
    assert jobreport.bind_address(host, "node1") == "10.1.0.11"
    with pytest.raises(jobreport.GatherError, match="not to an address of this host"):
        jobreport.bind_address(host, "vm")  # a name mapped to loopback: the other nodes cannot reach it
    with pytest.raises(jobreport.GatherError, match="not to an address of this host"):
        jobreport.bind_address(host, "node2")  # MASTER_ADDR names another host
    with pytest.raises(jobreport.GatherError, match="does not resolve"):
        jobreport.bind_address(host, "nowhere")


def test_rank_0_whose_own_name_is_on_loopback_still_gathers():
    """Live (loopback-name-node1): node1's own name on 127.0.1.1 there, while node2 resolves it to
    node1's address. Rank 0 gave up gathering, and node2's report, refused, became two more
    findings of one cause. It listens on every address instead (reports are authenticated)."""
    from distdoctor.testing import FakeHost

    addrs = {"lo": [{"family": "inet", "address": "127.0.0.1"}], "eth0": [{"family": "inet", "address": "10.1.0.11"}]}
    host = FakeHost(if_addrs=addrs, hostname="node1", resolve={"node1": ["127.0.1.1"], "vm": ["127.0.1.1"]})
    assert jobreport.bind_address(host, "node1") == "0.0.0.0"
    with pytest.raises(jobreport.GatherError):
        jobreport.bind_address(host, "vm")  # another name on loopback is still no way to rank 0


def test_a_stale_address_for_rank_0s_node_is_named_with_this_nodes_hosts_line_not_a_firewall():
    """Live (bench/live_faults.py stale-hosts-node2, a fault the fixes were not tuned on): node2's
    /etc/hosts mapped node1 to an address nobody has; its report timed out and the fix was an
    nft rule for node1, which failed (no such table). Slurm's NodeAddr says where node1 is."""
    plan = jobreport.Plan("leader", 2, ("node1", "node2"), "node1", 31354, "s", "node2")
    hosts = "127.0.0.1\tlocalhost\n10.0.0.99\tnode1\n10.0.0.12\tnode2\n"
    summary, explanation, fix = jobreport.undelivered(plan, "could not hand the report to rank 0 at node1:31354: "
                                                      "timed out", "10.0.0.0/24", ["10.0.0.99"], "10.0.0.11", hosts)
    assert summary.endswith("node1 resolves here to 10.0.0.99, but Slurm reaches it at 10.0.0.11"), summary
    from distdoctor.remote import render_all as render

    text = render(fix)
    assert "nft" not in text and "getent hosts node1" in text, text
    assert "# as root on node2: /etc/hosts line 2 maps node1 to 10.0.0.99" in text, text
    assert "s/^\\([[:space:]]*\\)10\\.0\\.0\\.99\\([[:space:]]\\)/\\110.0.0.11\\2/" in text, text
    # the same timeout with the right address is still the firewall's
    summary, _e, fix = jobreport.undelivered(plan, "timed out", "10.0.0.0/24", ["10.0.0.11"], "10.0.0.11", hosts)
    assert "nft insert rule" in render(fix) and "resolves here" not in summary
