"""The hardware checks as a user runs them: `distdoctor check` and `health` with a stand-in
nvidia-smi first on PATH replaying real `nvidia-smi -q` captures through the real subprocess path
(timeouts, process groups), and the real kernel log of this machine."""

import subprocess

from tests.conftest import data_path, distdoctor_argv, load_report
from tests.harness.fake_nvidia_smi import StandIn

QUERY_ROWS = "".join(f"{i}, NVIDIA A10, GPU-{i:08x}-0000-0000-0000-000000000000, 00000000:07:00.0, 23028, "
                     "Enabled, [N/A], 0, 0x0000000000000001\n" for i in range(1))


def node(tmp_path):
    smi = StandIn(tmp_path)
    smi.answer("", stdout_file=data_path("nvidia_smi", "nvidia-smi_575_4xRTX6000Ada_cuda12.9.txt"))
    smi.answer("*", stdout=QUERY_ROWS)
    return smi


def run(smi, *argv):
    proc = subprocess.run([*distdoctor_argv(), *argv], env=smi.env(), capture_output=True, text=True, timeout=120)
    return proc, load_report(proc.stdout)


def test_xml_capture_judged_end_to_end(tmp_path):
    smi = node(tmp_path)
    xml = data_path("nvidia_smi_q", "qx_515_A10G_idle_x8_of_x16.xml")
    smi.answer("-q -x", stdout_file=xml)
    smi.answer("-q -x -d PERFORMANCE", stdout_file=xml)
    proc, doc = run(smi, "check", "--only", "gpu.memory-errors,gpu.pcie-link,gpu.throttle", "--format", "json")
    runs = {r["id"]: r for r in doc["checks"]}
    assert runs["gpu.memory-errors"]["status"] == "ok", runs["gpu.memory-errors"]
    assert runs["gpu.throttle"]["status"] == "ok"
    pcie = runs["gpu.pcie-link"]
    assert pcie["status"] == "warn" and pcie["findings"][0]["action"] == "replace-hardware"
    assert "x8 of x16" in pcie["findings"][0]["summary"]
    assert "-q -x" in smi.calls()


def test_text_fallback_and_health_verdict(tmp_path):
    # A driver whose XML does not parse: the text form says the same.
    smi = node(tmp_path)
    smi.answer("-q -x", stdout="<nvidia_smi_log><gpu id=\"00000000:07:00.0\">\x01")
    smi.answer("-q", stdout_file=data_path("nvidia_smi_q", "q_535_A10_remap_pending_unc4.txt"))
    proc, doc = run(smi, "check", "--only", "gpu.memory-errors", "--format", "json")
    (memory,) = doc["checks"]
    assert proc.returncode == 1 and memory["status"] == "fail"
    assert memory["findings"][0]["action"] == "reset-gpu" and "row remap is pending" in memory["findings"][0]["summary"]
    # health: the finding drains, its action is in the reason; no Slurm controller here, so nothing is drained
    proc, doc = run(smi, "health", "--only", "gpu.memory-errors", "--node", "gpu17", "--format", "json")
    verdict = doc["health"]
    assert verdict["draining_checks"] == ["gpu.memory-errors"] and verdict["action"] == "none"
    assert "distdoctor: reset-gpu: gpu.memory-errors: GPU0" in verdict["why"]
