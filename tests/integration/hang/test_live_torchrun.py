"""Real torchrun, real gloo on CPU, real py-spy: one rank of four stays in load_batch while the
others wait in all_reduce. `distdoctor hang` must name that rank, its pid and frame, and the
job must finish normally afterwards (reading it did not stop or break it)."""

import subprocess
import time

from tests.conftest import distdoctor_argv, load_report
from tests.harness.hangjob import HangJob, pyspy_available
from tests.harness.ranks import clean_env, require_torch


def hang(*args: str, timeout: float = 60) -> tuple[dict, float, subprocess.CompletedProcess]:
    started = time.monotonic()
    proc = subprocess.run([*distdoctor_argv(), "hang", "--json", "-v", *args], env=clean_env(),
                          capture_output=True, text=True, timeout=timeout)
    return load_report(proc.stdout), time.monotonic() - started, proc


def findings(report: dict, check_id: str) -> list[dict]:
    return next((c["findings"] for c in report["checks"] if c["id"] == check_id), [])


def test_the_rank_in_load_batch_is_named_and_the_job_goes_on(tmp_path):
    require_torch()
    pyspy_available()
    with HangJob(tmp_path, "sleep") as job:
        job.wait_for(["stuck2", "waiting0", "waiting1", "waiting3"])
        pids = job.rank_pids()
        assert sorted(pids) == [0, 1, 2, 3]
        listed = ",".join(str(p) for p in pids.values())
        # --native: C/C++ frames too (py-spy pauses each rank for its dump); they must not split the wave
        for args in ((), ("--pids", listed), ("--native", "--pids", listed)):
            report, took, proc = hang(*args)
            assert proc.returncode == 1, proc.stderr
            mine = [f for f in findings(report, "hang.wave") if f["evidence"].get("pid") == pids[2]]
            assert len(mine) == 1, findings(report, "hang.wave")
            (f,) = mine
            assert f["status"] == "fail"
            assert f["summary"].startswith(f"rank 2 on {report['host']} (pid {pids[2]}")
            assert "is in load_batch at job.py:" in f["summary"]
            assert "not in all_reduce at job.py:" in f["summary"] and "like the other 3" in f["summary"]
            assert f["fix"].splitlines()[-1].endswith(f"py-spy dump --pid {pids[2]} --native")
            # no other rank of this job is called an outlier
            assert not [g for g in findings(report, "hang.wave") if g["evidence"].get("pid") in
                        (pids[0], pids[1], pids[3])]
            print(f"distdoctor hang {' '.join(args)[:20]}: verdict in {took:.2f} s (report says {report['duration_s']:.2f} s)")
        # the job was read, not harmed: released, every rank finishes its last all_reduce
        assert job.release() == 0, job.log.read_text(errors="replace")[-3000:]
        done = job.log.read_text(errors="replace")
        assert all(f"rank {r} done" in done for r in range(4)), done[-3000:]


def test_a_process_that_is_not_python_and_one_that_is_gone(tmp_path):
    pyspy_available()
    sleeper = subprocess.Popen(["sleep", "60"], env=clean_env(RANK="0", WORLD_SIZE="1"))
    try:
        report, _took, proc = hang("--pids", f"{sleeper.pid},999999999")
    finally:
        sleeper.kill()
        sleeper.wait(5)
    assert proc.returncode == 1, proc.stderr
    assert any(f["summary"].endswith("999999999: no such process") for f in findings(report, "hang.ranks"))
    stack = findings(report, "hang.stacks")
    assert any(f"(pid {sleeper.pid})" in f["summary"] and "is not a Python process" in f["summary"] for f in stack), stack
