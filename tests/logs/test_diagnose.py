import os

import pytest

from distdoctor.logs.command import analyse
from distdoctor.model import Status

from .stub_catalogue import STUB

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "logs")


def _runs(tmp_path, text, name="slurm-1.out", **kw):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    runs, _ok = analyse([str(tmp_path)], matcher=STUB, **kw)
    return {r.id: r for r in runs}


def _job(ranks=8, oom_rank=5, hosts=("gpu041", "gpu042")):
    lines = []
    per_host = ranks // len(hosts)
    for r in range(ranks):
        host = hosts[r // per_host]
        lines.append(f"{r}: {host}:{1000 + r}:{1000 + r} [{r % per_host}] NCCL INFO comm 0xabc rank {r} nranks {ranks} "
                     f"cudaDev {r % per_host} busId 1000 - Init COMPLETE")
    for r in range(ranks):
        lines.append(f"{r}: [2024-05-01 12:03:0{r % 10},000] step 10 loss 1.0")
    lines.append(f"{oom_rank}: [2024-05-01 12:03:41,120] RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
    for r in range(ranks):
        if r != oom_rank:
            lines.append(f"{r}: [2024-05-01 12:13:41,500] [E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught "
                         f"collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, Timeout(ms)=600000) "
                         f"ran for 600012 milliseconds before timing out.")
    return "\n".join(lines) + "\n"


def test_root_cause_rank_host_time_and_folded_consequences(tmp_path):
    runs = _runs(tmp_path, _job())
    diag = runs["log.diagnosis"]
    assert diag.status == Status.FAIL
    root = diag.findings[0]
    assert root.summary.startswith("rank 5 on gpu042 failed first: CUDA out of memory at 12:03:41")
    assert "7 ranks then hit NCCL watchdog timeout in ALLREDUCE (0-4,6-7)" in root.summary
    assert root.fix.splitlines() == ["ssh gpu042 nvidia-smi", "# lower the batch size of rank 5"]
    assert root.evidence["where"].endswith("slurm-1.out:17")
    assert len(diag.findings) == 1  # the timeouts are folded, not listed


def test_earliest_root_wins_by_time_not_by_file_order(tmp_path):
    text = ("1: [2024-05-01 12:05:00,000] gpu2:7:7 [1] misc/socket.cc:533 NCCL WARN socketPollConnect: "
            "Connect to 10.0.0.4<56849> returned 113(No route to host) errno 115\n"
            "0: [2024-05-01 12:04:00,000] RuntimeError: CUDA error: out of memory\n")
    diag = _runs(tmp_path, text)["log.diagnosis"]
    assert diag.findings[0].summary.startswith("rank 0 failed first: CUDA out of memory at 12:04:00")
    assert diag.findings[1].status == Status.WARN and "after the first failure" in diag.findings[1].summary
    assert diag.findings[1].fix.splitlines()[0] == "ssh gpu2 ip route"


def test_unknown_host_never_printed_as_a_command(tmp_path):
    diag = _runs(tmp_path, "RuntimeError: CUDA out of memory\n")["log.diagnosis"]
    first = diag.findings[0].fix.splitlines()[0]
    assert first.startswith("# ") and "{host}" not in first


def test_consequences_without_a_cause(tmp_path):
    text = "".join(f"{r}: [Rank {r}] Watchdog caught collective operation timeout: OpType=ALLREDUCE\n" for r in range(4))
    diag = _runs(tmp_path, text)["log.diagnosis"]
    assert diag.status == Status.FAIL
    assert "4 ranks (0-3): NCCL watchdog timeout, and the log does not show what failed first" in diag.findings[0].summary


def test_hang_without_error_names_the_quiet_ranks(tmp_path):
    lines = []
    for minute in range(10):
        for r in range(4):
            if r == 2 and minute > 3:
                continue
            lines.append(f"{r}: [2024-05-01 12:{minute:02d}:00,000] gpu{r}:{50 + r}:1 [0] NCCL INFO step {minute}")
    diag = _runs(tmp_path, "\n".join(lines) + "\n")["log.diagnosis"]
    f = diag.findings[0]
    assert f.status == Status.WARN
    assert f.summary.startswith("rank 2 stopped logging first (rank 2 on gpu2 at 12:03:00, 360 s before")
    assert f.fix == "ssh gpu2 py-spy dump --pid 52"


def test_clean_log_is_ok(tmp_path):
    runs = _runs(tmp_path, "0: training started\n0: step 1\n")
    assert runs["log.diagnosis"].status == Status.OK


@pytest.mark.parametrize("block", [64 * 1024, 1024 * 1024])
@pytest.mark.parametrize("use_grep", [True, False], ids=["grep", "python"])
def test_sparse_path_finds_the_same_root(tmp_path, block, use_grep):
    # a big log read block by block through the prefilter gives the same answer as a small one
    chatter = "".join(f"{r}: [2024-05-01 11:00:00,000] gpu04{1 + r // 4}:{1000 + r}:1 [0] NCCL INFO AllReduce: opCount {i:x} "
                      f"sendbuff 0x7f count 1024 datatype 7 op 0 root 0 comm 0x5 [nranks=8] stream 0x9\n"
                      for i in range(2000) for r in range(8))
    text = _job()
    path = tmp_path / "big.out"
    path.write_text(chatter + text)
    runs, _ok = analyse([str(path)], matcher=STUB, block=block, use_grep=use_grep)
    root = {r.id: r for r in runs}["log.diagnosis"].findings[0]
    assert root.summary.startswith("rank 5 on gpu042 failed first: CUDA out of memory at 12:03:41; 7 ranks")
    assert root.evidence["where"] == f"{path}:{16000 + 17}"
