"""The localisation phase's pure parts: what a pair test says from its two probes, how the mesh's
probes seed the search, and that the rounds driven from mesh-like probes name the slow host."""

from __future__ import annotations

from distdoctor.model import Status
from distdoctor.nccltest import hostmesh, localise, pairtests

MB = 1 << 20


def probe(rate_gbs: float, status: str = "ok", nbytes: int = 8 * MB) -> dict:
    seconds = nbytes / (rate_gbs * 1e9) if rate_gbs else 0.0
    return {"status": status, "rate_gbs": rate_gbs, "seconds": seconds, "moved": nbytes if status == "ok" else 0}


def test_a_pair_passes_only_when_both_directions_moved_their_bytes():
    assert pairtests.pair_result(probe(0.5), probe(0.4)) == (True, 0.4, 0.4)
    assert pairtests.pair_result(probe(0.5), None) == (False, None, None)
    assert pairtests.pair_result(probe(0.5), probe(0, "timeout")) == (False, None, None)
    untimed = {"status": "ok", "rate_gbs": 0, "seconds": 0, "moved": 0}
    assert pairtests.pair_result(probe(0.5), untimed) == (False, None, None)


def test_a_fast_copy_is_judged_at_the_noise_floor():
    fast = probe(50.0, nbytes=MB)  # 1 MiB in 21 us: latency, not bandwidth
    ok, judged, measured = pairtests.pair_result(fast, fast)
    assert ok and judged == hostmesh.judged_rate(fast) < 50.0 and measured == 50.0


def test_both_ends_of_every_pair_send():
    assert pairtests.targets([(0, 3), (1, 2)]) == {0: 3, 3: 0, 1: 2, 2: 1}


def test_no_reserve_without_a_host_mesh_of_three():
    assert pairtests.reserve(60, 2, True) == 0.0
    assert pairtests.reserve(60, 8, False) == 0.0
    assert 0 < pairtests.reserve(60, 3, True) <= pairtests.RESERVE_MAX_S
    assert pairtests.reserve(1000, 64, True) == pairtests.RESERVE_MAX_S


def test_only_blocked_or_stalled_mesh_pairs_seed_the_search():
    loc = localise.Localiser(["a", "b", "c"])
    untimed = {"status": "ok", "rate_gbs": 0.0, "seconds": 0.0, "moved": 0}
    pairtests.seed(loc, {(0, 1): untimed, (1, 0): untimed, (0, 2): probe(0.5), (2, 0): probe(0, "refused"),
                         (1, 2): probe(0, "stalled"), (2, 1): probe(0, "timeout")})
    assert loc._results == {(0, 2): (False, None), (1, 2): (False, None)}


def _drive(rates: dict[int, float], n: int, link: tuple[int, int] | None = None) -> tuple[list[localise.Culprit], int]:
    """Rounds as lead.localise_phase runs them, with probes made up from per-host speeds."""
    hosts = [f"n{i:03d}" for i in range(n)]
    loc = localise.Localiser(hosts, max_rounds=pairtests.MAX_ROUNDS)
    rounds = 0
    while (pairs := loc.next_round()) is not None:
        rounds += 1
        for a, b in pairs:
            speed = min(rates.get(a, 0.5), rates.get(b, 0.5))
            if link and {a, b} == set(link):
                speed = 0.004
            loc.record((a, b), *pairtests.pair_result(probe(speed), probe(speed)))  # judged, measured
    return loc.culprits(), rounds


def test_rounds_name_one_slow_host_among_64():
    culprits, rounds = _drive({37: 0.005}, 64)
    assert [(c.kind, c.hosts) for c in culprits] == [("host", ("n037",))]
    assert rounds <= pairtests.MAX_ROUNDS


def test_rounds_name_a_slow_link_between_two_good_hosts():
    culprits, _ = _drive({}, 16, link=(4, 5))  # a ring link: tested in the first rounds
    assert [(c.kind, c.hosts) for c in culprits] == [("link", ("n004", "n005"))]


def test_findings_say_when_no_pair_is_bad():
    hmap = hostmesh.HostMap(["a", "b", "c"], [[0], [1], [2]], ["", "", ""])
    loc = localise.Localiser(hmap.hosts)
    for pair in ((0, 1), (1, 2), (0, 2)):
        loc.record(pair, True, 0.5)
    [finding] = pairtests.findings(loc, hmap, 2, "asked for with --localise")
    assert finding.status == Status.OK and "no host or link is singled out" in finding.summary


def test_the_rounds_run_by_themselves_when_the_all_reduce_fails():
    from types import SimpleNamespace

    from distdoctor.api import fail, ok
    from distdoctor.nccltest import lead
    from distdoctor.nccltest.report import Recorder

    def rank_with(**runs):
        recorder = Recorder()
        for check_id, finding in runs.items():
            recorder.add(check_id.replace("_", "-"), [finding])
        return SimpleNamespace(args=SimpleNamespace(localise=False), recorder=recorder)

    assert lead.localise_reason(rank_with(**{"nccl-test.all_reduce": ok("summed")})) == ""
    assert lead.localise_reason(rank_with(**{"nccl-test.all_reduce": fail("hung")})) == "the job-wide all_reduce failed"
    assert lead.localise_reason(rank_with(**{"nccl-test.init": fail("timeout")})) == \
        "the process group did not initialize"
    forced = rank_with()
    forced.args.localise = True
    assert lead.localise_reason(forced) == "asked for with --localise"
