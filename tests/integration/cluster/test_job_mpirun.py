"""Under a real Open MPI mpirun with several ranks on one node: the node's checks run once and
one report comes out."""

import os
import subprocess


from tests.conftest import distdoctor_argv, load_report
from tests.harness import apt



def test_mpirun_ranks_on_one_node_print_one_report():
    apt.ensure("openmpi-bin")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    proc = subprocess.run(["mpirun", "-np", "3", *distdoctor_argv(), "check", "--format", "json"],
                          capture_output=True, text=True, timeout=180, env=env, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    doc = load_report(proc.stdout)  # one document, not three
    assert doc["context"]["kind"] == "mpirun" and doc["context"]["local_rank"] == 0
    assert "cluster" not in doc  # one node: its own report, printed once
