"""nccl-test's roll (the one key every rank appends its sealed fingerprint to) read by rank 0
after a stranger appended floods to it: the real ranks are found, the stranger is named, and
reading stays bounded in time whatever was appended."""

from __future__ import annotations

import time

from distdoctor.nccltest import store


def fp(rank: int, world: int = 2) -> dict:
    return {"rank": rank, "world_size": world, "host": f"h{rank}", "pid": 100 + rank}


def test_a_flood_of_short_lines_before_the_ranks_costs_one_pass_and_is_named():
    flood = b"x\n" * 4_000_000  # 8 MB of what a stranger appended first
    raw = flood + b"".join(store.roll_line("tok", fp(r)).encode() for r in range(2))
    start = time.monotonic()
    roll = store.read_roll("tok", raw, 2)
    took = time.monotonic() - start
    assert sorted(roll.fps) == [0, 1]
    assert roll.foreign and "not distdoctor values" in roll.foreign[0]
    assert took < 5, took


def test_a_flood_of_sealed_looking_lines_is_cut_at_a_bound_and_named():
    fake = store.seal("stranger", store.ROLL, fp(1)).encode() + b"\n"
    raw = store.roll_line("tok", fp(0)).encode() + fake * 200_000
    start = time.monotonic()
    roll = store.read_roll("tok", raw, 2)
    assert time.monotonic() - start < 5
    assert sorted(roll.fps) == [0]
    assert any("was not read" in why for why in roll.foreign)
    assert len(roll.foreign) <= 4 * 2 + store.MAX_EXTRA_LINES + 2


def test_an_ordinary_roll_names_each_strangers_line():
    raw = (store.roll_line("tok", fp(0)) + "junk\n" + store.roll_line("tok", fp(1))).encode()
    roll = store.read_roll("tok", raw, 2)
    assert sorted(roll.fps) == [0, 1] and roll.foreign == ["not a distdoctor value (JSONDecodeError)"]
