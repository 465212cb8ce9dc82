"""The parallel suite's groups (tests/harness/groups.py), on the suite's own files."""

from tests.conftest import REPO
from tests.harness.groups import group_of, rank


def test_every_file_using_the_shared_slurm_cluster_goes_to_one_group():
    for nodeid in ("tests/integration/cluster/test_job_slurm.py::test_a_node_with_another_secret_is_named_not_trusted",
                   "tests/integration/nccltest/test_slurm.py::test_srun_two_nodes[2]",
                   "tests/integration/slurm/test_health_real.py::anything"):
        assert group_of(REPO, nodeid) == "slurm", nodeid
    assert rank("slurm", "tests/integration/cluster/test_job_slurm.py") == 0


def test_a_file_is_one_group_unless_it_asks_to_be_spread():
    a = "tests/integration/reach/test_real.py::test_every_ssh_and_tcp_classification_against_real_sshd"
    b = "tests/integration/reach/test_real.py::test_console_table_at_80_columns"
    assert group_of(REPO, a) == group_of(REPO, b) == "tests/integration/reach/test_real.py"
    sweep = "tests/integration/hostile/test_regex_sweep.py::test_every_pattern_is_linear[x]"
    assert group_of(REPO, sweep) == sweep
    assert rank(group_of(REPO, a), a) == 1 and rank("tests/unit/core/test_cli.py", "tests/unit/core/test_cli.py") == 2
