"""Four "hosts": network namespaces on one bridge, each with its own hostname (UTS namespace) and
one or more ranks launched by environment variables as a launcher would. Faults are real: a
`tc` rate limit on one host's interface, an nftables rule dropping one direction between two
hosts, a host whose rank never starts."""

from __future__ import annotations

import time

import pytest

from tests.harness import apt
from tests.harness.netns import Namespaces
from tests.harness.runprefix import RUN
from tests.harness.ranks import (
    Ranks,
    checks,
    rank_env,
    report,
    require_torch,
    statuses,
    trouble,
)

MARGIN = 6.0  # four or five interpreters importing torch on a loaded 2-core machine
TIMEOUT = 25
SUBNET = RUN.subnet("nccltest.hosts")
PORT = 33100
HOSTS = ("h0", "h1", "h2", "h3")


@pytest.fixture
def lan():
    """Namespaces qc<pid>h0..h3, each with eth0 = SUBNET.(i+1)/24 on a bridge in qc<pid>sw."""
    require_torch()
    with Namespaces("qc") as ns:
        ns.lan(HOSTS, SUBNET)
        yield ns


def on(ns: Namespaces, short: str) -> list[str]:
    return ["ip", "netns", "exec", ns.name(short), "unshare", "--uts", "sh", "-c",
            f'hostname {short} && exec "$@"', "sh"]


def run_job(ns: Namespaces, placement: list[str], args=(), skip_ranks=()):
    """One rank per entry of placement (the host it runs on), rank 0 on placement[0]; ranks in
    skip_ranks are never started. (rc of rank 0, its report, stderrs, every rc, wall seconds)."""
    world = len(placement)
    local: dict[str, int] = {}
    with Ranks() as ranks:
        for rank, host in enumerate(placement):
            local_rank = local.get(host, 0)
            local[host] = local_rank + 1
            if rank in skip_ranks:
                continue
            env = rank_env(rank, world, PORT, f"{SUBNET}.1", GLOO_SOCKET_IFNAME="eth0")
            env["LOCAL_RANK"] = str(local_rank)
            ranks.start(["--timeout", str(TIMEOUT), *args, *(["--json"] if rank == 0 else [])], env, on(ns, host))
        out = ranks.finish(TIMEOUT + MARGIN)
        wall = time.monotonic() - ranks.started
    rc0, out0, _ = out[0]
    return rc0, report(out0), [e for _, _, e in out], [rc for rc, _, _ in out], wall


def mesh_summaries(doc) -> list[tuple[str, str]]:
    return [(f["status"], f["summary"]) for f in checks(doc)["nccl-test.mesh"]["findings"]]


def test_four_healthy_hosts_have_no_alarm(lan):
    """Two ranks on h0, one on each other host: one prober per host (ranks 0, 2, 3, 4), twelve
    host pairs, every rate near the median, the all_reduce passes."""
    _, doc, errs, rcs, _ = run_job(lan, ["h0", "h0", "h1", "h2", "h3"])
    assert rcs == [0] * 5, (errs, trouble(doc))
    assert all(s in ("ok", "warn") for s in statuses(doc).values()), trouble(doc)
    assert statuses(doc)["nccl-test.mesh"] == "ok" and statuses(doc)["nccl-test.all-reduce"] == "ok"
    [(_, summary)] = mesh_summaries(doc)
    assert summary.startswith("all 12 host-to-host connections work; median ")
    mesh = doc["nccl_test"]["mesh"]
    assert [h["ranks"] for h in mesh["hosts"]] == [[0, 1], [2], [3], [4]]
    assert sorted(mesh["rows"]) == ["0", "2", "3", "4"]  # rank 1 shares h0: it probes nothing
    assert all(len(mesh["rates"][r]) == 3 for r in mesh["rows"])


def test_a_throttled_host_is_named_and_nothing_else(lan):
    """h2's interface is limited to 40 Mbit/s with a real tbf qdisc: what h2 sends is ~100x
    slower than the rest; h2 is named, with its rank, and no other host or link."""
    lan.run("h2", ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "40mbit", "burst", "32kb",
                   "latency", "400ms"])
    rc0, doc, errs, rcs, _ = run_job(lan, list(HOSTS))
    assert statuses(doc)["nccl-test.mesh"] == "fail", doc["checks"]
    found = mesh_summaries(doc)
    assert len(found) == 1, found
    status, summary = found[0]
    # a busy rate-limited queue delays h2's acknowledgements too: receiving may be slow as well
    assert summary.startswith("h2 is slow: ") and "GB/s on pairs with h2 (sending" in summary, summary
    assert summary.endswith("; ranks 2)") and status == "fail"
    assert rc0 == 1 and rcs == [1] * 4, errs


def test_one_direction_dropped_names_that_pair(lan):
    """h3 drops new connections from h1 (nftables): h1 -> h3 is named, h3 -> h1 and every other
    pair work, and the collectives are not tried (they would hang)."""
    apt.ensure("nftables")
    lan.run("h3", ["nft", "add", "table", "inet", "qc"])
    lan.run("h3", ["nft", "add", "chain", "inet", "qc", "input", "{ type filter hook input priority 0 ; }"])
    lan.run("h3", ["nft", "add", "rule", "inet", "qc", "input", "ip", "saddr", f"{SUBNET}.2", "tcp", "dport",
                   "!=", str(PORT), "ct", "state", "new", "drop"])
    rc0, doc, errs, rcs, wall = run_job(lan, list(HOSTS))
    assert rc0 == 1 and rcs == [1] * 4, errs
    assert wall < TIMEOUT + MARGIN
    [(status, summary)] = mesh_summaries(doc)
    assert status == "fail" and summary == "1 of 12 host-to-host connections fail: 1(h1)->3(h3): timeout"
    assert doc["nccl_test"]["mesh"]["blocked"] == [[1, 3, "timeout"]]
    assert statuses(doc)["nccl-test.all-reduce"] == "skip"


def test_a_host_that_never_starts_is_named(lan):
    rc0, doc, errs, rcs, wall = run_job(lan, list(HOSTS), skip_ranks={3})
    assert rc0 == 1 and rcs == [1] * 3, errs
    assert wall < TIMEOUT + MARGIN
    finding = checks(doc)["nccl-test.rendezvous"]["findings"][0]
    assert finding["summary"].startswith("rank 3 of 4 never arrived")
    assert finding["evidence"]["missing_ranks"] == [3]


def test_small_messages_pass_and_large_ones_stall_on_an_mtu_mismatch(lan):
    """Every host speaks 9000-byte frames, but the switch port to h3 takes 1500: the handshake
    passes, full-size segments to and from h3 are dropped (no ICMP from a bridge: a black hole).
    The pairs with h3 are named as stalls with the MTU as the likely cause, no other pair is.

    Segmentation offloads are off on every interface: a veth or bridge lets a GSO packet through
    whatever its MTU (it is "segmented later"), so with them on some transfers to or from h3
    pass and the black hole is partial. A physical switch port sees real frames."""
    apt.ensure("ethtool")
    lan.run("sw", ["ip", "link", "set", "br0", "mtu", "9000"])
    for i, name in enumerate(HOSTS):
        lan.run("sw", ["ip", "link", "set", f"p{i}", "mtu", "1500" if name == "h3" else "9000"])
        lan.run(name, ["ip", "link", "set", "eth0", "mtu", "9000"])
        lan.run("sw", ["ethtool", "-K", f"p{i}", "tso", "off", "gso", "off", "gro", "off"])
        lan.run(name, ["ethtool", "-K", "eth0", "tso", "off", "gso", "off", "gro", "off"])
    rc0, doc, errs, rcs, wall = run_job(lan, list(HOSTS))
    assert rc0 == 1 and rcs == [1] * 4, errs
    assert wall < TIMEOUT + MARGIN
    found = checks(doc)["nccl-test.mesh"]["findings"]
    # Each stalled pair is measured (don't-fragment datagrams); one that could not be is named
    # as a stall with the MTU as the likely cause. Every finding names h3, no other pair.
    measured = [f for f in found if "the path carries packets of 1500 bytes, not 9000" in f["summary"]]
    stalls = [f for f in found if "small messages pass" in f["summary"]]
    assert len(measured) + len(stalls) >= 3 and len(measured) + len(stalls) == len(found), \
        [f["summary"] for f in found]
    assert measured and all("h3 (rank 3)" in f["summary"] for f in measured + stalls)
    # h0, h1 and h2 carry 9000 between them: h3 is the side to change, not its partners.
    for f in measured:
        lines = [line for line in f["fix"].splitlines() if not line.startswith("#")]
        assert lines == ["ssh h3 ip link set dev eth0 mtu 1500"], f["fix"]
    for f in stalls:
        assert "MTU mismatch" in f["explanation"] and "ping -c 3 -M do -s 1472" in f["fix"]
    # h3's own row: each transfer stalled, or the stalls used its budget first; none reads 'ok'
    rows = {row[0]: row[1:] for row in found[0]["evidence"]["table"]["rows"]}
    assert set(rows["3 h3"]) <= {"stalled", "ok, untimed", "-"} and "stalled" in rows["3 h3"], rows
    assert statuses(doc)["nccl-test.all-reduce"] == "skip"


def test_localise_rounds_name_the_throttled_host(lan):
    """--localise after the collectives: rounds of disjoint host pairs, 8 MiB each way, seeded
    with the mesh's probes, name h2 (tc-limited) as the slow host with its rank, and only h2."""
    lan.run("h2", ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "40mbit", "burst", "32kb",
                   "latency", "400ms"])
    rc0, doc, errs, rcs, wall = run_job(lan, list(HOSTS), args=["--localise"])
    assert wall < TIMEOUT + MARGIN
    run = checks(doc)["nccl-test.localise"]
    assert [f["evidence"]["hosts"] for f in run["findings"]] == [["h2"]], run["findings"]
    [finding] = run["findings"]
    assert finding["evidence"]["kind"] == "host" and finding["evidence"]["ranks"] == [2]
    assert finding["summary"].startswith("h2 is slow: ") and "on pairs with h2" in finding["summary"]
    assert doc["nccl_test"]["localise"]["reason"] == "asked for with --localise"
    rounds = doc["nccl_test"]["localise"]["rounds"]
    assert 1 <= len(rounds) <= 8 and all(len({h for pair in r for h in pair}) == 2 * len(r) for r in rounds)
    assert rc0 == 1 and rcs == [1] * 4, errs


def test_localise_on_a_healthy_lan_singles_out_nobody(lan):
    rc0, doc, errs, rcs, _ = run_job(lan, list(HOSTS), args=["--localise"])
    assert rcs == [0] * 4, (errs, trouble(doc))
    [finding] = checks(doc)["nccl-test.localise"]["findings"]
    assert finding["status"] == "ok" and "no host or link is singled out" in finding["summary"], (
        finding, doc["nccl_test"].get("localise"))
    assert all(s in ("ok", "skip") for s in statuses(doc).values()), trouble(doc)


def test_a_host_leader_gathers_its_ranks_results_for_rank_0(lan):
    """Two ranks on h1 and two on h2: their leaders (ranks 1 and 3) pass their host's results to
    rank 0 in one key each; every rank's results arrive and the job passes."""
    rc0, doc, errs, rcs, _ = run_job(lan, ["h0", "h1", "h1", "h2", "h2"])
    assert rcs == [0] * 5, (errs, trouble(doc))
    assert sorted(doc["nccl_test"]["results"]) == ["0", "1", "2", "3", "4"]
    assert doc["nccl_test"]["results_read"] == {"per_host": 2, "per_rank": 0}
    assert [h["ranks"] for h in doc["nccl_test"]["mesh"]["hosts"]] == [[0], [1, 2], [3, 4]]
    assert statuses(doc)["nccl-test.all-reduce"] == "ok"
