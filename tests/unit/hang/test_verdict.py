"""From /proc and py-spy captures (FakeHost) to the verdict: the outlier named with its frame."""

import json

from distdoctor.hang import collect, verdict
from distdoctor.host import CommandResult
from distdoctor.model import Status
from distdoctor.testing import fixture_text
from tests.conftest import data_path
from tests.unit.hang.fakeproc import proc_host

ENV = {"WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "run1", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}


def job(states=None, dumps=None, world=4, exits=(), busy=()):
    procs = {1000 + r: {"env": {**ENV, "WORLD_SIZE": str(world), "RANK": str(r), "LOCAL_RANK": str(r)},
                        "state": (states or {}).get(r, "S"), "ppid": 999} for r in range(4)}
    procs[999] = {"env": {}, "cmdline": ["/usr/bin/python3", "/usr/bin/torchrun"]}
    answers = {1000 + r: fixture_text(data_path("py_spy", f"torchrun_gloo_rank{r}.json")) for r in range(4)}
    answers.update(dumps or {})

    def pyspy(argv):
        pid = int(argv[argv.index("--pid") + 1])
        answer = answers[pid]
        if pid in exits:  # the rank exits while py-spy reads it
            del host.files[f"/proc/{pid}/stat"]
        if pid in busy:  # 50 ticks of CPU between the two samples half a second apart: 100%
            host.files[f"/proc/{pid}/stat"] = host.files[f"/proc/{pid}/stat"].replace(" 10 0 0 0 0 0 ", " 10 0 0 0 50 0 ")
        return answer if isinstance(answer, CommandResult) else CommandResult(argv, 0, answer)

    host = proc_host(procs, commands={"py-spy": pyspy}, hostname="gpu012")
    return host


def by_id(runs):
    return {run.id: run for run in runs}


def test_the_sleeping_rank_is_named_with_its_frame():
    snap = collect.snapshot(job())
    json.dumps(snap)  # a snapshot is plain JSON: it crosses srun as one line
    runs = by_id(verdict.runs([snap], "gpu012"))
    wave = runs["hang.wave"]
    assert wave.status == Status.FAIL
    (finding,) = wave.findings
    assert finding.summary == ("rank 2 on gpu012 (pid 1002, GPU 2) is in load_batch at job.py:5, "
                               "not in all_reduce at job.py:11 like the other 3")
    assert finding.fix.splitlines()[-1] == "/usr/bin/py-spy dump --pid 1002 --native"
    assert runs["hang.ranks"].findings[0].summary == "torchrun run1: 4 ranks on gpu012 of 4"
    assert runs["hang.stacks"].status == Status.OK


def test_fix_for_a_rank_on_another_node_goes_through_ssh():
    snap = collect.snapshot(job())
    wave = by_id(verdict.runs([snap], "login1"))["hang.wave"]
    assert wave.findings[0].fix.splitlines()[-1] == "ssh gpu012 /usr/bin/py-spy dump --pid 1002 --native"


def test_every_rank_in_the_collective_is_a_warning_not_a_verdict():
    rank0 = fixture_text(data_path("py_spy", "torchrun_gloo_rank0.json"))
    wave = by_id(verdict.runs([collect.snapshot(job(dumps={1002: rank0}))], "gpu012"))["hang.wave"]
    assert wave.status == Status.WARN
    assert "all 4 ranks read wait in all_reduce at job.py:11" in wave.findings[0].summary


def test_exited_d_state_and_unreadable_ranks_are_each_named():
    gone = CommandResult((), 1, stderr=fixture_text(data_path("py_spy", "error_gone.txt")))
    host = job(states={1: "D"}, dumps={1003: gone}, exits=(1003,))
    host.files["/proc/1001/wchan"] = "nfs_wait_on_request"
    runs = by_id(verdict.runs([collect.snapshot(host)], "gpu012"))
    stack_lines = [f.summary for f in runs["hang.stacks"].findings]
    assert "rank 3 on gpu012 (pid 1003, GPU 3) exited while being read" in stack_lines
    state_lines = [f.summary for f in runs["hang.process-state"].findings]
    assert "rank 1 on gpu012 (pid 1001, GPU 1) is in uninterruptible sleep (D) in the kernel at nfs_wait_on_request" \
        in state_lines
    assert "rank 3 on gpu012 (pid 1003, GPU 3) has exited (its process is gone)" in state_lines


def test_py_spy_missing_says_how_to_install_it():
    host = job()
    host.commands.clear()
    runs = by_id(verdict.runs([collect.snapshot(host)], "gpu012"))
    assert runs["hang.stacks"].status == Status.FAIL
    assert runs["hang.stacks"].findings[0].fix == "python3 -m pip install py-spy"
    assert runs["hang.wave"].status == Status.SKIP
    assert runs["hang.wave"].findings[0].summary == "no rank's Python stack could be read: nothing to group"


def test_a_hung_dumper_is_bounded():
    hung = CommandResult((), None, duration=5.0, timed_out=True)
    runs = by_id(verdict.runs([collect.snapshot(job(dumps={1002: hung}))], "gpu012"))
    assert any("gave no stack in time" in f.summary for f in runs["hang.stacks"].findings)


def test_no_ranks_is_a_clear_warning():
    runs = verdict.runs([collect.snapshot(proc_host({}))], "n1")
    assert [r.id for r in runs] == ["hang.ranks"]
    assert runs[0].findings[0].summary == "no rank of a distributed job found"


def test_ranks_missing_from_every_node_are_named_in_job_mode():
    snap = collect.snapshot(job(world=6))
    found = by_id(verdict.runs([snap], "gpu012", job_mode=True))["hang.ranks"]
    assert found.status == Status.FAIL
    assert found.findings[0].summary.endswith("ranks 4-5 found on no node")


def test_garbled_snapshot_entries_are_skipped():
    snap = collect.snapshot(job())
    snap["ranks"].append({"process": {"pid": "x"}})
    snap["ranks"].append({"nothing": 1})
    assert by_id(verdict.runs([snap], "gpu012"))["hang.wave"].status == Status.FAIL


def test_a_busy_rank_outside_any_collective_is_named():
    host = job(busy=(1002,))
    assert " 10 0 0 0 0 0 " in host.files["/proc/1002/stat"]
    state = {r.id: r for r in verdict.runs([collect.snapshot(host)], "gpu012")}["hang.process-state"]
    assert [f.summary for f in state.findings] == [
        "rank 2 on gpu012 (pid 1002, GPU 2) is busy (100% CPU) in load_batch at job.py:5, outside any collective"]


# A rank at 100% CPU may be spinning in a CUDA sync, not computing (an H100 hung on `.item()`
# behind a stuck kernel read as "busy ... outside any collective"). The line is read on the node.
JOB_PY = "/tmp/hg-exp/job.py"


def _with_source(host, line5: str):
    lines = [f"# line {n}" for n in range(1, 13)]
    lines[4] = line5
    host.files[JOB_PY] = "\n".join(lines) + "\n"
    return host


def test_a_busy_rank_at_a_gpu_sync_spins_waiting_for_its_gpu():
    host = _with_source(job(busy=(1002,)), "    loss = batch.sum().item()")
    snap = collect.snapshot(host)
    assert [r["state"]["code"] for r in snap["ranks"] if r["process"]["pid"] == 1002] == ["loss = batch.sum().item()"]
    state = by_id(verdict.runs([snap], "gpu012"))["hang.process-state"]
    (finding,) = state.findings
    assert finding.summary == ("rank 2 on gpu012 (pid 1002, GPU 2) spins (100% CPU) waiting for its GPU in load_batch "
                               "at job.py:5 (`loss = batch.sum().item()`)")
    assert finding.explanation.startswith(".item() copies one value to the host") and "not computing" in finding.explanation


def test_a_busy_rank_at_plain_python_is_still_computing():
    host = _with_source(job(busy=(1002,)), "    batch = [decode(x) for x in shard]")
    state = by_id(verdict.runs([collect.snapshot(host)], "gpu012"))["hang.process-state"]
    assert [f.summary for f in state.findings] == [
        "rank 2 on gpu012 (pid 1002, GPU 2) is busy (100% CPU) in load_batch at job.py:5, outside any collective"]


def test_an_unreadable_script_leaves_the_old_reading():
    host = job(busy=(1002,))
    host.files[JOB_PY] = PermissionError(13, "Permission denied")
    snap = collect.snapshot(host)
    assert all(r["state"]["code"] == "" for r in snap["ranks"])
    state = by_id(verdict.runs([snap], "gpu012"))["hang.process-state"]
    assert "is busy (100% CPU)" in state.findings[0].summary


def test_every_rank_waiting_for_its_gpu_is_stuck_below_python():
    rank2 = fixture_text(data_path("py_spy", "torchrun_gloo_rank2.json"))
    host = _with_source(job(dumps={1000 + r: rank2.replace("30456", str(1000 + r)) for r in range(4)}),
                        "    print(t[0].item())")
    wave = by_id(verdict.runs([collect.snapshot(host)], "gpu012"))["hang.wave"]
    (finding,) = wave.findings
    assert finding.status is Status.WARN
    assert finding.summary == ("torchrun run1: all 4 ranks read wait for their GPU in load_batch at job.py:5 "
                               "(`print(t[0].item())`)")
    assert "Flight Recorder" in finding.explanation


def test_the_rank_not_waiting_for_its_gpu_when_the_others_are_is_the_culprit():
    rank2 = fixture_text(data_path("py_spy", "torchrun_gloo_rank2.json"))
    other = rank2.replace('"line": 5', '"line": 7').replace('"name": "load_batch"', '"name": "augment"')
    dumps = {1000 + r: rank2.replace("30456", str(1000 + r)) for r in range(4)}
    dumps[1003] = other.replace("30456", "1003")
    host = _with_source(job(dumps=dumps), "    print(t[0].item())")
    wave = by_id(verdict.runs([collect.snapshot(host)], "gpu012"))["hang.wave"]
    (finding,) = [f for f in wave.findings if f.status is Status.FAIL]
    assert finding.summary.startswith("rank 3 on gpu012 (pid 1003, GPU 3) is in augment at job.py:7")
    assert finding.explanation == "The other ranks wait for their GPUs, which wait for it in a collective."
