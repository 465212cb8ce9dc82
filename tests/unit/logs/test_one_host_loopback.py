"""NCCL on loopback is a fault only when the job has ranks on another host. A real one-rank run on
an H100 with NCCL_SOCKET_IFNAME=lo (tests/data/logs/h100/clean-lo.log) must read clean; the same
lines from a job of two ranks, the second elsewhere, must still fail."""

import os

from distdoctor.logs.analysis import analyse
from distdoctor.model import Status

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "logs", "h100")


def _setup(tmp_path, text: str):
    path = tmp_path / "run.log"
    path.write_text(text)
    runs, _ = analyse([str(path)])
    return next(r for r in runs if r.id == "log.nccl-setup")


def _lo() -> str:
    with open(os.path.join(DATA, "clean-lo.log"), encoding="utf-8") as fh:
        return fh.read()


def test_a_single_rank_job_on_loopback_is_not_a_finding(tmp_path):
    run = _setup(tmp_path, _lo())
    assert run.status is Status.OK
    assert any("fine, every rank of the job is on vm" in f.summary for f in run.findings)


def test_the_same_rank_in_a_world_of_two_still_fails(tmp_path):
    run = _setup(tmp_path, _lo().replace("rank 0 nranks 1 ", "rank 0 nranks 2 "))
    assert run.status is Status.FAIL
    assert any(f.status is Status.FAIL and "uses lo (loopback address)" in f.summary for f in run.findings)


def test_every_rank_of_the_world_on_one_host_is_fine(tmp_path):
    text = _lo().replace("rank 0 nranks 1 ", "rank 0 nranks 2 ")
    second = [line.replace("vm:1093:1093", "vm:1094:1094").replace("rank 0 nranks 2 ", "rank 1 nranks 2 ")
              for line in text.splitlines() if "Init COMPLETE" in line]
    run = _setup(tmp_path, text + "\n".join(second) + "\n")
    assert run.status is Status.OK, [f.summary for f in run.findings]
