"""The parallel suite's groups (tests/harness/groups.py), on the suite's own files."""

from tests.conftest import REPO
from tests.harness.groups import group_of, next_scope, rank


def test_the_files_using_a_shared_slurm_cluster_go_to_its_group():
    """One cluster for the Slurm tests, a second one for the job tests (launchers, job reports,
    live logs, hangs): each group runs on the one worker that starts its cluster."""
    for nodeid in ("tests/integration/nccltest/test_slurm.py::test_srun_two_nodes[2]",
                   "tests/integration/slurm/test_health_real.py::anything"):
        assert group_of(REPO, nodeid) == "slurm", nodeid
    for nodeid in ("tests/integration/cluster/test_job_slurm.py::test_a_node_with_another_secret_is_named_not_trusted",
                   "tests/integration/cluster/test_fleet_slurm.py::anything",
                   "tests/integration/hang/test_slurm_job.py::anything",
                   "tests/integration/logs/test_lab_live.py::anything"):
        assert group_of(REPO, nodeid) == "slurm-jobs", nodeid
    assert rank(REPO, "tests/integration/cluster/test_job_slurm.py") == 0
    assert rank(REPO, "tests/integration/slurm/test_cluster.py") == 0


def test_a_file_is_one_group_unless_it_asks_to_be_spread():
    a = "tests/integration/reach/test_real.py::test_every_ssh_and_tcp_classification_against_real_sshd"
    b = "tests/integration/reach/test_real.py::test_console_table_at_80_columns"
    assert group_of(REPO, a) == group_of(REPO, b) == "tests/integration/reach/test_real.py"
    sweep = "tests/integration/hostile/test_regex_sweep.py::test_every_pattern_is_linear[x]"
    assert group_of(REPO, sweep) == sweep
    path = a.split("::")[0]
    assert rank(REPO, path) == 3 and rank(REPO, "tests/unit/core/test_cli.py") == 4
    assert rank(REPO, "tests/integration/hostile/test_regex_sweep.py") == 5  # spread: the fillers, last


HOSTS = "tests/integration/nccltest/test_hosts.py"
LOCAL = "tests/integration/nccltest/test_local.py"
FAULTS = "tests/integration/nccltest/test_faults.py"
LIVE = "tests/integration/hang/test_live_torchrun.py"
NETNS = "tests/integration/net/test_netns.py"
UNIT = "tests/unit/core/test_cli.py"


def test_a_torch_file_goes_to_a_worker_only_while_a_torch_slot_is_free():
    waiting = [LOCAL, FAULTS, NETNS, UNIT]
    assert next_scope(waiting, set(), [{LIVE}, {"slurm"}, {NETNS}], lanes=3) == LOCAL
    assert next_scope(waiting, set(), [{LIVE}, {FAULTS + "x"}, {"tests/integration/buildflags/test_real.py"}],
                      lanes=3) == NETNS  # three hold torch files: the first other file
    # the Slurm group's worker takes a slot per torch test, as any: it is not a torch worker
    assert next_scope(waiting, set(), [{"slurm"}, {"slurm-gpu"}, {LIVE}], lanes=1) == NETNS
    assert next_scope(waiting, set(), [{"slurm"}, {"slurm-gpu"}], lanes=1) == LOCAL


def test_a_worker_that_holds_a_torch_file_takes_the_next_one():
    assert next_scope([FAULTS, UNIT], {LOCAL}, [{LIVE}, {NETNS}, {HOSTS + "x"}], lanes=1) == FAULTS


def test_the_rate_judging_file_runs_alone_among_torch_files():
    waiting = [HOSTS, LOCAL, UNIT]
    assert next_scope(waiting, set(), [{UNIT}, {"slurm"}], lanes=3) == HOSTS
    assert next_scope(waiting, set(), [{LIVE}], lanes=3) == LOCAL  # not while another holds one
    assert next_scope([LOCAL, UNIT], set(), [{HOSTS}], lanes=3) == UNIT  # nothing beside it
    assert next_scope([HOSTS, UNIT], {LOCAL}, [{LIVE}], lanes=3) == UNIT  # not even after one's own


def test_when_only_torch_files_are_left_the_first_is_taken_and_its_slot_waits():
    assert next_scope([LOCAL, FAULTS], set(), [{LIVE}, {HOSTS + "y"}, {NETNS + "z"}], lanes=1) == LOCAL
    assert next_scope([HOSTS], set(), [{LIVE}], lanes=3) == HOSTS


def test_the_groups_are_handed_out_torch_files_first_after_the_slurm_groups():
    order = [rank(REPO, p) for p in ("tests/integration/slurm/test_cluster.py", HOSTS, LOCAL, NETNS, UNIT)]
    assert order == sorted(order) and len(set(order)) == 5
