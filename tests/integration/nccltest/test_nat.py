"""A host behind NAT, for real: nodeb sits on a private network behind a router namespace that
masquerades its traffic (what Docker's bridge network does to a container). It reaches rank 0,
so the rendezvous works, but the address it advertises is not reachable from nodea. The mesh
names nodeb, both addresses, and host networking as the fix; the fix applied (nodeb's rank run
in its host's own network namespace, the router's, as `docker run --network=host` would) makes
the re-run clean."""

from __future__ import annotations

import time

import pytest

from tests.harness import apt
from tests.harness.fixapply import assert_cleared
from tests.harness.netns import Namespaces
from tests.harness.ranks import Ranks, checks, rank_env, report, require_torch, statuses
from tests.harness.runprefix import RUN

TIMEOUT = 25
MARGIN = 8.0
OUTSIDE, INSIDE = RUN.subnet("nccltest.nat", 0), RUN.subnet("nccltest.nat", 1)


@pytest.fixture
def natted():
    """a: nodea at OUTSIDE.1. r: nodeb's host, OUTSIDE.254 on its eth0, INSIDE.254 on the bridge
    side (rb), masquerading what leaves eth0. b: nodeb's container at INSIDE.2."""
    require_torch()
    apt.ensure("nftables")
    with Namespaces("lfn") as ns:
        for short in ("a", "r", "b"):
            ns.add(short)
        ns.veth("a", "eth0", "r", "eth0")
        ns.veth("b", "eth0", "r", "rb")
        ns.run("a", ["ip", "addr", "add", f"{OUTSIDE}.1/24", "dev", "eth0"])
        ns.run("r", ["ip", "addr", "add", f"{OUTSIDE}.254/24", "dev", "eth0"])
        ns.run("r", ["ip", "addr", "add", f"{INSIDE}.254/24", "dev", "rb"])
        ns.run("b", ["ip", "addr", "add", f"{INSIDE}.2/24", "dev", "eth0"])
        ns.run("b", ["ip", "route", "add", "default", "via", f"{INSIDE}.254"])
        ns.run("r", ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        for rule in (["add", "table", "ip", "nat"],
                     ["add", "chain", "ip", "nat", "post", "{ type nat hook postrouting priority 100 ; }"],
                     ["add", "rule", "ip", "nat", "post", "oifname", "eth0", "masquerade"]):
            ns.run("r", ["nft", *rule])
        yield ns


def on(ns: Namespaces, short: str, name: str) -> list[str]:
    return ["ip", "netns", "exec", ns.name(short), "unshare", "--uts", "sh", "-c", f'hostname {name} && exec "$@"', "sh"]


def run_pair(ns: Namespaces, nodeb_in: str, port: int):
    with Ranks() as ranks:
        for rank, (short, name) in enumerate((("a", "nodea"), (nodeb_in, "nodeb"))):
            env = rank_env(rank, 2, port, f"{OUTSIDE}.1", GLOO_SOCKET_IFNAME="eth0")
            ranks.start(["--timeout", str(TIMEOUT), "--mesh", *(["--json"] if rank == 0 else [])], env,
                        on(ns, short, name))
        (rc0, out0, err0), (rc1, _out1, err1) = ranks.finish(TIMEOUT + MARGIN)
        wall = time.monotonic() - ranks.started
    return rc0, report(out0), err0 + err1, wall


def test_a_host_behind_nat_is_named_with_both_addresses_and_host_networking_clears_it(natted):
    rc0, doc, errs, wall = run_pair(natted, "b", 29471)
    assert rc0 == 1 and wall < TIMEOUT + MARGIN, errs
    mesh = checks(doc)["nccl-test.mesh"]
    [nat] = [f for f in mesh["findings"] if "behind NAT" in f["summary"]]
    assert nat["summary"].startswith(f"nodeb (rank 1) advertises {INSIDE}.2 but its connections arrive from "
                                     f"{OUTSIDE}.254"), nat["summary"]
    assert "--network=host" in nat["fix"] and "nodeb" in nat["fix"]
    assert not any("behind NAT" in f["summary"] and "nodea" in f["subject"] for f in mesh["findings"])
    # The fix names no command (the container is restarted by whoever runs it); what it says is
    # done: nodeb's rank runs in its host's own network namespace, where its address is the
    # one its peers see.
    assert [r["nodes"] for r in nat["remedy"]] == [["nodeb"]] and not nat["remedy"][0]["commands"]
    rc0, again, errs, _ = run_pair(natted, "r", 29472)
    assert rc0 == 0, (errs, [c for c in again["checks"] if c["status"] != "ok"])
    assert statuses(again)["nccl-test.mesh"] == "ok"
    assert_cleared(doc, again, [nat["fix"]])
