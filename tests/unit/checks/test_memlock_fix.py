"""The locked-memory fix names the node and goes where the limit comes from: in a Slurm job,
slurmd's own limit (LimitMEMLOCK=infinity for the daemon); elsewhere, limits.d; unlimited, as RDMA
wants, never a majority value."""

from distdoctor.checks import host as host_checks
from distdoctor.fixlint import lint
from distdoctor.model import Status
from distdoctor.testing import FakeHost, run_check

LIMITED = {"memlock": (64 * 1024, 64 * 1024)}
IB = {"/sys/class/infiniband": ["mlx5_0"]}


def test_in_a_slurm_step_the_fix_is_slurmds_limit_on_this_node():
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    host = FakeHost(env=env, rlimits=LIMITED, dirs=IB, hostname="gpu07")
    [finding] = run_check(host_checks.memlock_limit, host)
    assert finding.status is Status.WARN
    assert finding.fix.startswith("# as root on gpu07:")
    assert "LimitMEMLOCK=infinity" in finding.fix and "systemctl restart slurmd" in finding.fix
    assert lint(finding.fix) == []


def test_outside_slurm_the_fix_is_limits_d_on_this_node():
    [finding] = run_check(host_checks.memlock_limit, FakeHost(rlimits=LIMITED, dirs=IB, hostname="box1"))
    assert finding.fix.startswith("# as root on box1")
    assert "memlock unlimited" in finding.fix and "/etc/security/limits.d/" in finding.fix
    assert lint(finding.fix) == []
