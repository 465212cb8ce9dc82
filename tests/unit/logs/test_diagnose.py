import os

import pytest

from distdoctor.logs.analysis import analyse
from distdoctor.model import Status

from .stub_catalogue import STUB

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "logs")


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


def test_simulated_512_ranks_one_oom_folds_511_timeouts(tmp_path):
    """Simulation of scale (logic only): 64 nodes x 8 ranks, one OOM, 511 watchdog timeouts."""
    lines = [f"{r}: gpu{r // 8:03d}:{5000 + r}:{5000 + r} [{r % 8}] NCCL INFO comm 0x1 rank {r} nranks 512 cudaDev {r % 8} "
             f"busId 1000 - Init COMPLETE" for r in range(512)]
    lines.append("17: [2024-05-01 12:03:41,000] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB")
    lines += [f"{r}: [2024-05-01 12:13:4{r % 10},000] [Rank {r}] Watchdog caught collective operation timeout: "
              f"WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds" for r in range(512) if r != 17]
    root = _runs(tmp_path, "\n".join(lines) + "\n")["log.diagnosis"].findings[0]
    assert root.summary == ("rank 17 on gpu002 failed first: CUDA out of memory at 12:03:41; 511 ranks then hit "
                            "NCCL watchdog timeout in ALLREDUCE (0-16,18-511)")


def test_hang_found_in_a_big_log_read_block_by_block(tmp_path):
    lines = []
    for second in range(600):
        for r in range(8):
            if r == 6 and second > 200:
                continue
            lines.append(f"{r}: [2024-05-01 12:{second // 60:02d}:{second % 60:02d},000] gpu{r}:{70 + r}:1 [0] NCCL INFO "
                         f"AllReduce: opCount {second:x} count 1024 datatype 7 op 0 root 0 comm 0x5 [nranks=8]")
    path = tmp_path / "hang.out"
    path.write_text("\n".join(lines) + "\n")
    runs, _ok = analyse([str(path)], matcher=STUB, block=32 * 1024)
    f = {r.id: r for r in runs}["log.diagnosis"].findings[0]
    assert f.status == Status.WARN
    # the block's last lines are all the scanner looks at here: the time is right to one block
    assert f.summary.startswith("rank 6 stopped logging first (rank 6 on gpu6 at 12:03:")
    assert f.fix == "ssh gpu6 py-spy dump --pid 76"


def test_torchrun_log_folder_gives_each_file_its_rank(tmp_path):
    for rank in range(4):
        folder = tmp_path / "run" / "attempt_0" / str(rank)
        folder.mkdir(parents=True)
        text = ("RuntimeError: CUDA error: out of memory\n" if rank == 2
                else f"[Rank {rank}] Watchdog caught collective operation timeout\n")
        (folder / "stderr.log").write_text(text)
    runs, _ok = analyse([str(tmp_path / "run")], matcher=STUB)
    root = {r.id: r for r in runs}["log.diagnosis"].findings[0]
    assert root.summary.startswith("rank 2 failed first: CUDA out of memory")
    assert root.evidence["where"].endswith("attempt_0/2/stderr.log:1")


def test_mpirun_tag_output_transcript(tmp_path):
    text = ("[1,0]<stdout>:gpu6:1407:1595 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.6<0>\n"
            "[1,1]<stdout>:gpu7:4105:4372 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>\n"
            "[1,1]<stderr>:gpu7:4105:4372 [0] misc/socket.cc:484 NCCL WARN socketPollConnect: Connect to "
            "10.0.0.6<43211> returned 113(No route to host) errno 115(Operation now in progress)\n")
    root = _runs(tmp_path, text)["log.diagnosis"].findings[0]
    assert root.summary == ("rank 1 on gpu7 failed first: NCCL could not connect to a peer (the peer 10.0.0.6 is "
                            "rank 0 on gpu6)")


def test_secrets_in_the_evidence_line_are_redacted(tmp_path):
    root = _runs(tmp_path, "0: HF_TOKEN=hf_abcdef RuntimeError: CUDA out of memory\n")["log.diagnosis"].findings[0]
    assert "hf_abcdef" not in root.evidence["line"] and "HF_TOKEN=<redacted>" in root.evidence["line"]


def test_an_error_no_signature_knows_is_still_a_failure(tmp_path):
    text = ("0: step 1\n1: step 1\n1: [2024-05-01 12:00:05,000] Traceback (most recent call last):\n"
            "1:   File \"train.py\", line 3, in <module>\n"
            "1: [2024-05-01 12:00:05,000] ValueError: batch has 3 dims, expected 4\n")
    diag = _runs(tmp_path, text)["log.diagnosis"]
    f = diag.findings[0]
    assert f.status == Status.FAIL
    assert f.summary == ("rank 1 failed first with an error the catalogue does not know at 12:00:05: "
                         "ValueError: batch has 3 dims, expected 4")
    assert f.fix.startswith("# read the lines around ")


def test_a_lone_unknown_nccl_warn_is_a_warning(tmp_path):
    diag = _runs(tmp_path, "h:1:1 [0] misc/foo.cc:1 NCCL WARN something odd happened\n")["log.diagnosis"]
    assert diag.status == Status.WARN


def test_times_of_different_formats_compare(tmp_path):
    # glog's stamp has no year, python logging's ISO stamp has one: the OOM at 12:04 came first
    text = ("1: [E1124 12:06:00.000000 99 socket.cpp:1] Connect to 10.0.0.9<1> failed : No route to host\n"
            "0: 2024-11-24 12:04:00,000 ERROR RuntimeError: CUDA out of memory\n")
    diag = _runs(tmp_path, text)["log.diagnosis"]
    assert diag.findings[0].summary == "rank 0 failed first: CUDA out of memory at 12:04:00"
    assert diag.findings[1].summary.startswith("also: NCCL could not connect to a peer (rank 1 at 12:06:00)")


def test_hang_among_256_ranks_read_block_by_block_names_only_the_quiet_one(tmp_path):
    """Simulation of scale (logic only): the block tails sampled must see every live rank."""
    lines = [f"{r}: [2024-05-01 12:{s // 60:02d}:{s % 60:02d},000] step {s}" for s in range(120)
             for r in range(256) if not (r == 100 and s > 30)]
    path = tmp_path / "hang256.out"
    path.write_text("\n".join(lines) + "\n")
    runs, _ok = analyse([str(path)], matcher=STUB, block=256 * 1024)
    f = {r.id: r for r in runs}["log.diagnosis"].findings[0]
    # last heard from in the first block (every line read) or a block's tail: right to one block
    assert f.summary.startswith("rank 100 stopped logging first (rank 100 at 12:00:"), f.summary
    assert f.evidence["quiet_ranks"] == "100"


def test_a_bug_in_one_stage_is_an_error_finding_not_a_traceback(tmp_path, monkeypatch):
    from distdoctor.logs import nccl_setup

    def broken(_scan):
        raise KeyError("boom")

    monkeypatch.setattr(nccl_setup, "judge", broken)
    runs = _runs(tmp_path, "0: RuntimeError: CUDA out of memory\n")
    assert runs["log.nccl-setup"].status == Status.ERROR
    assert "KeyError" in runs["log.nccl-setup"].findings[0].summary
    assert runs["log.diagnosis"].status == Status.FAIL


def test_a_generic_root_yields_to_the_root_the_catalogue_says_explains_it(tmp_path):
    from distdoctor.logs import signatures

    text = ("0: h0:10:10 [0] NCCL INFO init.cc:1 -> 2\n"
            "0: h0:10:10 [0] enqueue.cc:1 NCCL WARN ... ncclSystemError: System call failed; unhandled system error\n"
            "1: h1:11:11 [0] misc/socket.cc:484 NCCL WARN socketPollConnect: Connect to 10.0.0.9<43211> returned "
            "113(No route to host) errno 115(Operation now in progress)\n")
    path = tmp_path / "slurm-2.out"
    path.write_text(text)
    matcher = signatures.matcher()
    assert matcher.match(text.splitlines()[1]).id == "nccl.unhandled-system-error"
    runs, _ok = analyse([str(path)], matcher=matcher)
    root = {r.id: r for r in runs}["log.diagnosis"].findings[0]
    assert root.subject == "nccl.socket-no-route"
    assert root.summary.startswith("rank 1 on h1 failed first: ")
    assert "nccl.unhandled-system-error" in root.evidence["consequences"]


@pytest.mark.parametrize("block", [None, 512])
def test_torchrun_root_cause_names_the_rank_that_died_silently(block):
    # recorded on this machine with real torchrun and gloo (tests/data/logs/torchrun/INDEX.md)
    path = os.path.join(os.path.dirname(__file__), "..", "..", "data", "logs", "torchrun", "sigkill-rank1.log")
    runs, _ok = analyse([path], matcher=STUB, block=block)
    f = {r.id: r for r in runs}["log.diagnosis"].findings[0]
    assert f.status == Status.FAIL
    assert f.summary == "rank 1 on localhost failed first (exit code -9 (SIGKILL), as torchrun reports)"
    # torchrun names the node `localhost` on one machine: `ssh localhost` pasted on the
    # operator's machine would look at the wrong kernel log, so the command is a comment.
    assert f.fix.splitlines()[1] == "# dmesg -T | grep -i -E 'killed process|out of memory'"
    assert f.evidence["traceback"].startswith("Signal 9 (SIGKILL) received by PID ")


@pytest.mark.parametrize("host, command", [
    ("gpu007", "ssh gpu007 dmesg -T | grep -i -E 'killed process|out of memory'"),
    ("127.0.0.1", "# dmesg -T | grep -i -E 'killed process|out of memory'"),
    ("gpu1$(reboot)", "# dmesg -T | grep -i -E 'killed process|out of memory'"),
])
def test_torchrun_root_cause_fix_goes_to_the_node_only_when_it_is_one(tmp_path, host, command):
    path = os.path.join(os.path.dirname(__file__), "..", "..", "data", "logs", "torchrun", "sigkill-rank1.log")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    assert "localhost" in text
    copy = tmp_path / "sigkill.log"
    copy.write_text(text.replace("localhost", host))
    runs, _ok = analyse([str(copy)], matcher=STUB)
    f = {r.id: r for r in runs}["log.diagnosis"].findings[0]
    assert f.fix.splitlines()[1] == command


def _real(tmp_path, text, name="slurm-3.out"):
    from distdoctor.logs import signatures

    path = tmp_path / name
    path.write_text(text)
    runs, _ok = analyse([str(path)], matcher=signatures.matcher())
    return {r.id: r for r in runs}["log.diagnosis"]


@pytest.mark.parametrize("text, root, rank, folded", [
    # the generic summary printed first by one rank yields to the cause another rank names
    ("1: [2024-05-01 12:00:05,000] torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/"
     "distributed/c10d/ProcessGroupNCCL.cpp:1727, invalid usage (run with NCCL_DEBUG=WARN for details), "
     "NCCL version 2.19.3\n"
     "3: [2024-05-01 12:00:06,000] gpu2:51:61 [1] init.cc:904 NCCL WARN Duplicate GPU detected : rank 3 and rank 1 "
     "both on CUDA device 1000\n",
     "nccl.duplicate-gpu", 3, "nccl.invalid-usage"),
    ("0: n1:10:20 [0] bootstrap.cc:77 NCCL WARN Message truncated : received 256 bytes instead of 4\n"
     "0: RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:825, internal error, NCCL version 2.19.3\n"
     "0: ncclInternalError: Internal check failed. This is either a bug in NCCL or due to memory corruption\n",
     "nccl.bootstrap-message-truncated", 0, "nccl.internal-error"),
    ("2: n2:10:10 [1] init.cc:204 NCCL WARN Cuda failure 'an illegal memory access was encountered'\n"
     "2: RuntimeError: NCCL Error 1: unhandled cuda error\n"
     "0: [rank0]:[E501 12:10:05.5 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600041 milliseconds before timing out.\n",
     "cuda.illegal-memory-access", 2, "nccl.unhandled-cuda-error"),
    ("1: [E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying to connect to 10.1.0.5:29400\n"
     "1: torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
     "failed. See inner exception for details.\n",
     "torch.store-connect-timeout", 1, "torch.rendezvous-connection-error"),
    ("1: lzm-h200-10:74737:75914 [1] transport/net_socket.cc:488 NCCL WARN NET/Socket : peer 10.0.5.194<41988> "
     "message truncated : receiving 4 bytes instead of 2.\n"
     "1: lzm-h200-10:74737:74737 [1] init.cc:290 NCCL WARN Attempt to use communicator before the previous operation "
     "returned ncclSuccess\n",
     "nccl.size-mismatch", 1, "nccl.comm-used-after-error"),
    ("0: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
     "1: torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n",
     "cuda.out-of-memory", 0, "torch.rendezvous-closed"),
])
def test_a_specific_cause_wins_over_the_summary_it_explains(tmp_path, text, root, rank, folded):
    diag = _real(tmp_path, text)
    first = diag.findings[0]
    assert (first.subject, first.evidence["rank"]) == (root, rank)
    assert folded in first.evidence["consequences"]


def test_a_generic_summary_alone_is_still_the_cause(tmp_path):
    diag = _real(tmp_path, "0: [rank0]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n")
    assert diag.status == Status.FAIL
    assert diag.findings[0].subject == "nccl.invalid-usage"
    assert diag.findings[0].fix.splitlines()[0] == "export NCCL_DEBUG=WARN"


def test_heartbeat_timeouts_alone_say_the_cause_is_not_in_the_log(tmp_path):
    text = "".join(
        f"{r}: [rank{r}]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank {r}] Heartbeat monitor timed out! Process will be "
        f"terminated after dumping debug info. workMetaList_.size()=103\n" for r in range(3))
    diag = _real(tmp_path, text)
    assert diag.status == Status.FAIL
    assert diag.findings[0].subject == "torch.heartbeat-monitor-timeout"
    assert "3 ranks (0-2)" in diag.findings[0].summary
    assert "the log does not show what failed first" in diag.findings[0].summary


def test_an_unstamped_line_keeps_its_place_before_the_stamped_error_after_it(tmp_path):
    # NCCL's own lines carry no clock; a logging line after them does (transformers#11658's
    # shape). The unstamped failure came first in the file and must still lead.
    from distdoctor.logs import signatures

    text = ("node1:97:183 [0] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
            "node1:97:183 [0] NCCL INFO init.cc:766 -> 1\n"
            "2021-05-10 10:56:59 ERROR    __main__   RuntimeError: CUDA error: an illegal memory access was "
            "encountered\n")
    path = tmp_path / "mixed.log"
    path.write_text(text)
    matcher = signatures.matcher()
    assert matcher.match("NCCL WARN Cuda failure 'out of memory'").id == "cuda.out-of-memory"
    runs, _ok = analyse([str(path)], matcher=matcher)
    diag = {r.id: r for r in runs}["log.diagnosis"]
    assert diag.findings[0].subject == "cuda.out-of-memory", diag.findings[0].summary
    assert diag.findings[0].evidence["where"].endswith("mixed.log:1")
    # the stated clock is not invented for the unstamped line
    assert " at 10:56:59" not in diag.findings[0].summary


@pytest.mark.parametrize("use_grep", [True, False], ids=["grep", "python"])
def test_lines_of_several_large_inputs_are_numbered_and_counted_without_the_reader(tmp_path, use_grep):
    # grep's sentinel after each block numbers the lines (the reader counts none of them):
    # the right line in the right file, and every line counted once
    chatter = "".join(f"{r}: gpu1:{100 + r}:1 [0] NCCL INFO AllReduce: opCount {i:x} count 1024 datatype 7\n"
                      for i in range(700) for r in range(4))
    (tmp_path / "a.log").write_text(chatter)
    (tmp_path / "b.log").write_text(chatter + "2: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\n"
                                    + chatter)
    runs, _ok = analyse([str(tmp_path)], matcher=STUB, block=16 * 1024, use_grep=use_grep)
    by_id = {r.id: r for r in runs}
    root = by_id["log.diagnosis"].findings[0]
    assert root.evidence["where"] == f"{tmp_path / 'b.log'}:{2800 + 1}"
    read = next(f for f in by_id["log.input"].findings if f.summary.startswith("read "))
    assert read.evidence["lines"] == 2800 * 3 + 1
