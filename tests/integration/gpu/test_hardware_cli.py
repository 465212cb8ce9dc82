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


def test_health_over_second_round_link_captures(tmp_path):
    """`health` over real NVLink and DCGM captures: a V100-SXM2 listing 2 of its 6 links down, with no
    other GPU to compare, is named (WARN, reset-gpu) and drains where the site says 6 links are
    expected; two bridged H100 PCIe using 12 of 18 links, and DCGM calling the links of a GPU without
    NVLink down, drain nothing."""
    smi = node(tmp_path)
    smi.answer("-q -x", stdout="")  # no XML here: the text form is read
    smi.answer("-q", stdout_file=data_path("nvidia_smi_q", "q_470_V100PCIe_i1_retired_sbe1_aggregate_sbe3_bsyonline.txt"))
    smi.answer("nvlink -e", stdout="")
    smi.answer("nvlink -s", stdout_file=data_path("nvlink", "nvlink_s_V100_links3_5_inactive_azhpcdiag73_EXCERPT.txt"))
    proc, doc = run(smi, "health", "--only", "gpu.nvlink", "--node", "gpu17", "--format", "json")
    (nvlink,) = doc["checks"]
    assert nvlink["status"] == "warn" and nvlink["findings"][0]["action"] == "reset-gpu", nvlink
    assert "2 of the 6" not in nvlink["findings"][0]["summary"] and "4 of the 6" in nvlink["findings"][0]["summary"]
    assert doc["health"]["draining_checks"] == [], doc["health"]
    site = tmp_path / "site.toml"
    site.write_text('[checks."gpu.nvlink"]\nexpected_links = 6\n')
    proc, doc = run(smi, "health", "--only", "gpu.nvlink", "--node", "gpu17", "--config", str(site), "--format", "json")
    assert doc["health"]["draining_checks"] == ["gpu.nvlink"], doc["health"]
    assert "reset-gpu: gpu.nvlink: GPU3" in doc["health"]["why"]

    smi.answer("nvlink -s", stdout_file=data_path("nvlink", "nvlink_s_2xH100PCIe_bridged_12of18_active_dl380a.txt"))
    proc, doc = run(smi, "health", "--only", "gpu.nvlink", "--node", "gpu17", "--format", "json")
    assert doc["health"]["draining_checks"] == [] and proc.returncode == 0, doc["health"]

    dcgmi = StandIn(tmp_path, "dcgmi")
    nvs = data_path("dcgmi", "health_c_A100PCIe_nvlink_down_no_bridge_nvsentinel1481_EXCERPT.txt")
    dcgmi.answer("health -c", stdout_file=nvs)
    proc = subprocess.run([*distdoctor_argv(), "health", "--only", "gpu.dcgm-health", "--node", "gpu17", "--format",
                           "json"], env=dcgmi.env(), capture_output=True, text=True, timeout=120)
    doc = load_report(proc.stdout)
    (dcgm,) = doc["checks"]
    assert dcgm["status"] == "warn" and doc["health"]["draining_checks"] == [], doc["health"]
