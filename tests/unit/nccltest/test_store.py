"""Sealing what ranks publish, and reading the roll: pure logic, every kind of bad line."""

import json

import pytest

from distdoctor.nccltest import store


def fp(rank, world=4, host="h", pid=1):
    return {"rank": rank, "world_size": world, "host": host, "pid": pid}


def test_a_sealed_value_opens_only_with_the_token_and_the_key():
    sealed = store.seal("tok", "res/1", {"ops": []})
    assert store.unseal("tok", "res/1", sealed) == {"ops": []}
    with pytest.raises(store.Unsealed, match="another job's token"):
        store.unseal("other", "res/1", sealed)
    with pytest.raises(store.Unsealed):  # copied under another rank's key
        store.unseal("tok", "res/2", sealed)
    for junk in (b"", b"\xff\xfe", b"{}", b"[1,2]", b'{"v": 1, "mac": 2}', "x" * 200_000, '{"v": "{", "mac": ""}'):
        with pytest.raises(store.Unsealed):
            store.unseal("tok", "res/1", junk)


def test_the_token_comes_from_the_environment_or_the_job():
    assert store.job_token({"DISTDOCTOR_JOB_TOKEN": "s3cret"}, "a", 1) == ("s3cret", "DISTDOCTOR_JOB_TOKEN from "
                                                                                       "the environment")
    one, _ = store.job_token({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, "node1", 20001)
    assert one == store.job_token({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, "node1", 20001)[0]
    assert one != store.job_token({"SLURM_JOB_ID": "8", "SLURM_STEP_ID": "0"}, "node1", 20001)[0]


def test_the_roll_names_duplicates_other_worlds_and_strangers():
    lines = [store.roll_line("tok", fp(r, host=f"h{r}", pid=100 + r)) for r in range(3)]
    lines.append(store.roll_line("tok", fp(1, host="h9", pid=999)))  # a second rank 1
    lines.append(store.roll_line("tok", fp(5, world=6, host="h5")))  # a rank of a bigger job
    lines.append(store.roll_line("other", fp(3, host="evil", pid=666)))  # another job's rank 3
    lines.append("garbage without a newline")
    lines.append("\n" + "y" * (store.MAX_LINE + 1) + "\n")
    roll = store.read_roll("tok", "".join(lines).encode(), 4)
    assert sorted(roll.fps) == [0, 1, 2] and roll.fps[1]["host"] == "h1"
    assert [f["pid"] for f in roll.duplicates[1]] == [101, 999]
    assert [(f["rank"], f["world_size"]) for f in roll.other_world] == [(5, 6)]
    assert len(roll.foreign) == 3 and "another job's token" in roll.foreign[0]
    assert roll.foreign_hints == [{"host": "evil", "pid": 666, "rank": 3, "world_size": 4}]


def test_a_sealed_line_without_the_fields_is_foreign():
    roll = store.read_roll("tok", store.roll_line("tok", {"rank": "0", "host": 1}).encode(), 2)
    assert roll.fps == {} and roll.foreign == ["a sealed value without rank, world_size and host"]
    assert json.loads(store.seal("t", "k", 1))["v"] == "1"


def test_the_store_listens_on_one_address_only():
    sock = store.listen("127.0.0.1", 0)
    try:
        assert sock.getsockname()[0] == "127.0.0.1"
        with pytest.raises(OSError):
            store.listen("127.0.0.1", sock.getsockname()[1]).close()
    finally:
        sock.close()
