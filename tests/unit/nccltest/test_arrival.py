"""Rank 0's launch findings (nccltest/arrival.py): is MASTER_ADDR this host, and if not, what to do."""

from distdoctor.nccltest import arrival
from distdoctor.nccltest.rendezvous import Endpoint, Identity

IDENT = Identity(0, 2, 0, "srun", "srun step 7.0")


def _launch(addr, hostname, resolved, mine, hostname_addrs):
    suggestion = arrival.reachable_name(hostname, hostname_addrs, mine, sorted(mine)[0])
    e = Endpoint(addr, 29500, "first host of the step", "derived")
    return arrival.launch_findings(e, IDENT, hostname, resolved, "", mine, suggestion, hostname_addrs)


def test_rank0_in_a_natted_container_named_like_its_host_gets_host_networking_not_its_inside_address():
    """Live (bench/live_faults.py nat-rank0): rank 0 in a container on node1's bridge network;
    MASTER_ADDR=node1 resolves to node1's address, which the container does not have. The fix
    was `export MASTER_ADDR=172.31.1.2`, the NATed inside address that nobody reaches."""
    [_, found] = _launch("node1", "node1", ["10.143.132.11"], {"172.31.1.2", "127.0.0.1"}, ["10.143.132.11"])
    assert found.status.value == "fail"
    assert "is the name of rank 0's host node1, but not an address rank 0 has" in found.summary
    assert "172.31.1.2" not in found.fix and "--network=host" in found.fix, found.fix
    assert found.fix.startswith("# on node1: restart its container with host networking"), found.fix


def test_the_host_address_itself_as_master_addr_is_the_same_case():
    [_, found] = _launch("10.143.132.11", "node1", ["10.143.132.11"], {"172.31.1.2"}, ["10.143.132.11"])
    assert "--network=host" in found.fix and "MASTER_ADDR=" not in found.fix


def test_master_addr_of_another_host_still_gets_the_address_that_works():
    [_, found] = _launch("node2", "node1", ["10.143.132.12"], {"10.143.132.11"}, ["10.143.132.11"])
    assert found.summary.startswith("MASTER_ADDR node2 (10.143.132.12) is not an address of rank 0's host node1")
    assert found.fix == "export MASTER_ADDR=node1"


def test_a_wait_cut_short_by_a_doomed_roll_says_why_the_rank_is_missing():
    ident = Identity(0, 3, 0, "env", "RANK/WORLD_SIZE", kind="env")
    e = Endpoint("127.0.0.1", 29500, "MASTER_ADDR", "MASTER_PORT")
    fps = [{"rank": 0, "host": "vm"}, {"rank": 1, "host": "vm"}]
    short = arrival.missing_finding([2], 3.1, True, ident, e, fps, {}, cut_short=True)
    full = arrival.missing_finding([2], 27.5, True, ident, e, fps, {})
    assert short.summary.startswith("rank 2 of 3 never arrived within 3.1 s of rank 0's start")
    assert "rank 0 stopped waiting there" in short.summary
    assert "stopped waiting" not in full.summary


def test_a_rank_0_that_was_slow_to_start_says_the_missing_may_still_have_been_starting():
    """A slow shared filesystem: rank 0 itself took 5.1 s of a 7 s wait to import torch, so the
    missing rank may have been slower still, not absent; a quick start says nothing of it."""
    ident = Identity(0, 2, 0, "env", "RANK/WORLD_SIZE", kind="env")
    e = Endpoint("10.0.0.1", 29500, "MASTER_ADDR", "MASTER_PORT")
    fps = [{"rank": 0, "host": "node1"}]
    slow = arrival.missing_finding([1], 7.0, True, ident, e, fps, {}, own_start=5.1, bound=9)
    assert "they were still starting: rank 0 itself took 5.1 s of the 9 s bound" in slow.explanation
    assert "--timeout 20" in str(slow.fix)
    quick = arrival.missing_finding([1], 7.0, True, ident, e, fps, {}, own_start=1.2, bound=9)
    assert "still starting" not in quick.explanation and "--timeout" not in str(quick.fix)
