"""A failed job never reads as clean: the exit, death and crash markers (distdoctor/logs/exits.toml)
and the "failed, cause not in the catalogue" finding built from them."""

import pytest

from distdoctor.logs import outcome
from distdoctor.logs.analysis import analyse
from distdoctor.model import Status


_XLA_STUCK = ("2024-07-29 17:14:59.920189: E external/xla/xla/service/rendezvous.cc:38] This thread has been waiting "
              "for `initialize clique for rank {r}; clique=devices=[0,1]; stream=0; run_id=7` for 10 seconds and may "
              "be stuck.\n")
_XLA_UNSTUCK = ("2024-07-29 17:15:21.102311: E external/xla/xla/service/rendezvous.cc:44] Thread is unstuck! Warning "
                "above was a false-positive. Perhaps the timeout is too short.\n")


def _lead(tmp_path, text, name="job.log"):
    path = tmp_path / name
    path.write_text(text)
    runs, _ok = analyse([str(path)], use_grep=False)
    return next(r for r in runs if r.id == "log.diagnosis").findings[0]


@pytest.mark.parametrize("text, rank, host, quoted", [
    ("step 10 loss 1.2\nsrun: error: gpu042: task 3: Exited with exit code 1\n", 3, "gpu042", "Exited with exit code 1"),
    ("step 1\n\n  Process name: [[12167,1],10]\n  Exit code:    3\n", 10, "", "Process name"),
    ("● slurmd.service - Slurm node daemon\n     Loaded: loaded (/lib/systemd/system/slurmd.service; enabled)\n"
     "     Active: failed (Result: exit-code) since Tue 2024-01-02 10:00:00 UTC; 5s ago\n", None, "", "Active: failed"),
    ("[1,2]<stderr>:Horovod has been shut down. This was caused by an exception on one of the ranks\n", 2, "",
     "Horovod has been shut down"),
    ("(pid=81332)   File \"worker.py\", line 423, in sigterm_handler\n(pid=81332)     sys.exit(1)\n"
     "(pid=81332) SystemExit: 1\n", None, "", "SystemExit: 1"),
    ("[ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'main.py', '--local_rank=5'] exits with return code = 1\n",
     5, "", "exits with return code = 1"),
    # Open MPI's signal handler, a component's own error line, PMIx, Slurm's PMIx plugin, and
    # the DeepSpeed launcher killing its workers (a paste cut before the return code)
    ("[gpu01:193313] *** Process received signal ***\n[gpu01:193313] Signal: Aborted (6)\n", None, "gpu01",
     "Process received signal"),
    ("[a1:14245] pml_ucx.c:285  Error: UCP worker does not support MPI_THREAD_MULTIPLE\n", None, "a1",
     "UCP worker does not support"),
    ("[n1:1] [prun.c:809] PMIx Error: UNREACHABLE\n", None, "n1", "PMIx Error: UNREACHABLE"),
    ("slurmstepd: error:  mpi/pmix_v3: pmixp_coll_ring_reset_if_to: n1 [0]: pmixp_coll_ring.c:742: 0x1: "
     "collective timeout seq=0\n", None, "", "collective timeout"),
    ("[2023-09-10 11:45:59,501] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 6294\n", None, "",
     "Killing subprocess"),
    ("epoch 40\nsrun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n", None, "", "Job step aborted"),
    ('[ RUN      ] IbTest.SimpleSendRecv\nunknown file: Failure\n'
     'C++ exception with description "bad alloc" thrown in the test body.\n', None, "", "thrown in the test body"),
    # the fifth round: bash's report of a killed child, MPICH's PMI abort naming the rank, Intel
    # MPI's report naming its rank ahead of a test runner's "3: " label, Hydra's error stack,
    # NCCL's trail of return codes with no WARN, JAX's gRPC refusal, and a traceback that follows
    # a report Python ignored (the ignored one does not count; the next one does)
    ("/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py --epochs 400\n",
     None, "", "8156 Killed"),
    ("[cli_71]: aborting job:\nFatal error in PMPI_Init_thread:\nOther MPI error\n", 71, "", "aborting job"),
    ("3: Abort(1091215) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init: Other MPI error, error stack:\n"
     "3: MPIR_Init_thread(136)........:\n", 0, "", "rank 0 in comm 0"),
    ("[mpiexec@n1] HYDT_bsci_init (./tools/bootstrap/src/bsci_init.c:152): launcher init returned error\n", None, "",
     "launcher init returned error"),
    ("nd1:191191:219889 [0] NCCL INFO misc/socket.cc:564 -> 2\nnd1:191191:191191 [0] NCCL INFO group.cc:422 -> 2\n",
     None, "nd1", "group.cc:422 -> 2"),
    ("[rank3] WatchTasksAsync failed for task 3: UNAVAILABLE: failed to connect to all addresses\n", 3, "",
     "WatchTasksAsync failed"),
    ("Exception ignored in: <function Pool.__del__ at 0x7f>\nTraceback (most recent call last):\n"
     "  File \"pool.py\", line 268, in __del__\nAttributeError: 'NoneType' object has no attribute 'x'\n"
     "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\nRuntimeError: boom\n",
     None, "", "RuntimeError: boom"),
    # its second batch: an interactive shell's bare "Killed" (alone, or after a progress bar),
    # TensorFlow's collective abort, SkyPilot's failed job
    ("Start training...\nlr = 1.00e-05\nKilled\n", None, "", "Killed"),
    ("  6%|█      | 3787/62565 [04:47<1:10:53, 13.82it/s]Killed\n", None, "", "Killed"),
    ("2019-05-19 15:08:13.128241: E tensorflow/core/common_runtime/ring_reducer.cc:369] Aborting RingReduce with "
     "Unavailable: Socket closed\n", None, "", "Aborting RingReduce"),
    ("Job 1 is already in terminal state FAILED_CONTROLLER. For more details, run: sky jobs logs --controller 1\n",
     None, "", "FAILED_CONTROLLER"),
    # the sixth round: Paddle's launcher naming the failed worker, and a rank that died on a
    # signal after its peers reported the reset it caused (it printed no reset: it is the peer)
    ("LAUNCH INFO 2022-11-21 02:35:54,384 Pod failed\nContainer rank 2 status failed cmd ['python', 'train.py'] "
     "code 1 log log/workerlog.2\n", 2, "", "status failed cmd"),
    ("[0]<stderr>:[2021-04-12 04:03:43.803394: E operations.cc:548] Horovod background loop uncaught exception: "
     "[gloo/transport/tcp/pair.cc:566] Read error [10.0.0.2]:64159: Connection reset by peer\n"
     "[1]<stderr>:Segmentation fault (core dumped)\n", 1, "", "Segmentation fault"),
])
def test_a_failure_without_a_signature_is_named_and_quoted(tmp_path, text, rank, host, quoted):
    lead = _lead(tmp_path, text)
    assert lead.status == Status.FAIL and lead.subject == "job-failed", lead.summary
    assert lead.evidence["rank"] == rank and lead.evidence["host"] == host
    assert any(quoted in line for line in lead.evidence["lines"]), lead.evidence["lines"]
    assert "not in the catalogue" in lead.summary or "the catalogue does not know" in lead.summary


@pytest.mark.parametrize("text, words", [
    ("Container rank 0 status failed cmd ['python', 'train.py'] code 1 log log/workerlog.0\n", "read log/workerlog.0"),
    # the Kubeflow training operator's event names the pod and its namespace (kubeflow/trainer#2008)
    ("1.7085078566441019e+09\tDEBUG\tevents\tPod: kubeflow.pytorch-simple-worker-0 exited with code 1\t{}\n",
     "kubectl logs pytorch-simple-worker-0 -n kubeflow"),
])
def test_a_launcher_that_names_the_workers_own_output_sends_the_reader_there(tmp_path, text, words):
    lead = _lead(tmp_path, text)
    assert words in lead.fix and lead.evidence["exit_codes"] == ["1"], lead.fix


def test_killed_rank_gets_the_oom_look_on_its_node(tmp_path):
    lead = _lead(tmp_path, "mpirun noticed that process rank 1 with PID 4242 on node node2 exited on signal 9 (Killed).\n")
    assert lead.evidence["rank"] == 1 and lead.evidence["signals"] == ["SIGKILL"]
    assert "ssh node2 dmesg -T | grep -i -E 'killed process|out of memory'" in lead.fix.splitlines()


def test_the_first_error_leads_over_the_shutdown_it_caused(tmp_path):
    text = ("[1,1]<stderr>:ValueError: shapes (3,) and (4,) not aligned\n"
            "[1,0]<stderr>:Horovod has been shut down. This was caused by an exception on one of the ranks\n"
            "Primary job  terminated normally, but 1 process returned\n")
    lead = _lead(tmp_path, text)
    assert lead.evidence["rank"] == 1 and "ValueError" in lead.summary


@pytest.mark.parametrize("text", [
    "node1:1:1 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\nnode1:1:1 [0] NCCL INFO Init COMPLETE\n",
    "epoch 3 done, exit code 0\nprocess exited with code 0\n",
    "The job finished. Exit status 0.\n",
    # words the fourth round's markers look for, in lines that report no failure
    "slurmstepd: error: _get_joules_task: can't get info from slurmd\nstep 9 done\n",
    "Signal: none pending\n[node1:12] mca: base: components_register: found loaded component ucx\n",
    "[node1:12] pml_ucx.c:180 mca_pml_ucx_open: UCX version 1.16.0\n",
    "Hello World[node1:35778] PMIX ERROR: ERROR in file gds_ds12_lock_pthread.c at line 206\n",
    # the fifth round: reports Python printed and carried on after, and NCCL's non-error return
    "done\nException ignored in: <function Pool.__del__ at 0x7f>\nTraceback (most recent call last):\n"
    "  File \"pool.py\", line 268, in __del__\nAttributeError: 'NoneType' object has no attribute 'x'\n",
    "result 3.14\nclose failed in file object destructor:\nError in sys.excepthook:\nTraceback (most recent call last):\n"
    "  File \"/usr/bin/mpdlib.py\", line 162, in f\nTypeError: 'NoneType' object is not callable\n\n"
    "Original exception was:\nIOError: [Errno 9] Bad file descriptor\n",
    "n1:1:1 [0] NCCL INFO group.cc:106 -> 7\n",
    "Killed processes: 0\nepoch 3 done\n",
    # the sixth round: XLA's stuck-rendezvous warning that XLA itself took back, once per thread
    # (the retraction's words are XLA's source's, xla/service/rendezvous.cc)
    _XLA_STUCK.format(r=0) + _XLA_STUCK.format(r=1) + _XLA_UNSTUCK * 2 + "step 1, loss 2.3\n",
])
def test_a_healthy_log_stays_clean(tmp_path, text):
    assert _lead(tmp_path, text).status == Status.OK


@pytest.mark.parametrize("text, problem", [
    ("", "no .*marker"),
    ('[[marker]]\nid = "x"\nsays = "x"\nkeywords = ["a"]\npattern = "("\nweight = "exit"\n', "error"),
    ('[[marker]]\nid = "x"\nsays = "x"\nkeywords = ["a"]\npattern = "a"\nweight = "exit"\nexamples = ["b"]\n',
     "does not match"),
    ('[[marker]]\nid = "x"\nsays = "x"\nkeywords = ["a"]\npattern = "a"\nweight = "exit"\nretracted_by = "y"\n',
     "retracted_by names no marker"),
])
def test_a_broken_marker_table_is_refused_by_name(text, problem):
    with pytest.raises(outcome.MarkerError, match=problem):
        outcome.parse(text)


@pytest.mark.parametrize("text, subject, status", [
    # Lightning's rank announcements: half the world never started, no error anywhere
    ("".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8\n" for r in (1, 2, 0, 3)),
     "missing-ranks", Status.WARN),
    # every rank announced twice, word for word: two launches gave out the same numbers
    ("".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" * 2 for r in range(4)),
     "duplicate-ranks", Status.FAIL),
    # the same rank from two processes in one NCCL communicator
    ("a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0xab - Init COMPLETE\n"
     "b:2:2 [0] NCCL INFO comm 0x2 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0xab - Init COMPLETE\n",
     "duplicate-ranks", Status.FAIL),
])
def test_missing_and_duplicated_ranks_are_never_clean(tmp_path, text, subject, status):
    lead = _lead(tmp_path, text)
    assert (lead.subject, lead.status) == (subject, status), lead.summary


def test_one_process_logging_its_rank_through_two_loggers_is_not_a_duplicate(tmp_path):
    text = "".join(f"INFO: Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/2\n"
                   f"I0411 01:28:10.345892 1406 distributed.py:244] Initializing distributed: GLOBAL_RANK: {r}, "
                   f"MEMBER: {r + 1}/2\n" for r in range(2))
    assert _lead(tmp_path, text).status == Status.OK


def test_every_rank_of_a_communicator_seen_is_clean(tmp_path):
    text = "".join(f"h:{r}:{r} [{r}] NCCL INFO comm 0x{r} rank {r} nranks 2 cudaDev {r} busId {r}000 commId 0xab - "
                   f"Init COMPLETE\n" for r in range(2))
    assert _lead(tmp_path, text).status == Status.OK


@pytest.mark.parametrize("text, subject, status", [
    # errors a run printed and then finished anyway (ucx#8746): a WARN, never a failed job
    ("[1668693503.473099] [ampere:1188443:0]  ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() failed: Cannot "
     "allocate memory\n# OSU MPI Broadcast Latency Test v5.8\n# Size       Avg Latency(us)\n1   0.23\n",
     "errors-then-finished", Status.WARN),
    # the summary before the error is no alibi, nor is one with a crash anywhere
    ("# OSU MPI Broadcast Latency Test v5.8\n[1668693503.473099] [ampere:1188443:0]  ib_log.c:246  UCX  ERROR "
     "mlx5_0: ibv_create_cq() failed: Cannot allocate memory\n", "job-failed", Status.FAIL),
    ("UCX  ERROR mlx5_0: ibv_create_cq() failed\nSegmentation fault (core dumped)\n# Out of bounds values : 0 OK\n",
     "job-failed", Status.FAIL),
    # XLA takes back one stuck thread per line: a thread never taken back, a retraction before
    # the warning, or the termination that follows a real hang stays a failure
    (_XLA_STUCK.format(r=0) + _XLA_STUCK.format(r=1) + _XLA_UNSTUCK, "job-failed", Status.FAIL),
    (_XLA_UNSTUCK.replace("17:15:21", "17:14:50") + _XLA_STUCK.format(r=0), "job-failed", Status.FAIL),
    (_XLA_STUCK.format(r=0) + "2024-07-29 17:15:29.920189: E external/xla/xla/service/rendezvous.cc:56] Termination "
     "timeout for `initialize clique for rank 0` of 30 seconds exceeded. Exiting to ensure a consistent program state.\n",
     "job-failed", Status.FAIL),
])
def test_errors_a_run_survived_are_told_apart_from_a_failure(tmp_path, text, subject, status):
    lead = _lead(tmp_path, text)
    assert (lead.subject, lead.status) == (subject, status), lead.summary


@pytest.mark.parametrize("signal, words", [
    ("1", "start it detached"), ("2", "py-spy dump"), ("15", "stopped from outside"),
])
def test_a_launcher_stopped_by_a_signal_gets_the_fix_for_that_signal(tmp_path, signal, words):
    lead = _lead(tmp_path, "W0409 07:28:49.530000 1359 torch/distributed/elastic/agent/server/api.py:719] "
                           f"Received {signal} death signal, shutting down workers\n")
    assert lead.subject == "job-failed" and words in lead.fix, lead.fix


def test_a_report_python_ignored_ends_within_its_bound():
    """A big input's search shows only some lines: a report whose exception line was not among
    them must not swallow a crash far below it."""
    from distdoctor.logs.ignored import MAX_REPORT, Ignored

    ignored = Ignored()
    assert ignored.feed(0, "Exception ignored in: <function f at 0x1>", 10)
    assert ignored.feed(0, "Traceback (most recent call last):", 11)
    assert not ignored.feed(0, "RuntimeError: CUDA error: an illegal memory access was encountered", 12 + MAX_REPORT)
