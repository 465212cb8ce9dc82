"""gpu.dcgm-health as a user runs it: a stand-in `dcgmi` first on PATH replaying a real
`dcgmi health -c` capture through the real subprocess path; a dcgmi that hangs is a finding within
the bound (the process-group kill included), and no dcgmi at all is a quiet SKIP."""

import subprocess
import time

from tests.conftest import data_path, distdoctor_argv, load_report
from tests.harness.fake_nvidia_smi import StandIn


def run(env, *argv):
    proc = subprocess.run([*distdoctor_argv(), *argv], env=env, capture_output=True, text=True, timeout=120)
    return proc, load_report(proc.stdout)


def test_capture_replayed_and_hung_dcgmi_bounded(tmp_path):
    dcgmi = StandIn(tmp_path, "dcgmi")
    dcgmi.answer("health -c", stdout_file=data_path("dcgmi", "health_c_pcie_replay_inforom_warning_dcgm_user_guide.txt"))
    proc, doc = run(dcgmi.env(), "check", "--only", "gpu.dcgm-health", "--format", "json")
    (dcgm,) = doc["checks"]
    assert dcgm["status"] == "warn" and [f["subject"] for f in dcgm["findings"]] == ["GPU0", "GPU1"]
    assert "8 PCIe replays" in dcgm["findings"][0]["summary"] and dcgm["findings"][0]["action"] == "none"
    assert dcgmi.calls() == ["health -c"]

    dcgmi.answer("health -c", hang=True)
    started = time.monotonic()
    proc, doc = run(dcgmi.env(), "check", "--only", "gpu.dcgm-health", "--format", "json")
    took = time.monotonic() - started
    (dcgm,) = doc["checks"]
    assert dcgm["status"] == "warn" and "did not answer within 10 s" in dcgm["findings"][0]["summary"]
    assert took < 60, took


def test_no_dcgmi_is_a_skip(tmp_path):
    nothing = StandIn(tmp_path)  # only a nvidia-smi on PATH, and it is never asked here
    env = nothing.env(PATH=nothing.dir + ":/usr/bin:/bin")
    proc, doc = run(env, "check", "--only", "gpu.dcgm-health", "--format", "json")
    (dcgm,) = doc["checks"]
    assert dcgm["status"] == "skip" and "not installed" in dcgm["findings"][0]["summary"]
