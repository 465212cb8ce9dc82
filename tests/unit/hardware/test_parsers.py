"""The hardware parsers (nvidia-smi -q text and XML, nvlink -s/-e, the kernel log) against real
captures (tests/data/nvidia_smi_q, nvlink, kernel_log; see each INDEX.md) with values read by hand."""

import glob
import os
import time

import pytest

from distdoctor.hardware import xid
from distdoctor.hardware.actions import ACTIONS, needs_drain, strongest
from distdoctor.parsers import ParseError
from distdoctor.parsers.kernel_log import parse_kernel_log, short_pci, split_time
from distdoctor.parsers.nvidia_smi_query import parse_query
from distdoctor.parsers.nvlink import parse_nvlink_errors, parse_nvlink_status
from tests.conftest import data_path


def read(*parts):
    with open(data_path(*parts), encoding="utf-8", errors="replace") as fh:
        return fh.read()


# --- nvidia-smi -q ---------------------------------------------------------------------------


def test_every_query_capture_parses_and_is_indexed():
    files = sorted(os.path.basename(p) for p in glob.glob(data_path("nvidia_smi_q", "q*"))
                   if not p.endswith(".parsed.json"))  # the golden runner's expected parses
    index = read("nvidia_smi_q", "INDEX.md")
    assert len(files) == 20
    for name in files:
        assert name in index
        report = parse_query(read("nvidia_smi_q", name))
        assert report.gpus and all(g.bus_id for g in report.gpus)


def test_second_round_query_variants():
    """R470's `16x` width and retired pages; R535 vGPU host with ECC off (every counter N/A); R550's
    SRAM Parity / SEC-DED counters, summed: a non-zero one of the newest names is not lost."""
    v100 = parse_query(read("nvidia_smi_q", "q_470_V100PCIe_i1_retired_sbe1_aggregate_sbe3_bsyonline.txt")).gpus[0]
    assert (v100.pcie_width_current, v100.pcie_width_max, v100.retired_sbe, v100.retired_pending) == (16, 16, 1, False)
    p40 = parse_query(read("nvidia_smi_q", "q_535_P40_vgpu_host_ecc_disabled_proxmox.txt")).gpus[0]
    assert (p40.ecc_enabled, p40.ecc_volatile_uncorrectable, p40.clock_reasons) == (False, None, ("sw_power_cap",))
    a10 = read("nvidia_smi_q", "q_550_A10_sram_parity_secded_idle_gen1_gotest.txt")
    assert parse_query(a10).gpus[0].ecc_volatile_uncorrectable == 0
    hit = a10.replace("SRAM Uncorrectable SEC-DED    : 0", "SRAM Uncorrectable SEC-DED    : 2", 1)
    assert parse_query(hit).gpus[0].ecc_volatile_uncorrectable == 2


def test_remap_pending_a10():
    report = parse_query(read("nvidia_smi_q", "q_535_A10_remap_pending_unc4.txt"))
    (gpu,) = report.gpus
    assert report.form == "text" and report.driver_version == "535.129.03"
    assert (gpu.remap_uncorrectable, gpu.remap_pending, gpu.remap_failure) == (4, True, False)
    assert gpu.ecc_volatile_uncorrectable == 0 and gpu.ecc_enabled is True
    assert gpu.bus_id == "00000000:07:00.0"


def test_h100_hw_slowdown_and_fabric():
    report = parse_query(read("nvidia_smi_q", "q_535_8xH100_hw_slowdown_power_brake_fabric_completed.txt"))
    assert len(report.gpus) == 8
    for gpu in report.gpus:
        assert "hw_slowdown" in gpu.clock_reasons and "hw_power_brake_slowdown" in gpu.clock_reasons
        assert (gpu.fabric_state, gpu.fabric_status) == ("Completed", "Success")
        assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (5, 5, 16, 16)
        assert gpu.mig_mode is False and gpu.persistence_mode is True
    assert [g.index for g in report.gpus] == list(range(8))


def test_idle_gen1_is_read_as_current_gen1():
    report = parse_query(read("nvidia_smi_q", "q_535_8xRTX4090_idle_gen1_healthy.txt"))
    idle = [g for g in report.gpus if g.performance_state == "P8"]
    assert idle and all(g.pcie_gen_current == 1 and g.pcie_gen_max == 4 for g in idle)
    assert all(g.ecc_enabled is False and g.ecc_volatile_uncorrectable is None for g in report.gpus)


def test_xml_forms():
    a100 = parse_query(read("nvidia_smi_q", "qx_535_A100SXM4_mig_enabled_persistence_off.xml")).gpus[0]
    assert a100.mig_mode is True and a100.persistence_mode is False and a100.remap_pending is None
    assert a100.ecc_volatile_uncorrectable == 0 and a100.ecc_aggregate_uncorrectable == 0
    t4 = parse_query(read("nvidia_smi_q", "qx_515_T4_P0_x8_of_x16_retired_pages_0.xml")).gpus[0]
    assert (t4.retired_sbe, t4.retired_dbe, t4.retired_pending) == (0, 0, False)
    assert (t4.pcie_width_current, t4.pcie_width_max, t4.performance_state) == (8, 16, "P0")
    old = parse_query(read("nvidia_smi_q", "qx_418_QuadroP400_throttle_names_old.xml")).gpus[0]
    assert old.clock_reasons == ("idle",)  # read from clocks_throttle_reasons, R418's name
    busy = parse_query(read("nvidia_smi_q", "qx_595_RTX3080_busy_gen4x16_healthy.xml")).gpus[0]
    assert busy.utilization == 65 and busy.pcie_gen_current == 4


@pytest.mark.parametrize("text", ["", "garbage\n", "<nvidia_smi_log><gpu", "<other/>",
                                  '<!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log/>'])
def test_bad_query_input_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_query(text)


def test_a_cut_off_text_report_still_reads_what_is_there():
    text = read("nvidia_smi_q", "q_535_A10_remap_pending_unc4.txt")
    cut = text[: text.index("Remapped Rows")]
    gpu = parse_query(cut).gpus[0]
    assert gpu.remap_pending is None and gpu.name == "NVIDIA A10"


# --- nvlink ----------------------------------------------------------------------------------


def test_nvlink_status_all_active():
    gpus = parse_nvlink_status(read("nvlink", "nvlink_s_8xA100_all_active.txt"))
    assert len(gpus) == 8 and all(len(g.active) == 12 and not g.inactive for g in gpus)
    assert gpus[0].links[0] == 25.0


def test_nvlink_status_inactive_and_errors():
    gpus = parse_nvlink_status("GPU 0: NVIDIA H100 (UUID: GPU-a)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n")
    assert gpus[0].active == [0] and gpus[0].inactive == [1]
    errors = parse_nvlink_errors(read("nvlink", "nvlink_e_2xV100_crc_65535_replay_scuffedsquared.txt"))
    assert [g.index for g in errors] == [0, 2]
    assert errors[0].errors == {3: {"replay": 2353}}
    assert errors[1].errors == {0: {"replay": 148, "crc": 65535}}


@pytest.mark.parametrize("text", ["", "\t Link 0: 25 GB/s\n"])
def test_bad_nvlink_input(text):
    with pytest.raises(ParseError):
        parse_nvlink_status(text)


# --- kernel log ------------------------------------------------------------------------------


def kinds(log):
    return sorted({(e.kind, e.device, e.code, e.detail) for e in log.events}, key=str)


def test_every_kernel_log_is_indexed_and_parses():
    files = sorted(os.path.basename(p) for p in glob.glob(data_path("kernel_log", "*.log")))
    index = read("kernel_log", "INDEX.md")
    assert len(files) == 51
    for name in files:
        assert name in index
        parse_kernel_log(read("kernel_log", name), 2025)


def test_xid_formats():
    ctime = parse_kernel_log(read("kernel_log", "dmesg_ctime_xid119_gsp_timeout.log"))
    assert kinds(ctime) == [("xid", "0000:9b:00", 119, "")] and len(ctime.events) == 5
    assert ctime.timed == "wall" and ctime.events[0].time == 1740327858.0  # Sun Feb 23 16:24:18 2025
    iso = parse_kernel_log(read("kernel_log", "dmesg_iso_xid48_xid63_xid94_dbe.log"))
    assert {e.code for e in iso.events} == {48, 63, 94}
    decode = parse_kernel_log(read("kernel_log", "dmesg_decode_iso_xid13_xid43_app_fault.log"))
    assert sorted({e.code for e in decode.events}) == [13, 43] and decode.timed == "wall"
    sxid = parse_kernel_log(read("kernel_log", "dmesg_decode_iso_sxid12028_gpud338.log"))
    assert kinds(sxid) == [("sxid", "0000:84:00.0", 12028, "")]


def test_fallen_off_the_bus_without_xid_names_the_gpu():
    log = parse_kernel_log(read("kernel_log", "dmesg_uptime_fallen_off_bus_multiline_no_xid_nvsentinel155.log"))
    assert kinds(log) == [("fallen-off-bus", "0000:b3:00.0", 79, "")]
    assert short_pci("0000:b3:00.0") == "0000:b3:00" == short_pci("00000000:B3:00.0")


def test_fallen_off_named_on_its_own_line_joins_the_xid():
    # The driver's second line for one incident (its shape as drivers print it; constructed here)
    text = ("[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.\n"
            "[74889.644200] NVRM: GPU 0000:02:00.0: GPU has fallen off the bus.\n")
    log = parse_kernel_log(text)
    assert {short_pci(e.device) for e in log.events} == {"0000:02:00"} and {e.code for e in log.events} == {79}


def test_aer_severities_and_time_forms():
    burn = parse_kernel_log(read("kernel_log", "dmesg_uptime_aer_fatal_then_xid79_gpuburn1_EXCERPT.log"))
    assert kinds(burn) == [("aer", "0000:00:02.0", None, "corrected"), ("aer", "0000:00:02.0", None, "fatal"),
                           ("xid", "0000:02:00", 79, "")]
    assert burn.timed == "uptime" and burn.events[-1].uptime == 74889.644138
    relative = parse_kernel_log(read("kernel_log", "dmesg_human_relative_aer_multiple_fatal_returnn1500.log"))
    assert kinds(relative) == [("aer", "0000:00:03.0", None, "fatal")] and relative.timed == "none"
    syslog = parse_kernel_log(read("kernel_log", "syslog_uptime_aer_correctable_popos3363_EXCERPT.log"), 2024)
    assert kinds(syslog) == [("aer", "0000:00:03.1", None, "corrected")] and syslog.year_guessed
    assert syslog.events[0].uptime == 68183.61579


def test_links_and_healthy_logs():
    port = parse_kernel_log(read("kernel_log", "journalctl_short_mlx5_port_link_init_active_gpud1209_EXCERPT.log"))
    assert [e.detail for e in port.events] == ["init", "active"] and port.events[0].device == "mlx5_5/1"
    boot = parse_kernel_log(read("kernel_log", "dmesg_decode_iso_boot_mlx5_links_healthy.log"))
    assert {e.kind for e in boot.events} == {"link", "mlx5"} and boot.lines == 2382  # the _OSC "AER" lines are not errors
    for name in ("kmsg_records_nvswitch_open_healthy.log", "journalctl_short_iso_k8s_node_healthy.log"):
        assert parse_kernel_log(read("kernel_log", name)).events == ()


def test_split_time_each_format():
    assert split_time("6,3964,206764307,-;nvidia-nvswitch2: open") == (None, 206.764307, "nvidia-nvswitch2: open")
    assert split_time("<6>[   13.717163] audit: x")[1:] == (13.717163, "audit: x")
    assert split_time("plain message") == (None, None, "plain message")
    wall, up, msg = split_time("2025-01-02T15:20:12+0800 host kernel: docker0: port 1")
    assert msg == "docker0: port 1" and wall == 1735802412.0


def test_garbage_and_huge_input_never_raise():
    assert parse_kernel_log("\x00\xff" * 1000 + "Xid Xid AER\n[ abc] NVRM: Xid (PCI:zz): x\n").events == ()
    assert parse_kernel_log("").lines == 0


def test_a_million_line_log_is_linear():
    # Not a timing assertion (bench/kernel_log_speed.py measures): a log 10x longer takes about
    # 10x longer, never quadratic. CPU time, not wall time: on a loaded machine the wall clock of
    # a 50 ms parse stretched past a second (2 cores, load average 18) while its CPU time did not.
    base = read("kernel_log", "dmesg_decode_iso_boot_mlx5_links_healthy.log") * 4
    t0 = time.process_time()
    parse_kernel_log(base)
    one = time.process_time() - t0
    t0 = time.process_time()
    parse_kernel_log(base * 10)
    assert time.process_time() - t0 < max(one * 40, 0.5)


# --- data ------------------------------------------------------------------------------------


def test_xid_catalogue_is_whole_and_acts():
    cat = xid.catalogue()
    assert len(cat) > 100
    assert all(entry.action in ACTIONS for entry in cat.values())
    assert xid.lookup(79).action == "reboot" and needs_drain("reboot")
    assert xid.lookup(48).action == "reset-gpu" and xid.lookup(95).action == "reset-gpu"
    for app in (13, 31, 43, 45):
        assert xid.lookup(app).origin == "application" and not needs_drain(xid.lookup(app).action)
    assert xid.lookup(63).action == "none"  # a row remap event; the pending remap is judged from nvidia-smi -q
    assert not xid.lookup(99999).known and xid.lookup(99999).action == "none"
    assert strongest(["none", "reboot", "reset-gpu"]) == "reboot"


def test_sxid_catalogue():
    cat = xid.sxid_catalogue()
    assert len(cat) > 80 and all(e.action in ACTIONS for e in cat.values())
    assert {e.category for e in cat.values()} == {"non-fatal", "fatal", "always-fatal"}
    assert all(needs_drain(e.action) for e in cat.values() if e.category != "non-fatal")
    assert xid.sxid_lookup(11012).action == "none" and xid.sxid_lookup(12028).action == "reboot"
    assert xid.sxid_lookup(99999, "fatal").action == "reboot" and xid.sxid_lookup(99999, "").action == "none"


def test_fabric_manager_log_and_journal():
    from distdoctor.parsers.fabric_manager import parse_fabric_manager_log

    many = parse_fabric_manager_log(read("fabric_manager", "fmlog_hgx_sxid12028_many_ports_gpud.log"))
    assert len(many.errors) == 18 and {e.code for e in many.errors} == {12028} and many.configured
    assert {e.switch for e in many.errors} == {"00000000:83:00.0", "00000000:84:00.0", "00000000:85:00.0",
                                              "00000000:86:00.0"}
    assert many.errors[0].port == 34 and many.errors[0].time == 1734635869.0 and not many.errors[0].fatal
    one = parse_fabric_manager_log(read("fabric_manager", "fmlog_hgx_one_sxid12028_inband_gpud.log"))
    assert [(e.switch, e.port) for e in one.errors] == [("00000000:86:00.0", 61)]
    ok = parse_fabric_manager_log(read("fabric_manager", "journal_fm_started_ok_nvtrust128.txt"))
    assert ok.configured and not ok.errors and not ok.start_failed
    none = parse_fabric_manager_log(read("fabric_manager", "journal_fm_nothing_to_do_no_nvswitch_cubestudio29.txt"))
    assert none.nothing_to_do and none.start_failed and not none.errors
    assert parse_fabric_manager_log("\x00garbage\n").errors == ()
