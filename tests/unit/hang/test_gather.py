"""--job through srun, over FakeHost: the snapshots split from srun --label output, and every
way a job or a node gives none named."""

import json

from distdoctor.hang import gather, verdict
from distdoctor.host import CommandResult
from distdoctor.model import Status
from distdoctor.testing import FakeHost


def snap(node: str) -> dict:
    return {"hang_snapshot": 1, "node": node, "ranks": [], "problems": [], "unreadable": 0, "ptrace": {}, "pyspy": ""}


def labelled(task: int, doc: dict, piece: int = 0) -> str:
    line = json.dumps(doc)
    if not piece:
        return f"{task}: {line}\n"
    return "".join(f"{task}: {line[i:i + piece]}\n" for i in range(0, len(line), piece))


def host(squeue, srun) -> FakeHost:
    return FakeHost(commands={"squeue": squeue, "srun": srun}, hostname="login1")


def test_every_node_answers_even_when_srun_cuts_long_lines():
    out = labelled(0, snap("gpu001"), piece=17) + "1: stray line\n" + labelled(1, snap("gpu002"))
    h = host("RUNNING gpu[001-002]\n", out)
    snapshots, missing = gather.job(h, "42", 10)
    assert [s["node"] for s in snapshots] == ["gpu001", "gpu002"] and missing == []
    srun = next(c for c in h.calls if c[0] == "srun")
    assert srun[:8] == ("srun", "--jobid=42", "--overlap", "--label", "-N2", "-n2", "--ntasks-per-node=1",
                        "--kill-on-bad-exit=0")
    assert "--nodelist=gpu[001-002]" in srun
    assert srun[srun.index("hang"):srun.index("hang") + 4] == ("hang", "--node-snapshot", "--job", "42")


def test_silent_and_garbled_nodes_are_named_with_a_retry_line():
    out = labelled(0, snap("gpu001")) + "1: {\"hang_snapshot\": 1, \"node\": \n"
    snapshots, missing = gather.job(host("RUNNING gpu[001-003]", out), "42", 10)
    assert [s["node"] for s in snapshots] == ["gpu001"]
    assert [(n, why) for n, why, _fix in missing] == [
        ("gpu002", "gpu002: printed a snapshot that is not JSON (cut short?)"),
        ("gpu003", "gpu003: no answer")]
    assert missing[1][2] == "ssh gpu003 python3 -m distdoctor hang --job 42"


def test_a_round_past_its_bound_names_the_nodes_late():
    late = CommandResult(("srun",), None, labelled(0, snap("a1")), "", 9.0, timed_out=True)
    _snaps, missing = gather.job(host("RUNNING a[1-2]", late), "42", 10)
    assert missing[0][1] == "a2: no answer within 7 s"


def test_jobs_that_cannot_be_read():
    cases = {
        "abc": (host("", ""), "'abc' is not a Slurm job id"),
        "7": (host(CommandResult((), 1, "", "slurm_load_jobs error: Invalid job id specified\n"), ""),
              "job 7: squeue: slurm_load_jobs error: Invalid job id specified"),
        "8": (host("", ""), "job 8 is not in the queue (finished, or never existed)"),
        "9": (host("PENDING", ""), "job 9 is PENDING, not running: it has no ranks to read"),
        "10": (FakeHost(), "squeue is not installed here: --job needs Slurm's client tools"),
    }
    for job_id, (h, why) in cases.items():
        snapshots, missing = gather.job(h, job_id, 10)
        assert snapshots == [] and missing[0][1] == why
        assert not any(c[0] == "srun" for c in h.calls)
        runs = {r.id: r for r in verdict.runs(snapshots, "login1", job_mode=True, missing=missing)}
        assert runs["hang.nodes"].status == Status.FAIL


def test_hosts_over_ssh_each_answer_or_why_not():
    base = ["python3", "-m", "distdoctor"]
    argv = (*base, "hang", "--node-snapshot", "--timeout", "6")
    h = FakeHost(commands={
        ("ssh", "a1", *argv): "motd line\n" + json.dumps(snap("a1")) + "\n",
        ("ssh", "a2", *argv): CommandResult((), 255, "", "ssh: connect to host a2 port 22: Connection refused\n"),
        ("ssh", "a3", *argv): CommandResult((), None, "", "", 7.0, timed_out=True),
        ("ssh", "a4", *argv): "{\"not\": \"a snapshot\"}\n",
    })
    snapshots, missing = gather.hosts(h, ["a1", "a2", "a3", "a4"], 10, base)
    assert [s["node"] for s in snapshots] == ["a1"]
    assert [why for _n, why, _f in missing] == [
        "a2: ssh failed (ssh: connect to host a2 port 22: Connection refused)",
        "a3: no answer within 7 s",
        "a4: printed JSON that is not a hang snapshot"]
    assert missing[0][2] == "ssh a2 python3 -m distdoctor hang"
