"""The hardware checks over tool output pasted into `distdoctor log` (distdoctor/logs/pasted.py):
nvidia-smi -q / -q -x and kernel-log lines, from the same real captures, judged as on a node."""

from distdoctor.logs import pasted
from distdoctor.model import Status
from distdoctor.testing import fixture_text
from tests.conftest import data_path


def judged(*names):
    text = "".join(fixture_text(data_path(*name.split("/"))) for name in names)
    runs = pasted.runs([("paste.log", "some words before the paste\n" + text + "\nand after\n")])
    return {(r.id, r.source.split(" at ")[0]): r for r in runs}


def test_pasted_query_text_remap_pending():
    runs = judged("nvidia_smi_q/q_535_A10_remap_pending_unc4.txt")
    memory = runs[("gpu.memory-errors", "pasted smi_q")]
    assert memory.status is Status.FAIL and memory.findings[0].action == "reset-gpu"
    assert "pasted nvidia-smi -q" in memory.findings[0].evidence["source"]
    assert not any(r.id == "gpu.throttle" for r in runs.values())  # one reading is not throttling


def test_pasted_query_xml_width():
    runs = judged("nvidia_smi_q/qx_515_A10G_idle_x8_of_x16.xml")
    pcie = runs[("gpu.pcie-link", "pasted smi_q")]
    assert pcie.status is Status.WARN and "x8 of x16" in pcie.findings[0].summary


def test_pasted_kernel_lines():
    runs = judged("kernel_log/dmesg_uptime_aer_fatal_then_xid79_gpuburn1_EXCERPT.log")
    xid = runs[("gpu.xid", "pasted kernel")]
    assert xid.status is Status.FAIL and xid.findings[0].action == "reboot"
    aer = runs[("gpu.pcie-link", "pasted kernel")]
    assert aer.status is Status.FAIL and aer.findings[0].subject == "0000:00:02.0"
    app = judged("kernel_log/dmesg_decode_iso_xid13_xid43_app_fault.log")[("gpu.xid", "pasted kernel")]
    assert app.status is Status.WARN and app.findings[0].action == "app-error"
    gone = judged("kernel_log/dmesg_uptime_fallen_off_bus_multiline_no_xid_nvsentinel155.log")
    assert gone[("gpu.xid", "pasted kernel")].findings[0].action == "reboot"


def test_pasted_kernel_and_query_name_the_gpu():
    runs = judged("kernel_log/dmesg_ctime_xid119_gsp_timeout.log",
                  "nvidia_smi_q/q_535_8xH100_hw_slowdown_power_brake_fabric_completed.txt")
    xid = runs[("gpu.xid", "pasted kernel")]
    assert xid.findings[0].subject == "GPU4" and xid.findings[0].summary.startswith("GPU4 (0000:9b:00): Xid 119 ×5")
    assert ("gpu.pcie-link", "pasted kernel") not in runs and ("gpu.pcie-link", "pasted smi_q") in runs


def test_a_healthy_boot_log_is_judged_healthy():
    runs = judged("kernel_log/dmesg_decode_iso_boot_mlx5_links_healthy.log")
    assert all(r.status in (Status.OK, Status.SKIP) for r in runs.values())
