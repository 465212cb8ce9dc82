"""SIMULATION of nccl-test at scale (labelled: the logic at 512 and 4096 hosts x 8 ranks in one
process, simulated store and probes; the real network is tested in test_netns.py), plus the
store protocol against a real torch TCPStore."""

import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from distdoctor.nccltest import aggregate
from distdoctor.nccltest.localise import HOST, LINK
from distdoctor.nccltest.simulate import Fabric, SimStore, hostname, run, simulate

FAULTS = {"speed": {3: 0.005}, "dead": {200}, "dropped": {(40, 41)}, "slow_links": {(77, 78): 0.01}}


def _named(culprits):
    return sorted((c.kind, c.hosts) for c in culprits)


def _followers_and_leaders(outcome):
    rph = outcome.ranks_per_host
    leaders = [r for r in outcome.messages if r and r % rph == 0]
    followers = [r for r in outcome.messages if r % rph]
    return leaders, followers


def test_store_traffic_per_rank_is_flat_in_the_number_of_hosts():
    small, large, larger = simulate(8, 8), simulate(64, 8), simulate(512, 8)
    for outcome in (small, large, larger):
        leaders, followers = _followers_and_leaders(outcome)
        assert {outcome.messages[r] for r in followers} == {3}      # slot, fingerprint, verdict
        assert {outcome.messages[r] for r in leaders} == {8 + 6}    # + its host's 7 fingerprints
        assert outcome.missing == [] and outcome.hosts_seen == outcome.n_hosts
    # rank 0 reads one key per host (and writes one plan per host): linear in hosts, not ranks
    assert large.messages[0] - small.messages[0] == 3 * (64 - 8)
    assert larger.messages[0] - large.messages[0] == 3 * (512 - 64)
    assert max(large.bytes[r] for r in large.bytes if r) < 1.2 * max(small.bytes[r] for r in small.bytes if r)


def test_every_rank_gets_the_verdict_and_a_missing_rank_is_named():
    outcome = simulate(6, 4, absent={9})
    assert outcome.missing == [9]
    assert outcome.verdict[5] == {"go": False, "missing": [9]}
    assert set(outcome.verdict) == set(range(24)) - {9}
    healthy = simulate(6, 4)
    assert all(v == {"go": True, "missing": []} for v in healthy.verdict.values())
    assert healthy.mesh_culprits == [] and healthy.localise_culprits == []
    assert [f.status.value for f in healthy.fingerprint_findings] == ["ok"]


def test_a_version_clash_stops_the_job_and_names_the_host():
    outcome = simulate(6, 2, odd_nccl={4})
    assert [f.summary for f in outcome.fingerprint_findings] == [
        "NCCL version differs: 2.18.1 on ranks 8-9 (node00004) (the other 10 ranks have 2.21.5)"]
    assert {v["go"] for v in outcome.verdict.values()} == {False}


def test_a_host_that_never_starts_is_missing_with_all_its_ranks():
    outcome = simulate(5, 4, absent=set(range(8, 12)))
    assert outcome.missing == [8, 9, 10, 11] and outcome.hosts_seen == 4


def test_two_hosts_claiming_one_name_and_address_make_one_leader():
    """Ranks that lie about their host: eight ranks say they are on one host of four ranks."""
    store = SimStore()
    fps = {r: {"rank": r, "host": "twin"} for r in range(8)}
    programs = {r: aggregate.gather(r, 8, "twin@10.0.0.1", fps[r], 4) for r in range(8)}
    roles = run(programs, store)
    assert sum(role.leader for role in roles.values()) == 1
    assert roles[0].missing == [] and roles[0].summaries[0]["ranks"] == list(range(8))


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=12), data=st.data(), known=st.booleans())
def test_gather_covers_every_rank_whatever_the_order_and_host_sizes(sizes, data, known):
    """Hosts of different sizes, ranks arriving in any order, some never arriving, and the
    launcher's local world size known or not: rank 0 sees exactly the ranks that came, each
    host has exactly one leader, and no rank but rank 0 sends more than L + 6 messages."""
    host_of = [h for h, size in enumerate(sizes) for _ in range(size)]
    world = len(host_of)
    absent = data.draw(st.sets(st.integers(1, world - 1), max_size=world // 3)) if world > 1 else set()
    order = data.draw(st.permutations([r for r in range(world) if r not in absent]))
    store = SimStore()
    programs = {r: aggregate.gather(r, world, f"h{host_of[r]}", {"rank": r}, sizes[host_of[r]] if known else None)
                for r in order}
    roles = run(programs, store)
    assert roles[0].missing == sorted(absent)
    assert sorted(r for s in roles[0].summaries for r in s["ranks"]) == sorted(order)
    present_hosts = {host_of[r] for r in order}
    assert sorted(role.host for role in roles.values() if role.leader) == sorted(f"h{h}" for h in present_hosts)
    assert all(store.messages[r] <= sizes[host_of[r]] + 6 for r in order if r)


def test_timeouts_never_hang_the_simulation():
    store = SimStore()
    programs = {0: aggregate.announce(1), 1: aggregate.collect("x", aggregate.Role(False, "h"), 0, None, 2)}
    assert run(programs, store) == {0: None, 1: {0: None, 1: None}}
    assert store.timeouts >= 1


def test_fabric_probes_are_one_way_and_pair_tests_both_ways():
    fabric = Fabric(4, dropped={(1, 2)}, speed={3: 0.01})
    assert fabric.probe(1, 2) is None and fabric.probe(2, 1) is not None
    assert fabric.pair_test(1, 2) == (False, None)
    ok, bw = fabric.pair_test(0, 3)
    assert ok and bw < 0.011


# Rank 0's plan for 32,768 ranks takes well under a second (bench/nccltest_scale.py measures it);
# the bound here only catches a blow-up in its complexity, so a loaded machine does not trip it.
PLAN_BOUND = 5.0


def test_simulated_512_hosts_x_8_ranks_names_the_injected_faults():
    """SIMULATION, 512 hosts x 8 ranks: a slow host, a dead host, a one-way drop, a slow link."""
    outcome = simulate(512, 8, Fabric(512, **FAULTS), odd_nccl={300})
    assert [(f.status.value, f.summary) for f in outcome.fingerprint_findings] == [
        ("fail", "NCCL version differs: 2.18.1 on ranks 2400-2407 (node00300) (the other 4088 ranks have 2.21.5)")]
    leaders, followers = _followers_and_leaders(outcome)
    assert max(outcome.messages[r] for r in followers + leaders) == 14
    assert outcome.plan_seconds < PLAN_BOUND
    assert outcome.mesh_pairs <= 14 * 512
    # the mesh probes the ring both ways, so the drop and the slow link (ring neighbours) are seen
    assert _named(outcome.mesh_culprits) == [
        (HOST, (hostname(3),)), (HOST, (hostname(200),)),
        (LINK, (hostname(40), hostname(41))), (LINK, (hostname(77), hostname(78)))]
    drop = next(c for c in outcome.mesh_culprits if c.hosts == (hostname(40), hostname(41)))
    assert drop.direction == "->" and "the other direction" in drop.text
    slow = next(c for c in outcome.mesh_culprits if c.hosts == (hostname(3),))
    assert slow.text.startswith(f"{hostname(3)} is slow: 0.00") and slow.ranks == tuple(range(24, 32))
    # the search, with pair tests (both directions at once), names the same without direction
    assert _named(outcome.localise_culprits) == [
        (HOST, (hostname(3),)), (HOST, (hostname(200),)),
        (LINK, (hostname(40), hostname(41))), (LINK, (hostname(77), hostname(78)))]
    assert outcome.localise_rounds <= 10 and outcome.localise_named_at <= 4


def test_simulated_4096_hosts_x_8_ranks_costs_the_same_per_rank():
    """SIMULATION, 4096 hosts x 8 ranks (32,768 ranks): per-rank store traffic as at 64 hosts."""
    outcome = simulate(4096, 8, Fabric(4096, speed={1234: 0.005}))
    small = simulate(64, 8)
    for r in (8, 9, 4000 * 8, 4000 * 8 + 3):
        assert outcome.messages[r] == small.messages[r % 512]
    assert outcome.per_rank([r for r in outcome.messages if r]) == small.per_rank([r for r in small.messages if r])
    assert outcome.messages[0] == small.messages[0] + 3 * (4096 - 64)
    assert outcome.plan_seconds < PLAN_BOUND
    assert _named(outcome.mesh_culprits) == [(HOST, (hostname(1234),))]
    assert _named(outcome.localise_culprits) == [(HOST, (hostname(1234),))]
    assert outcome.localise_named_at <= 3


def test_protocol_runs_unchanged_against_a_real_tcpstore():
    """The same generators, driven against torch's TCPStore by threads: 3 hosts x 2 ranks."""
    import datetime

    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, 7, True, timeout=datetime.timedelta(seconds=20), wait_for_workers=False)
    results: dict[int, object] = {}

    def rank_main(rank: int) -> None:
        store = TCPStore("127.0.0.1", server.port, 7, False, timeout=datetime.timedelta(seconds=20))
        host = f"h{rank // 2}@10.0.0.{rank // 2}"
        fp = {"rank": rank, "host": f"h{rank // 2}"}
        role = aggregate.drive(aggregate.gather(rank, 6, host, fp, 2), store, time.monotonic() + 10)
        verdict = {"hosts": sorted(s["host"] for s in role.summaries)} if rank == 0 else None
        results[rank] = (role, aggregate.drive(aggregate.announce(rank, verdict), store, time.monotonic() + 10))

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == list(range(6))
    assert sum(role.leader for role, _ in results.values()) == 3
    assert results[0][0].missing == []
    assert {v["hosts"] == ["h0@10.0.0.0", "h1@10.0.0.1", "h2@10.0.0.2"] for _, v in results.values()} == {True}


def test_sealed_values_and_a_planted_one():
    """With seal/unseal hooks (an HMAC of the job token over key and value), a value planted by
    someone without the token reads as missing and is named; the ranks that sealed theirs pass."""
    import datetime
    import hashlib
    import hmac

    from torch.distributed import TCPStore

    token = b"job-token"

    def seal(key, value):
        return hmac.new(token, f"{key}\n{value}".encode(), hashlib.sha256).hexdigest() + value

    def unseal(key, raw):
        text = raw.decode()
        mac, value = text[:64], text[64:]
        if not hmac.compare_digest(mac, hmac.new(token, f"{key}\n{value}".encode(), hashlib.sha256).hexdigest()):
            raise ValueError(f"{key} is not sealed with this job's token")
        return value

    server = TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=20), wait_for_workers=False)
    rejected: list[str] = []
    # world of 3: rank 1 alone on host B, rank 0 alone on host A, rank 2 never comes; a stranger
    # plants the third host summary, claiming rank 2
    other = aggregate.drive(aggregate.gather(1, 3, "B", {"rank": 1}, 1), server, time.monotonic() + 5,
                            seal, unseal, rejected)
    assert other.leader and other.index == 0
    server.set("host/2", '{"host": "C", "ranks": [2], "fps": [{"rank": 2}]}')
    role = aggregate.drive(aggregate.gather(0, 3, "A", {"rank": 0}, 1), server, time.monotonic() + 2,
                           seal, unseal, rejected)
    assert [s["host"] for s in role.summaries] == ["B", "A"]
    assert role.missing == [2] and rejected == ["host/2"]
    aggregate.drive(aggregate.announce(0, {"go": False}), server, time.monotonic() + 1, seal, unseal, rejected)
    assert aggregate.drive(aggregate.announce(1), server, time.monotonic() + 1, seal, unseal, rejected) == {"go": False}
    server.set("verdict", '{"go": true}')    # planted without the token
    assert aggregate.drive(aggregate.announce(1), server, time.monotonic() + 1, seal, unseal, rejected) is None
    assert rejected == ["host/2", "verdict"]


def test_driver_keeps_the_deadline_however_many_keys_are_missing():
    """Rank 0 of 40 hosts of which none arrives: the collect phase ends at its deadline, not
    after one timeout per host."""
    import datetime

    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=20), wait_for_workers=False)
    started = time.monotonic()
    got = aggregate.drive(aggregate.collect("mrow", aggregate.Role(False, "h"), 0, None, 40), store,
                          started + 1.0)
    elapsed = time.monotonic() - started
    assert got == {i: None for i in range(40)}
    assert elapsed < 5, elapsed
