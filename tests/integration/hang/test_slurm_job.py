"""A real two-node Slurm cluster (network namespaces), a real gloo job of four ranks over it (two
per node, env wiring from srun), rank 3 on node2 stuck in load_batch. `distdoctor hang --job ID`
from the login side runs itself on both nodes through `srun --jobid ID --overlap` and names the
node, the rank and the frame; the job then finishes. A job id that does not exist is a clear
finding."""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import distdoctor_argv, load_report
from tests.harness.hangjob import WORKER, pyspy_available
from tests.harness.ranks import free_port, require_torch
from tests.integration.hang.test_live_torchrun import findings


@pytest.fixture
def cluster(slurm_cluster):
    """The session's shared Slurm cluster (tests/integration/conftest.py)."""
    return slurm_cluster


def run_hang(cluster, *args, timeout=60):
    env = {k: v for k, v in cluster.env.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    started = time.monotonic()
    proc = subprocess.run([*distdoctor_argv(), "hang", "--json", "-v", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    return load_report(proc.stdout), time.monotonic() - started, proc


def test_job_names_the_node_rank_and_frame(cluster, tmp_path):
    require_torch()
    pyspy_available()
    flags = tmp_path / "flags"
    flags.mkdir()
    os.chmod(tmp_path, 0o755)
    script = tmp_path / "job.py"
    script.write_text(WORKER)
    port = free_port()
    wiring = ("export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS "
              f"MASTER_ADDR=node1 MASTER_PORT={port}; exec {sys.executable} {script}")
    env = {**cluster.env, "HG_MODE": "sleep", "HG_ODD": "3", "HG_FLAGS": str(flags), "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen(["srun", "-N2", "-n4", "--ntasks-per-node=2", "bash", "-c", wiring], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        want = ["stuck3", "waiting0", "waiting1", "waiting2"]
        while not all((flags / n).exists() for n in want):
            if job.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the job did not reach the hang: {job.communicate(timeout=10)[0][-3000:]}")
            time.sleep(0.2)
        time.sleep(0.5)
        ids = cluster.squeue_ids()
        assert len(ids) == 1, ids
        report, took, proc = run_hang(cluster, "--job", ids[0])
        assert proc.returncode == 1, proc.stderr + proc.stdout[-2000:]
        wave = [f for f in findings(report, "hang.wave") if f["status"] == "fail"]
        assert len(wave) == 1, findings(report, "hang.wave")
        f = wave[0]
        assert f["summary"].startswith("rank 3 on node2 (pid "), f["summary"]
        assert "is in load_batch at job.py:" in f["summary"] and "not in all_reduce at job.py:" in f["summary"]
        assert "like the other 3" in f["summary"]
        assert f["fix"].splitlines()[-1].startswith("ssh node2 ") and "py-spy dump --pid" in f["fix"]
        ranks = findings(report, "hang.ranks")
        assert [r["evidence"]["nodes"] for r in ranks] == [["node1", "node2"]], ranks
        assert ranks[0]["evidence"]["ranks"] == [0, 1, 2, 3]
        print(f"distdoctor hang --job {ids[0]}: verdict in {took:.2f} s over 2 nodes")
        (flags / "release").touch()
        out, _ = job.communicate(timeout=60)
        assert job.returncode == 0, out[-3000:]
        assert all(f"rank {r} done" in out for r in range(4)), out[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.wait(10)


def test_a_job_that_does_not_exist_is_a_clear_finding(cluster):
    report, _took, proc = run_hang(cluster, "--job", "999999")
    assert proc.returncode == 1
    nodes = findings(report, "hang.nodes")
    assert nodes[0]["summary"].startswith("job 999999: squeue: ") or "not in the queue" in nodes[0]["summary"], nodes
    assert json.dumps(report)
