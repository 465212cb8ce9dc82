import resource
import subprocess

from distdoctor.checks import host as host_checks
from distdoctor.host import Host
from distdoctor.model import Status
from distdoctor.testing import FakeHost, run_check

from tests.conftest import load_report, distdoctor_argv

MIB = 1024 * 1024


def test_shm_ok_warn_fail():
    big = FakeHost(disk={"/dev/shm": (16 * 1024 * MIB, 0, 16 * 1024 * MIB)})
    assert [f.status for f in run_check(host_checks.shm_size, big)] == [Status.OK]
    small = run_check(host_checks.shm_size, FakeHost(disk={"/dev/shm": (64 * MIB, 0, 64 * MIB)}))
    # A bare host has no `docker run` to add --shm-size to: its tmpfs is remounted larger.
    assert small[0].status is Status.WARN and "64 MiB" in small[0].summary
    assert "mount -o remount,size=16g /dev/shm" in small[0].fix.splitlines()
    assert small[0].fix.startswith("# as root on node1: outside a container")
    missing = run_check(host_checks.shm_size, FakeHost())
    assert missing[0].status is Status.FAIL and "does not exist" in missing[0].summary
    # The threshold is a parameter, not a constant.
    raised = run_check(host_checks.shm_size, big, params={"min_bytes": 32 * 1024 * MIB})
    assert raised[0].status is Status.WARN


def test_memlock_warns_only_with_infiniband():
    limited = {"memlock": (8192 * 1024, 8192 * 1024)}
    plain = run_check(host_checks.memlock_limit, FakeHost(rlimits=limited))
    assert plain[0].status is Status.OK and "8192 KiB" in plain[0].summary
    with_ib = run_check(host_checks.memlock_limit,
                        FakeHost(rlimits=limited, dirs={"/sys/class/infiniband": ["mlx5_0", "mlx5_1"]}))
    assert with_ib[0].status is Status.WARN and "mlx5_0, mlx5_1" in with_ib[0].summary
    assert "memlock unlimited" in with_ib[0].fix and "cannot raise it" in with_ib[0].explanation
    unlimited = run_check(host_checks.memlock_limit, FakeHost(rlimits={"memlock": (-1, -1)},
                                                               dirs={"/sys/class/infiniband": ["mlx5_0"]}))
    assert unlimited[0].status is Status.OK and "unlimited" in unlimited[0].summary


def test_memlock_on_this_real_machine():
    """This machine's limit (8192 KiB, not raisable) is a real case: the report must show it."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    proc = subprocess.run([*distdoctor_argv(), "check", "--only", "host.memlock-limit", "--json"],
                          capture_output=True, text=True, timeout=60)
    finding = load_report(proc.stdout)["checks"][0]["findings"][0]
    if soft == resource.RLIM_INFINITY:
        assert "unlimited" in finding["summary"]
    else:
        assert f"{soft // 1024} KiB" in finding["summary"]
        assert finding["evidence"]["soft_bytes"] == soft
    assert Host().rlimit("memlock")[0] in (soft, -1)


def _nvml(count: int) -> dict:
    return {"status": "ok", "error": "", "driver_version": "550.54.15", "cuda_version": 12040,
            "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "uuid": f"GPU-{i}"} for i in range(count)]}


def test_nccl_env_killers_from_env_and_conf_files():
    host = FakeHost(env={"NCCL_P2P_DISABLE": "1", "NCCL_CONF_FILE": "/opt/nccl.conf", "HOME": "/home/u"},
                    files={"/etc/nccl.conf": "# site defaults\nNCCL_IB_DISABLE=1\nNCCL_SHM_DISABLE=0\n",
                           "/opt/nccl.conf": "NCCL_DEBUG=WARN\nNCCL_P2P_DISABLE=0\n"},
                    nvml=_nvml(8), dirs={"/sys/class/infiniband": ["mlx5_0"]})
    findings = run_check(host_checks.nccl_env, host)
    warns = {f.subject: f for f in findings if f.status is Status.WARN}
    assert set(warns) == {"NCCL_P2P_DISABLE", "NCCL_IB_DISABLE"}
    assert warns["NCCL_P2P_DISABLE"].fix == "unset NCCL_P2P_DISABLE"  # env wins over the user file
    assert warns["NCCL_IB_DISABLE"].fix == "sed -i '/^NCCL_IB_DISABLE=/d' /etc/nccl.conf"
    assert not any(f.subject == "NCCL_DEBUG" for f in findings)  # NCCL_DEBUG set in the user file


def test_nccl_env_switches_without_the_hardware_they_turn_off_are_no_alarm():
    """NCCL_IB_DISABLE=1 on a node with no InfiniBand, NCCL_P2P_DISABLE=1 on one with no GPU (or
    one): nothing is slowed down there, so no WARN, but the note stays for nodes that have it."""
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "HOME": "/home/u"}
    for host in (FakeHost(env=env), FakeHost(env=env, nvml=_nvml(1))):
        findings = run_check(host_checks.nccl_env, host)
        assert {f.status for f in findings} == {Status.OK}, findings
        notes = {f.subject: f.summary for f in findings if f.subject in env}
        assert "no InfiniBand/RoCE device" in notes["NCCL_IB_DISABLE"]
        assert "has no effect here" in notes["NCCL_P2P_DISABLE"] and "GPU" in notes["NCCL_P2P_DISABLE"]
    # The hardware present: the same switches warn again.
    both = run_check(host_checks.nccl_env, FakeHost(env=env, nvml=_nvml(2), dirs={"/sys/class/infiniband": ["mlx5_0"]}))
    assert {f.subject for f in both if f.status is Status.WARN} == {"NCCL_P2P_DISABLE", "NCCL_IB_DISABLE",
                                                                     "NCCL_SHM_DISABLE"}


def test_nccl_env_clean_and_unreadable_conf():
    clean = run_check(host_checks.nccl_env, FakeHost(env={"HOME": "/home/u"}))
    assert {f.status for f in clean} == {Status.OK}
    assert any("NCCL_DEBUG=INFO" in f.fix for f in clean)
    broken = FakeHost(env={"NCCL_CONF_FILE": "/secret/nccl.conf"},
                      files={"/secret/nccl.conf": PermissionError(13, "Permission denied")})
    findings = run_check(host_checks.nccl_env, broken)
    assert findings[0].status is Status.WARN and "Permission denied" in findings[0].summary
    missing = run_check(host_checks.nccl_env, FakeHost(env={"NCCL_CONF_FILE": "/nope.conf"}))
    assert "does not exist" in missing[0].summary
