import pytest

from distdoctor.logs.prefix import local_rank_from_path, rank_from_path, split


@pytest.mark.parametrize("line, body, fields", [
    ("12: [1,12]<stderr>:[rank12]:[E1124 12:03:41.123456 1234 ProcessGroupNCCL.cpp:616] [Rank 12] Watchdog caught",
     "[Rank 12] Watchdog caught", {"rank": 12, "pid": 1234, "level": "E", "time_text": "12:03:41"}),
    ("node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect",
     "misc/socket.cc:533 NCCL WARN socketPollConnect: Connect", {"host": "node5", "pid": 240, "device": 6}),
    ("e66aa18dc444:3171:3171 [0] include/socket.h:311 WARN Socket creation failed",
     "include/socket.h:311 WARN Socket creation failed", {"host": "e66aa18dc444", "pid": 3171}),
    ("2024-01-02 12:03:41,123 - root - INFO - hi", "root - INFO - hi", {"time": (2024, 1, 2, 43421.123)}),
    ("Nov 24 12:03:41 gpu042 kernel: NVRM: Xid (PCI:0000:3b:00): 79", "NVRM: Xid (PCI:0000:3b:00): 79",
     {"host": "gpu042", "time": (0, 11, 24, 43421.0)}),
    ("> 3: 2024-01-02T12:03:41.5Z gpu1:1:2 [0] NCCL INFO rank 3 nranks 8", "NCCL INFO rank 3 nranks 8",
     {"rank": 3, "host": "gpu1", "pid": 1}),
    ("  17 | [12:03:41] bar", "bar", {"time_text": "12:03:41", "rank": None}),
    ("[default3]:RuntimeError: x", "RuntimeError: x", {"local_rank": 3, "rank": None}),
    ("[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog", "[Rank 3] Watchdog", {"rank": 3, "level": "E"}),
    ("[1,0]<stdout>:gpu6:1407:1595 [0] NCCL INFO NET/IB : Using", "NCCL INFO NET/IB : Using",
     {"rank": 0, "host": "gpu6", "pid": 1407}),
    ("NCCL version 2.3.7+cuda9.0", "NCCL version 2.3.7+cuda9.0", {"host": "", "rank": None}),
    ("    indented text", "indented text", {}),
    ("", "", {}),
    ("srun: error: node2: task 1: Killed", "srun: error: node2: task 1: Killed", {"host": "node2", "rank": 1}),
    ("srun: error: gpu[01]: tasks 4-7: Exited with exit code 1", "srun: error: gpu[01]: tasks 4-7: Exited with exit code 1",
     {"rank": None}),
    ("slurmstepd: error: *** STEP 3.0 ON node1 CANCELLED AT 2024-05-01T12:00:00 ***",
     "slurmstepd: error: *** STEP 3.0 ON node1 CANCELLED AT 2024-05-01T12:00:00 ***", {"host": "node1"}),
])
def test_split(line, body, fields):
    got = split(line)
    assert got.body == body
    for key, value in fields.items():
        assert getattr(got, key) == value, key


def test_srun_label_wins_over_body_rank():
    # the label is who printed the line; "[Rank 5]" in the text may name a peer
    assert split("3: [Rank 5] saw an error").rank == 3


@pytest.mark.parametrize("path, rank, local_rank", [
    ("logs/none/attempt_0/3/stderr.log", None, 3),
    ("/x/torchelastic_ab/run_1/attempt_2/15/stdout.log", None, 15),
    ("out/rank7.log", 7, None),
    ("out/train_rank_12.txt", 12, None),
    ("slurm-1234.out", None, None),
])
def test_ranks_from_paths(path, rank, local_rank):
    assert rank_from_path(path) == rank
    assert local_rank_from_path(path) == local_rank
