"""Naming the bad host or link: speed outliers, per-pair verdicts and the adaptive search
(pure logic; the probes are functions of injected faults)."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from distdoctor.nccltest.localise import (
    HOST,
    LINK,
    UNKNOWN,
    Localiser,
    host_and_link_outliers,
    outliers,
)
from distdoctor.nccltest.plan import mesh_pairs, tree_edges

HEALTHY = 0.48
SLOW = 0.005


# --- outliers ---------------------------------------------------------------------------------

def test_outlier_below_half_the_median_is_named():
    found = outliers({"h1": 0.48, "h2": 0.47, "h3": 0.005, "h4": 0.49})
    assert [o.name for o in found] == ["h3"]
    assert found[0].text == "h3 is slow: 0.005 GB/s vs median 0.475 GB/s"
    assert found[0].measured == 0.005 and not found[0].ambiguous


def test_times_are_outliers_above_the_median():
    found = outliers({"0": 1.0, "1": 1.1, "2": 9.0}, higher_is_better=False, unit="ms")
    assert [(o.name, o.text) for o in found] == [("2", "2 is slow: 9 ms vs median 1.1 ms")]


def test_no_outlier_in_a_healthy_spread_or_tiny_input():
    assert outliers({"a": 0.48, "b": 0.30, "c": 0.50}) == []
    assert outliers({}) == [] and outliers({"a": 1.0}) == []
    assert outliers({"a": 0.1, "b": float("nan"), "c": "x"}) == []  # bad input is ignored


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(0.8, 1.2), min_size=3, max_size=40), low=st.floats(0.0, 0.39),
       at=st.integers(0, 40), higher=st.booleans())
def test_outliers_name_exactly_the_one_far_off(values, low, at, higher):
    samples = {f"h{i}": v for i, v in enumerate(values)}
    odd = f"h{at % len(values)}"
    samples[odd] = low if higher else 1 / max(low, 0.01) * 1.5
    found = outliers(samples, higher_is_better=higher)
    assert [o.name for o in found] == [odd]
    assert outliers({k: v for k, v in samples.items() if k != odd}, higher_is_better=higher) == []


def test_two_samples_cannot_name_one_side():
    found = outliers({"h1": 0.48, "h2": 0.005})
    assert len(found) == 1 and found[0].ambiguous and found[0].name == "h[1-2]"
    assert "neither can be named" in found[0].text
    assert outliers({"h1": 0.48, "h2": 0.40}) == []


# --- per-pair verdicts (a mesh or bench over four hosts, as the run) --------------------

def _mesh(hosts, speed):
    return {(hosts[a], hosts[b]): speed(hosts[a], hosts[b]) for a, b in mesh_pairs(len(hosts), "full")}


H4 = ["h1", "h2", "h3", "h4"]


def test_throttled_host_is_named_with_the_median():
    culprits = host_and_link_outliers(_mesh(H4, lambda a, b: SLOW if "h3" in (a, b) else HEALTHY),
                                      ranks_of={"h3": [4, 5], "h1": [0, 1]})
    assert [(c.kind, c.hosts, c.ranks) for c in culprits] == [(HOST, ("h3",), (4, 5))]
    assert culprits[0].text == "h3 is slow: 0.005 GB/s vs median 0.48 GB/s on pairs with h3"


def test_slow_host_among_three_is_named_though_it_is_in_most_pairs():
    # 4 of the 6 pairs touch h3: a median over pairs would call it normal
    culprits = host_and_link_outliers(_mesh(["h1", "h2", "h3"], lambda a, b: SLOW if "h3" in (a, b) else HEALTHY))
    assert [c.hosts for c in culprits] == [("h3",)]


def test_one_way_drop_names_the_link_and_its_direction():
    culprits = host_and_link_outliers(_mesh(H4, lambda a, b: None if (a, b) == ("h1", "h2") else HEALTHY))
    assert [(c.kind, c.hosts, c.direction) for c in culprits] == [(LINK, ("h1", "h2"), "->")]
    assert culprits[0].text == "link h1 -> h2 fails (the other direction and both hosts' other pairs pass)"


def test_link_down_both_ways():
    culprits = host_and_link_outliers(_mesh(H4, lambda a, b: None if {a, b} == {"h2", "h4"} else HEALTHY))
    assert [c.text for c in culprits] == ["link h2 <-> h4 fails both ways (both hosts' other pairs pass)"]


def test_slow_link_is_not_blamed_on_a_host():
    culprits = host_and_link_outliers(_mesh(H4, lambda a, b: 0.01 if (a, b) == ("h4", "h1") else HEALTHY))
    assert [(c.kind, c.hosts, c.measured) for c in culprits] == [(LINK, ("h4", "h1"), 0.01)]
    assert culprits[0].text.startswith("link h4 -> h1 is slow: 0.01 GB/s vs median 0.48 GB/s")


def test_host_that_cannot_send():
    culprits = host_and_link_outliers(_mesh(H4, lambda a, b: None if a == "h2" else HEALTHY))
    assert [(c.kind, c.hosts, c.direction) for c in culprits] == [(HOST, ("h2",), "send")]
    assert culprits[0].text == "h2 cannot send: 3 of 3 pairs from h2 fail, pairs to h2 pass"


def test_dead_host_and_two_slow_hosts():
    dead = host_and_link_outliers(_mesh(H4, lambda a, b: None if "h4" in (a, b) else HEALTHY))
    assert [c.text for c in dead] == ["h4 fails: 6 of 6 pairs with h4 fail"]
    six = [f"h{i}" for i in range(1, 7)]
    two = host_and_link_outliers(_mesh(six, lambda a, b: SLOW if {a, b} & {"h2", "h5"} else HEALTHY))
    assert [c.hosts for c in two] == [("h2",), ("h5",)]


def test_healthy_and_all_failing():
    assert host_and_link_outliers(_mesh(H4, lambda a, b: HEALTHY)) == []
    everything = host_and_link_outliers(_mesh(H4, lambda a, b: None))
    assert [(c.kind, c.hosts) for c in everything] == [(UNKNOWN, tuple(H4))]
    assert "common to all of them" in everything[0].text


def test_two_hosts_say_they_cannot_tell():
    culprits = host_and_link_outliers({("a", "b"): None, ("b", "a"): 0.4})
    assert culprits[0].text == ("link a -> b fails (the other direction passes; with two hosts, a host and "
                                "the link between them cannot be told apart)")


@settings(max_examples=40, deadline=None)
@given(n=st.integers(5, 24), data=st.data())
def test_mesh_verdict_names_exactly_the_injected_faults(n, data):
    hosts = [f"n{i:02d}" for i in range(n)]
    bad = data.draw(st.sets(st.sampled_from(hosts), max_size=max(1, n // 5)))
    fine = [h for h in hosts if h not in bad]
    links = data.draw(st.sets(st.tuples(st.sampled_from(fine), st.sampled_from(fine)).filter(lambda p: p[0] != p[1]),
                              max_size=2))
    # no host may carry most of the link faults, or it would rightly look like a bad host
    touched = [h for p in links for h in p]
    if any(touched.count(h) > 1 for h in touched):
        return
    jitter = random.Random(n)
    culprits = host_and_link_outliers(_mesh(hosts, lambda a, b: None if a in bad or b in bad or (a, b) in links
                                            else HEALTHY * (1 + jitter.random() / 10)))
    assert {c.hosts[0] for c in culprits if c.kind == HOST} == bad
    assert {c.hosts for c in culprits if c.kind == LINK} == set(links)
    assert all(c.kind != UNKNOWN for c in culprits)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(33, 160), data=st.data(), seed=st.integers(0, 99))
def test_sparse_mesh_verdict_names_exactly_the_injected_faults(n, data, seed):
    """Above 32 hosts the plan probes about 6 pairs per host: still enough to tell hosts from links."""
    hosts = [f"n{i:03d}" for i in range(n)]
    pairs = mesh_pairs(n, seed=seed)
    bad = data.draw(st.sets(st.sampled_from(hosts), max_size=3))
    fine_pairs = [(hosts[a], hosts[b]) for a, b in pairs if hosts[a] not in bad and hosts[b] not in bad]
    links = data.draw(st.sets(st.sampled_from(fine_pairs), max_size=3))
    touched = [h for p in links for h in p]
    if len(touched) != len(set(touched)):
        return
    slow = data.draw(st.booleans())
    culprits = host_and_link_outliers({(hosts[a], hosts[b]): (SLOW if slow else None) if hosts[a] in bad
                                       or hosts[b] in bad or (hosts[a], hosts[b]) in links else HEALTHY
                                       for a, b in pairs})
    assert {c.hosts[0] for c in culprits if c.kind == HOST} == bad
    assert {c.hosts for c in culprits if c.kind == LINK} == set(links)


# --- the adaptive search ---------------------------------------------------------------------

def _search(n, bad=(), slow=(), links=(), seed=0, max_rounds=10):
    hosts = [f"n{i:04d}" for i in range(n)]
    loc = Localiser(hosts, seed=seed, max_rounds=max_rounds)
    jitter = random.Random(seed)
    while (pairs := loc.next_round()) is not None:
        hosts_in_round = [h for p in pairs for h in p]
        assert len(hosts_in_round) == len(set(hosts_in_round)), "a round must be disjoint"
        for i, j in pairs:
            if i in bad or j in bad or frozenset((i, j)) in links:
                loc.record((i, j), False, None)
            else:
                loc.record((i, j), True, SLOW if i in slow or j in slow else HEALTHY * (1 + jitter.random() / 10))
    return loc, loc.culprits()


def test_one_slow_host_among_512_in_at_most_ten_rounds():
    loc, culprits = _search(512, slow={37})
    assert [(c.kind, c.hosts) for c in culprits] == [(HOST, ("n0037",))]
    assert culprits[0].text.startswith("n0037 is slow: 0.005 GB/s vs median 0.")
    assert loc.rounds <= 10


def test_nothing_bad_names_nobody():
    loc, culprits = _search(64)
    assert culprits == [] and loc.rounds <= 10


def test_several_hosts_and_ring_links():
    bad = {3, 100, 101}
    links = {frozenset((5, 6)), frozenset((200, 201))}
    loc, culprits = _search(512, bad=bad, links=links, slow={400})
    assert {c.hosts[0] for c in culprits if c.kind == HOST} == {"n0003", "n0100", "n0101", "n0400"}
    assert {c.hosts for c in culprits if c.kind == LINK} == {("n0005", "n0006"), ("n0200", "n0201")}
    assert loc.rounds <= 10


def test_tiny_jobs():
    _, two = _search(2, bad={1})
    assert [c.kind for c in two] == [UNKNOWN] and "cannot be told apart" in two[0].text
    _, three = _search(3, bad={1})
    assert [c.hosts for c in three] == [("n0001",)]
    _, everything = _search(6, bad=set(range(6)))
    assert [c.kind for c in everything] == [UNKNOWN] and "common to all" in everything[0].text
    assert Localiser(["only"]).next_round() is None


def test_the_ring_link_that_closes_an_odd_ring_is_tested():
    _, culprits = _search(21, links={frozenset((20, 0))})
    assert [(c.kind, c.hosts) for c in culprits] == [(LINK, ("n0000", "n0020"))]


def test_a_dead_host_and_a_dead_link_among_four_are_not_called_all_bad():
    # round 1 fails everywhere (0-1 through the dead host, 2-3 on the dead link)
    _, culprits = _search(4, bad={0}, links={frozenset((2, 3))})
    assert [(c.kind, c.hosts) for c in culprits] == [(HOST, ("n0000",)), (LINK, ("n0002", "n0003"))]


def test_a_host_the_budget_cannot_settle_is_said_so():
    _, culprits = _search(512, bad={10}, max_rounds=2)
    assert [c.kind for c in culprits] == [UNKNOWN] and "n0010" in culprits[0].hosts
    assert "could not tell" in culprits[0].text


@settings(max_examples=40, deadline=None)
@given(n=st.integers(4, 300), data=st.data(), seed=st.integers(0, 1000))
def test_search_names_exactly_the_injected_faults(n, data, seed):
    bad = data.draw(st.sets(st.integers(0, n - 1), max_size=max(1, n // 10)))
    # the links the job used: NCCL's ring and its two trees
    used = sorted({frozenset((k, (k + 1) % n)) for k in range(n)} | {frozenset(e) for e in tree_edges(n)})
    links = data.draw(st.sets(st.sampled_from(used), max_size=2))
    links = {p for p in links if not p & bad}
    # a host with two dead ring links looks dead to its ring partners: keep links apart
    touched = [h for p in links for h in p]
    if len(touched) != len(set(touched)):
        return
    loc, culprits = _search(n, bad=bad, links=links, seed=seed)
    assert {int(c.hosts[0][1:]) for c in culprits if c.kind == HOST} == bad
    assert {frozenset(int(h[1:]) for h in c.hosts) for c in culprits if c.kind == LINK} == links
    assert [c for c in culprits if c.kind == UNKNOWN] == []
    assert loc.rounds <= 10


# --- as findings ---------------------------------------------------------------------------------

def test_culprits_become_findings_that_validate_against_the_report_schema():
    from distdoctor.model import CheckRun, Report, RunContext, Status
    from distdoctor.nccltest.localise import to_finding
    from distdoctor.render.json import render
    from tests.conftest import load_report

    slow = host_and_link_outliers(_mesh(H4, lambda a, b: SLOW if "h3" in (a, b) else HEALTHY),
                                  ranks_of={"h3": [4, 5]})
    drop = host_and_link_outliers(_mesh(H4, lambda a, b: None if (a, b) == ("h1", "h2") else HEALTHY))
    dead = host_and_link_outliers(_mesh(H4, lambda a, b: None))
    found = [to_finding(c) for c in slow + drop + dead]
    assert [(f.status, f.subject) for f in found] == [(Status.WARN, "h3"), (Status.FAIL, "h1 -> h2"),
                                                      (Status.FAIL, "h[1-4]")]
    assert found[0].summary == "h3 is slow: 0.005 GB/s vs median 0.48 GB/s on pairs with h3"
    assert found[0].fix.startswith("ssh h3 ip -s link") and found[0].evidence["ranks"] == [4, 5]
    assert found[1].fix.startswith("ssh h1 tracepath -n h2")
    assert found[2].fix == ""
    run = CheckRun("nccl-test.mesh", "hosts and links", ("nccl",), Status.FAIL, tuple(found), 0.1)
    report = Report("0.1.0", "h1", RunContext("none", "test"), "2026-11-24T00:00:00.000Z", 0.1, (run,), "nccl-test")
    doc = load_report(render(report))
    assert [f["subject"] for f in doc["checks"][0]["findings"]] == ["h3", "h1 -> h2", "h[1-4]"]


# --- a slow link is measured twice -----------------------------------------------------------------

def _drive(n, speed):
    """Run the search; speed(pair, try) gives each try's GB/s (None: the pair fails)."""
    loc = Localiser([f"h{i}" for i in range(n)])
    tries: dict = {}
    while (pairs := loc.next_round()) is not None:
        for pair in pairs:
            tries[pair] = tries.get(pair, 0) + 1
            bw = speed(pair, tries[pair])
            loc.record(pair, bw is not None, bw)
    return loc, tries


def test_a_link_slow_on_one_try_only_is_measured_again_and_not_named():
    loc, tries = _drive(4, lambda pair, k: SLOW if pair == (0, 1) and k == 1 else HEALTHY)
    assert tries[(0, 1)] == 2
    assert loc.culprits() == []


def test_a_link_slow_on_both_tries_is_named_with_its_faster_try():
    loc, tries = _drive(4, lambda pair, k: (SLOW * k) if pair == (0, 1) else HEALTHY)
    assert tries[(0, 1)] == 2 and max(tries.values()) == 2
    [culprit] = loc.culprits()
    assert (culprit.kind, culprit.hosts) == (LINK, ("h0", "h1"))
    assert culprit.measured == SLOW * 2


def test_a_slow_link_failing_its_second_try_is_named_as_failing():
    loc, _ = _drive(4, lambda pair, k: (SLOW if k == 1 else None) if pair == (2, 3) else HEALTHY)
    [culprit] = loc.culprits()
    assert (culprit.kind, culprit.hosts) == (LINK, ("h2", "h3")) and " fails " in culprit.text
