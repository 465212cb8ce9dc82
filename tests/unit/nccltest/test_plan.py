"""Mesh planning: which host pairs are probed, and in which rounds (pure logic)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distdoctor.nccltest.plan import (
    btree_parent,
    coverage,
    mesh_pairs,
    schedule,
    tree_edges,
)


def test_full_is_every_ordered_pair():
    assert mesh_pairs(3, "full") == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert len(mesh_pairs(100, "full")) == 100 * 99


def test_auto_is_full_up_to_the_threshold_and_sparse_above():
    assert mesh_pairs(32) == mesh_pairs(32, "full")
    assert len(mesh_pairs(33)) < 33 * 32 // 4
    assert mesh_pairs(10, threshold=4) != mesh_pairs(10, "full")


def test_no_pairs_without_two_hosts():
    assert mesh_pairs(0) == [] and mesh_pairs(1) == [] and mesh_pairs(1, "full") == []


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mesh mode 'some'"):
        mesh_pairs(4, "some")


def test_auto_holds_the_ring_and_both_trees():
    n = 100
    pairs = set(mesh_pairs(n))
    for i in range(n):
        assert (i, (i + 1) % n) in pairs and ((i + 1) % n, i) in pairs
    for child, parent in tree_edges(n):
        assert (child, parent) in pairs and (parent, child) in pairs


def test_btree_matches_nccls_picture():
    # NVIDIA/nccl src/graph/trees.cc draws the tree over 14 ranks:
    # 0-8; 8->4,12; 4->2,6; 12->10,13; 2->1,3; 6->5,7; 10->9,11
    parents = {r: btree_parent(14, r) for r in range(14)}
    assert parents == {0: -1, 8: 0, 4: 8, 12: 8, 2: 4, 6: 4, 10: 12, 13: 12,
                       1: 2, 3: 2, 5: 6, 7: 6, 9: 10, 11: 10}


def test_second_tree_is_mirrored_for_even_and_shifted_for_odd():
    even = tree_edges(8)
    assert (7 - 4, 7 - 0) in even  # mirror of 4 -> 0
    odd = tree_edges(7)
    assert (5, 1) in odd            # shift of 4 -> 0


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 400), seed=st.integers(0, 2**16))
def test_auto_tests_every_host_as_sender_and_receiver_several_times(n, seed):
    pairs = mesh_pairs(n, seed=seed)
    assert len(pairs) == len(set(pairs))
    assert all(a != b and 0 <= a < n and 0 <= b < n for a, b in pairs)
    sends, receives = coverage(pairs)
    assert len(sends) == n and len(receives) == n
    assert min(sends.values()) >= min(2, n - 1) and min(receives.values()) >= min(2, n - 1)
    if n > 32:
        assert min(sends.values()) >= 4 and min(receives.values()) >= 4
        assert len(pairs) <= 14 * n  # linear in the hosts, never quadratic


def test_auto_is_deterministic_per_seed():
    assert mesh_pairs(500, seed=3) == mesh_pairs(500, seed=3)
    assert mesh_pairs(500, seed=3) != mesh_pairs(500, seed=4)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 300), parallel=st.integers(1, 200), seed=st.integers(0, 99))
def test_schedule_rounds_are_disjoint_bounded_and_complete(n, parallel, seed):
    pairs = mesh_pairs(n, threshold=20, seed=seed)
    rounds = schedule(pairs, parallel)
    flat = [p for r in rounds for p in r]
    assert sorted(flat) == sorted(pairs)
    for r in rounds:
        assert 1 <= len(r) <= parallel
        hosts = [h for p in r for h in p]
        assert len(hosts) == len(set(hosts))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 60), parallel=st.integers(1, 40), keep=st.floats(0.2, 1.0), seed=st.integers(0, 99))
def test_schedule_of_dense_lists_and_full_meshes(n, parallel, keep, seed):
    import random

    rng = random.Random(seed)
    pairs = [p for p in mesh_pairs(n, "full") if rng.random() < keep]
    rounds = schedule(pairs, parallel)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    for r in rounds:
        hosts = [h for p in r for h in p]
        assert len(r) <= parallel and len(hosts) == len(set(hosts))
    if keep == 1.0 and n % 2 == 0 and 2 * parallel >= n:
        assert len(rounds) == 2 * (n - 1)


def test_schedule_is_at_the_bound_when_parallel_binds():
    for n, mode, parallel, slack in ((32, "full", 7, 0), (8, "full", 1, 0), (512, "auto", 7, 0),
                                     (4096, "auto", 100, 1)):
        pairs = mesh_pairs(n, mode)
        assert -(-len(pairs) // parallel) <= len(schedule(pairs, parallel)) <= -(-len(pairs) // parallel) + slack


def test_schedule_is_close_to_the_lower_bound():
    # a host takes part in 2(n-1) pairs of a full mesh: that many rounds at least
    assert len(schedule(mesh_pairs(32, "full"), 1000)) == 62
    pairs = mesh_pairs(4096, seed=0)
    degree: dict[int, int] = {}
    for a, b in pairs:
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1
    assert len(schedule(pairs, 4096)) <= max(degree.values()) + 4
    assert len(schedule(mesh_pairs(8, "full"), 1)) == 56


def test_schedule_drops_self_pairs_and_duplicates_and_refuses_zero_parallel():
    assert schedule([(0, 1), (0, 1), (2, 2)], 4) == [[(0, 1)]]
    with pytest.raises(ValueError):
        schedule([(0, 1)], 0)
