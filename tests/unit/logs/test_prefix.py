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


@pytest.mark.parametrize("line, rank", [
    # one torchrun per node under srun --label: the label is the node's task, torch states the rank
    ("1: [rank3]:[E1124 12:03:41.123456 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught", 3),
    ("1: [E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout", 3),
    ("1: node2:77:77 [3] NCCL INFO comm 0x1 rank 3 nranks 4 cudaDev 3 busId 3000 - Init COMPLETE", 3),
    ("[1,0]<stderr>:[rank5]: RuntimeError: x", 5),
    # torch's own global-rank prefix wins over the group rank c10d prints in a subgroup's message
    ("2025-02-18 12:54 [rank13]:[E218 04:54:22.864467604 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog", 13),
    ("3: plain text", 3),
])
def test_the_rank_a_message_states_wins_over_the_launcher_label(line, rank):
    assert split(line).rank == rank


@pytest.mark.parametrize("line, body, fields", [
    ("Fri Sep 25 16:52:53 2020[1]<stderr>:2020-09-25 16:52:53.640992: W tensorflow/core/framework/op_kernel.cc:1651] "
     "OP_REQUIRES failed", "OP_REQUIRES failed", {"rank": 1, "level": "W"}),
    ("(RayWorkerWrapper pid=92234, ip=172.19.24.110) mlx5: got completion with error:",
     "mlx5: got completion with error:", {"pid": 92234, "host": "172.19.24.110"}),
    ("(pid=2417663, ip=10.105.145.150) *** SIGSEGV (@0x88)", "*** SIGSEGV (@0x88)", {"pid": 2417663}),
    ("(VllmWorker rank=1 pid=496819) ERROR 05-27 23:44:35 [multiproc_executor.py:522] x", "x",
     {"rank": 1, "pid": 496819, "time_text": "23:44:35"}),
    ("(VllmWorkerProcess pid=134370) ERROR 07-24 04:24:50 multiproc_worker_utils.py:226] RuntimeError: CUDA error",
     "RuntimeError: CUDA error", {"pid": 134370}),
    ("\x1b[33m(raylet)\x1b[0m A worker died", "A worker died", {}),
    # vllm-project/vllm#22746: the escape pasted in caret notation
    ("^[[1;36m(VllmWorker rank=1 pid=13550)^[[0;0m INFO 08-12 08:45:18 [gpu_model_runner.py:2485] Graph capturing "
     "finished in 9 secs, took 1.30 GiB", "Graph capturing finished in 9 secs, took 1.30 GiB",
     {"rank": 1, "pid": 13550, "time_text": "08:45:18"}),
    ("trainer_1  | node1:1:1 [0] NCCL INFO x", "NCCL INFO x", {"host": "trainer_1"}),
    ("[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog", "[Rank 0] Watchdog",
     {"rank": 0, "level": "E"}),
    ("dinov2.cn-d004 [stderr] [rank14]:[E909 09:55:29.3 ProcessGroupNCCL.cpp:607] x", "x",
     {"rank": 14, "host": "dinov2.cn-d004"}),
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0",
     "failed (exitcode: 1) local_rank: 0", {"level": "E"}),
    ("[2024-05-08 08:47:31,877] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1)",
     "failed (exitcode: 1)", {"time_text": "08:47:31"}),
    # a launcher's `[N] ` rank label in front of NCCL's prefix (NVIDIA/nccl#302; NVIDIA/nccl#1241-like)
    ("[155] crow-ib-new-nccl-256-info-19:5330:7970 [3] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed",
     "misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed",
     {"rank": 155, "host": "crow-ib-new-nccl-256-info-19", "pid": 5330, "device": 3}),
    ("[3] gpu7:4105:4372 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>", "NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>",
     {"rank": 3, "host": "gpu7"}),
    # ...but not in front of plain text, where it may be a viewer's or a list's number
    ("[12] some text", "[12] some text", {"rank": None}),
    # UCX's epoch clock and its older `[host:pid :thread]` (openucx/ucx#1880, #2973)
    ("Sun Oct  1 17:01:10 2017[1,30]<stdout>:[1506866470.744682] [clx-hercules-065:1411 :0]       dc_verbs.c:633  "
     "UCX  ERROR Send completion with error on qp 0x10e55: transport retry counter exceeded syndrome 0x81",
     "dc_verbs.c:633  UCX  ERROR Send completion with error on qp 0x10e55: transport retry counter exceeded syndrome 0x81",
     {"rank": 30, "host": "clx-hercules-065", "pid": 1411, "time_text": "14:01:10"}),
    ("[1590058386.423477] [gpu01:30471:0:30471] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB",
     "ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB",
     {"host": "gpu01", "pid": 30471, "time": (2020, 5, 21, 10 * 3600 + 53 * 60 + 6.423477)}),
])
def test_split_more_launchers(line, body, fields):
    got = split(line)
    assert got.body == body
    for key, value in fields.items():
        assert getattr(got, key) == value, key


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


def test_the_first_character_dispatch_splits_every_real_line_as_the_full_loop_does():
    import glob
    import os

    from tests.conftest import data_path

    checked = 0
    for path in glob.glob(os.path.join(data_path(), "**", "*"), recursive=True):
        if not os.path.isfile(path) or path.endswith((".json", ".py", ".gz", ".bz2", ".xz")):
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                assert split(line) == split(line, dispatch=False), (path, line)
                checked += 1
    assert checked > 10_000
