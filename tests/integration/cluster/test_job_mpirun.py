"""Under a real Open MPI mpirun: several ranks on one node print one report; and mpirun inside a
real two-node Slurm allocation, where rank 0 runs in the batch step and rank 1 in the step of the
daemon mpirun started with srun, still meets in one place (distdoctor.launch.job)."""

import os
import shlex
import subprocess

import pytest

from tests.conftest import distdoctor_argv, load_report
from tests.harness import apt
from tests.harness.ranks import checks, report, require_torch

MPIRUN_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
              "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def test_mpirun_ranks_on_one_node_print_one_report():
    apt.ensure("openmpi-bin")
    env = dict(os.environ, **MPIRUN_ENV)
    proc = subprocess.run(["mpirun", "-np", "3", *distdoctor_argv(), "check", "--format", "json"],
                          capture_output=True, text=True, timeout=180, env=env, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    doc = load_report(proc.stdout)  # one document, not three
    assert doc["context"]["kind"] == "mpirun" and doc["context"]["local_rank"] == 0
    assert "cluster" not in doc  # one node: its own report, printed once


@pytest.fixture
def hc_cluster(slurm_cluster):
    """The session's shared Slurm cluster (tests/integration/conftest.py), with Open MPI."""
    apt.ensure("openmpi-bin")
    return slurm_cluster


def mpirun_in_batch(cluster, tmp_path, command: list[str]) -> tuple[str, str, str]:
    """`mpirun -np 2 --map-by node <command>` in an `sbatch -N2` script: (stdout, stderr, job log)."""
    home = tmp_path / "home"  # the job secret is made here; the nodes share it, as a cluster's home
    home.mkdir(exist_ok=True)
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    script = (f"#!/bin/bash\nmpirun -np 2 --map-by node {shlex.join(command)} > {shlex.quote(str(out))} "
              f"2> {shlex.quote(str(err))}\necho \"mpirun exit $?\"\n")
    env = dict(MPIRUN_ENV, HOME=str(home), NO_COLOR="1")
    _job, log = cluster.sbatch(script, ["-N2", "-n2"], env=env, timeout=150)
    return out.read_text(), err.read_text(), log


def test_check_under_mpirun_in_a_batch_job_gathers_both_nodes(hc_cluster, tmp_path):
    out, err, log = mpirun_in_batch(hc_cluster, tmp_path,
                                    [*distdoctor_argv(), "check", "--format", "json", "--timeout", "40"])
    doc = load_report(out)
    assert doc["context"]["kind"] == "mpirun", log
    # rank 1 sends its report to node1, not to the first node of its own daemon's step (node2)
    assert doc["cluster"]["answered"] == 2 and doc["cluster"]["missing"] == {}, (doc["cluster"], err)
    assert set(doc["nodes"]) == {"node1", "node2"}


def test_nccl_test_under_mpirun_in_a_batch_job_meets_on_one_port(hc_cluster, tmp_path):
    require_torch()
    out, err, log = mpirun_in_batch(hc_cluster, tmp_path,
                                    [*distdoctor_argv(), "nccl-test", "--timeout", "20", "--json"])
    assert "mpirun exit 0" in log, (log, err[-3000:])
    doc = report(out)
    rendezvous = doc["nccl_test"]["rendezvous"]
    assert rendezvous["master_addr"] == "node1" and "Open MPI job id" in rendezvous["port_why"]
    assert [fp["host"] for fp in doc["nccl_test"]["fingerprints"]] == ["node1", "node2"]
    assert checks(doc)["nccl-test.all-reduce"]["status"] == "ok"
