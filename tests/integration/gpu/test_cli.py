"""`distdoctor check` as a user runs it, with a stand-in nvidia-smi first on PATH."""

import subprocess
import time


from distdoctor.facts.gpu import CHECK_TIMEOUT, NVIDIA_SMI_TIMEOUT
from tests.conftest import load_report, data_path, distdoctor_argv
from tests.harness.fake_nvidia_smi import StandIn


def check(smi, *args, timeout=90):
    start = time.monotonic()
    proc = subprocess.run([*distdoctor_argv(), "check", "--format", "json", *args], env=smi.env(),
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - start


def test_whole_report_arrives_on_time_with_a_hung_nvidia_smi(tmp_path):
    smi = StandIn(tmp_path).answer("*", hang=True)
    proc, elapsed = check(smi, "--timeout", "30")
    assert proc.returncode == 2, proc.stderr  # TIMEOUT: the hung GPU left the picture incomplete
    doc = load_report(proc.stdout)
    runs = {r["id"]: r for r in doc["checks"]}
    inventory = runs["gpu.inventory"]
    assert inventory["status"] == "timeout"
    assert "fell off the bus" in inventory["findings"][0]["summary"]
    assert f"did not answer within {NVIDIA_SMI_TIMEOUT:g} s" in inventory["findings"][0]["summary"]
    assert all(runs[i]["status"] == "skip" for i in ("gpu.p2p-topology", "gpu.nic-affinity", "gpu.health"))
    assert "host.shm-size" in runs  # the rest of the report is there
    assert elapsed < CHECK_TIMEOUT, elapsed
    assert len(smi.calls()) == 1


def test_gpu_area_on_a_healthy_node(tmp_path):
    smi = StandIn(tmp_path)
    smi.answer("", stdout_file=data_path("nvidia_smi", "nvidia-smi_565_8xH100SXM_cuda12.7.txt"))
    smi.answer("topo -m", stdout_file=data_path("nvidia_smi_topo", "topo_8xH100_NV18_8nic_gpu_numa_id.txt"))
    smi.answer("*", stdout="".join(
        f"{i}, NVIDIA H100 80GB HBM3, GPU-{i:08x}-0000-0000-0000-000000000000, 00000000:{i + 0x18:02X}:00.0, 81559, "
        "Enabled, Disabled, 0, 0x0000000000000001\n" for i in range(8)))
    proc, _elapsed = check(smi, "--only", "gpu")
    doc = load_report(proc.stdout)
    status = {r["id"]: r["status"] for r in doc["checks"]}
    assert status["gpu.inventory"] == status["gpu.p2p-topology"] == status["gpu.nic-affinity"] == "ok"
    assert status["gpu.health"] == "ok" and status["gpu.visible-devices"] == "ok"
    # the console renderer draws the topology matrix as a table
    console = subprocess.run([*distdoctor_argv(), "check", "--only", "gpu.p2p-topology", "--verbose"],
                             env=smi.env(), capture_output=True, text=True, timeout=60)
    assert "NV18" in console.stdout, console.stdout
