"""Real torchrun, real gloo, torch's real Flight Recorder: one rank skips a collective the
others start (or runs a different one). `distdoctor hang` reads each rank's dump through its
restricted reader and names the first unmatched sequence number and the missing rank, or the
desync, from the dumps alone (the ranks' stacks are all alike)."""

import shlex
import subprocess

import pytest

from tests.harness.hangjob import HangJob, pyspy_available
from tests.harness.ranks import require_torch
from tests.integration.hang.test_live_torchrun import findings, hang

# Each test starts its own ranks on leased ports and builds nothing shared: the torch workers
# take them one by one (tests/harness/groups.py), so that no worker runs this whole file.
SPREAD_OVER_WORKERS = True


@pytest.mark.parametrize("mode, fmt", [("skip", "pickle"), ("desync", "json")])
def test_flight_recorder_names_the_rank(tmp_path, mode, fmt):
    require_torch()
    pyspy_available()
    prefix = tmp_path / "fr" / "trace_"
    prefix.parent.mkdir()
    extra = {"HG_FR_JSON": "1"} if fmt == "json" else {}
    with HangJob(tmp_path, mode, odd=1, TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=str(prefix),
                 **extra) as job:
        job.wait_for([f"dumped{r}" for r in range(4)])
        pids = job.rank_pids()
        report, _took, proc = hang("--pids", ",".join(str(pids[r]) for r in range(4)))
        assert proc.returncode == 1, proc.stderr
        fr = findings(report, "hang.flight-recorder")
        failing = [f for f in fr if f["status"] == "fail"]
        assert len(failing) == 1, fr
        (f,) = failing
        if mode == "skip":
            assert f["summary"] == (f"collective #4 (all_reduce) of process group 0 was entered by 3 ranks but not by "
                                    f"rank 1 on {report['host']} (pid {pids[1]})")
            assert f["evidence"]["missing"] == [1] and f["evidence"]["entered"] == [0, 2, 3]
        else:
            assert f["summary"].startswith(f"desync at collective #4 of process group 0: rank 1 on {report['host']} "
                                           f"(pid {pids[1]}) ran broadcast [[4]] where 3 ranks ran all_reduce")
        assert job.release() == 0


def test_the_dump_fix_runs_as_printed_where_the_job_has_a_handler(tmp_path):
    """The ranks wait for SIGUSR1 (sigwait) to dump their Flight Recorder: with no dump yet,
    `hang` prints `kill -USR1 <pids>`; that line, run as printed, makes the dumps, and the next
    `hang` names the missing rank. Without the handler it would never be offered (SIGUSR1 kills)."""
    require_torch()
    pyspy_available()
    prefix = tmp_path / "fr" / "trace_"
    prefix.parent.mkdir()
    with HangJob(tmp_path, "skip", odd=1, TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=str(prefix),
                 HG_DUMP_ON="usr1") as job:
        job.wait_for([f"ready{r}" for r in range(4)])
        pids = job.rank_pids()
        args = ("--pids", ",".join(str(pids[r]) for r in range(4)))
        report, _took, _proc = hang(*args)
        (first,) = findings(report, "hang.flight-recorder")
        assert first["summary"].startswith("no Flight Recorder dump yet for 4 ranks"), first
        (line,) = first["fix"].splitlines()
        assert line == "kill -USR1 " + " ".join(str(p) for p in sorted(pids.values())), line
        subprocess.run(shlex.split(line), check=True, timeout=10)
        job.wait_for([f"dumped{r}" for r in range(4)])
        report, _took, proc = hang(*args)
        failing = [f for f in findings(report, "hang.flight-recorder") if f["status"] == "fail"]
        assert [f["evidence"]["missing"] for f in failing] == [[1]], findings(report, "hang.flight-recorder")
        assert job.release() == 0
