"""The hardware checks (checks/gpuhealth.py, gpufabric.py, ib.py) over real captures through
FakeHost: nvidia-smi -q -x / -q, kernel logs as /dev/kmsg, nvlink, a sysfs tree of IB counters.
Each faulty capture must give the action NVIDIA's guidance names; each healthy one must not drain."""

import os

import pytest

from distdoctor.checks import gpufabric, gpuhealth, ib
from distdoctor.hardware.actions import needs_drain
from distdoctor.model import Status
from distdoctor.testing import FakeHost, fixture_text, run_check
from tests.conftest import data_path

TABLE = data_path("nvidia_smi", "nvidia-smi_565_8xH100SXM_cuda12.7.txt")


def q(name):
    return fixture_text(data_path("nvidia_smi_q", name))


def kernel(name):
    return fixture_text(data_path("kernel_log", name))


def node(query=None, *, xml=None, perf=None, kmsg=None, nvlink_s=None, nvlink_e=None, files=None, dirs=None,
         commands=None, uptime="100000.00 90000.00\n"):
    """A GPU node: the driver table, `-q -x` (or only the text form), re-reads for sampling."""
    cmds = {("nvidia-smi",): fixture_text(TABLE)}
    if xml is not None:
        cmds[("nvidia-smi", "-q", "-x")] = xml
        cmds[("nvidia-smi", "-q", "-x", "-d", "PERFORMANCE")] = perf if perf is not None else xml
    if query is not None:
        cmds[("nvidia-smi", "-q")] = query
        cmds[("nvidia-smi", "-q", "-d", "PERFORMANCE")] = perf if perf is not None else query
    if nvlink_s is not None:
        cmds[("nvidia-smi", "nvlink", "-s")] = nvlink_s
    if nvlink_e is not None:
        cmds[("nvidia-smi", "nvlink", "-e")] = nvlink_e
    cmds.update(commands or {})
    all_files = {"/proc/uptime": uptime, **(files or {})}
    if kmsg is not None:
        all_files["/dev/kmsg"] = kmsg
    return FakeHost(commands=cmds, files=all_files, dirs=dirs or {})


def statuses(findings):
    return [f.status for f in findings]


def drains(findings):
    return [f for f in findings if f.status is Status.FAIL and needs_drain(f.action)]


# --- memory errors ---------------------------------------------------------------------------


def test_remap_pending_needs_a_reset():
    findings = run_check(gpuhealth.memory_errors, node(q("q_535_A10_remap_pending_unc4.txt")))
    assert statuses(findings) == [Status.FAIL]
    assert findings[0].action == "reset-gpu" and "row remap is pending (4 uncorrectable" in findings[0].summary
    assert findings[0].fix.startswith("nvidia-smi -r -i 0")


@pytest.mark.parametrize("name", ["q_535_8xRTX4090_idle_gen1_healthy.txt", "q_560_TitanV_persistence_off.txt",
                                  "q_535_8xH100_hw_slowdown_power_brake_fabric_completed.txt"])
def test_memory_healthy_text(name):
    findings = run_check(gpuhealth.memory_errors, node(q(name)))
    assert statuses(findings) == [Status.OK] and "nvidia-smi -q" in findings[0].summary


@pytest.mark.parametrize("name", ["qx_535_A100SXM4_mig_enabled_persistence_off.xml", "qx_515_T4_P0_x8_of_x16_retired_pages_0.xml",
                                  "qx_595_RTX4000SFF_idle_remap_no.xml"])
def test_memory_healthy_xml(name):
    findings = run_check(gpuhealth.memory_errors, node(xml=q(name)))
    assert statuses(findings) == [Status.OK] and "(nvidia-smi -q -x)" in findings[0].summary


def test_remap_failure_is_replace_and_xml_preferred():
    text = q("q_535_A10_remap_pending_unc4.txt").replace("Remapping Failure Occurred        : No",
                                                          "Remapping Failure Occurred        : Yes")
    findings = run_check(gpuhealth.memory_errors, node(text, commands={("nvidia-smi", "-q", "-x"): "<broken"}))
    assert findings[0].action == "replace-hardware" and "no spare memory rows" in findings[0].summary


# --- Xid -------------------------------------------------------------------------------------


H100 = "q_535_8xH100_hw_slowdown_power_brake_fabric_completed.txt"


def xid(log, query=H100, **params):
    return run_check(gpuhealth.xid_errors, node(q(query), kmsg=kernel(log)), {"window_hours": 1e6, **params})


def test_xid119_repeated_is_one_finding_on_the_right_gpu():
    findings = xid("dmesg_ctime_xid119_gsp_timeout.log")
    assert statuses(findings) == [Status.FAIL]
    (f,) = findings
    assert f.subject == "GPU4" and f.action == "reset-gpu"  # 0000:9b:00 is the fifth GPU of this node
    assert f.summary.startswith("GPU4 (0000:9b:00): Xid 119 ×5 (GSP RPC Timeout)")
    assert f.evidence["codes"]["119"]["count"] == 5 and f.fix.startswith("nvidia-smi -r -i 4")


def test_application_xids_do_not_drain():
    findings = xid("dmesg_decode_iso_xid13_xid43_app_fault.log")
    assert statuses(findings) == [Status.WARN] and not drains(findings)
    assert findings[0].action == "app-error" and "Xid 13 ×16" in findings[0].summary and "Xid 43" in findings[0].summary


def test_double_bit_ecc_drains():
    findings = xid("dmesg_iso_xid48_xid63_xid94_dbe.log")
    assert [f.action for f in drains(findings)] == ["reset-gpu"]
    assert "Xid 48" in findings[0].summary and "Xid 94 ×9" in findings[0].summary


@pytest.mark.parametrize("log", ["dmesg_uptime_aer_fatal_then_xid79_gpuburn1_EXCERPT.log",
                                 "dmesg_uptime_fallen_off_bus_multiline_no_xid_nvsentinel155.log"])
def test_fallen_off_the_bus_reboots(log):
    findings = xid(log)
    assert [f.action for f in drains(findings)] == ["reboot"] and "Xid 79" in findings[0].summary


def test_sxid_judged_by_nvidias_catalogue():
    # 12028 is in NVIDIA's "non-fatal" table, but its traffic stalls until the fabric is reset
    findings = xid("dmesg_decode_iso_sxid12028_gpud338.log")
    assert statuses(findings) == [Status.FAIL] and findings[0].subject == "0000:84:00.0"
    assert findings[0].action == "reboot" and "SXid 12028 (egress nonposted PRIV error)" in findings[0].summary
    single_bit = "nvidia-nvswitch0: SXid (PCI:0000:84:00.0): 11012, Non-fatal, Link 3 single bit ECC\n"
    findings = run_check(gpuhealth.xid_errors, node(q(H100), kmsg=single_bit), {"window_hours": 1e6})
    assert statuses(findings) == [Status.WARN] and findings[0].action == "none"
    unknown = "nvidia-nvswitch0: SXid (PCI:0000:84:00.0): 99999, Fatal, something new\n"
    findings = run_check(gpuhealth.xid_errors, node(q(H100), kmsg=unknown), {"window_hours": 1e6})
    assert findings[0].action == "reboot" and "not catalogued" in findings[0].summary


@pytest.mark.parametrize("log", ["dmesg_decode_iso_boot_mlx5_links_healthy.log", "kmsg_records_nvswitch_open_healthy.log",
                                 "journalctl_short_iso_k8s_node_healthy.log"])
def test_healthy_logs(log):
    findings = xid(log)
    assert statuses(findings) == [Status.OK] and "/dev/kmsg" in findings[0].summary


def test_window_leaves_old_xids_out():
    # FakeHost's clock is 2023-11-14; the log is from 2025-02: "within 1 h" holds only with a future log,
    # so move the clock: an uptime-dated log read 100000 s after boot, Xid at 74889 s, is 7 h old.
    host = node(q(H100), kmsg=kernel("dmesg_uptime_aer_fatal_then_xid79_gpuburn1_EXCERPT.log"))
    assert drains(run_check(gpuhealth.xid_errors, host, {"window_hours": 8}))
    assert statuses(run_check(gpuhealth.xid_errors, host, {"window_hours": 6})) == [Status.OK]


def test_unreadable_kernel_log_falls_back_then_skips():
    host = node(q(H100), files={"/dev/kmsg": PermissionError(1, "Operation not permitted")},
                commands={("journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"):
                          kernel("dmesg_ctime_xid119_gsp_timeout.log")})
    assert drains(run_check(gpuhealth.xid_errors, host, {"window_hours": 1e6}))
    host = node(q(H100), files={"/dev/kmsg": PermissionError(1, "Operation not permitted")})
    (f,) = run_check(gpuhealth.xid_errors, host)
    assert f.status is Status.SKIP and "Operation not permitted" in f.summary


# --- NVLink ----------------------------------------------------------------------------------


NVLINK_S = fixture_text(data_path("nvlink", "nvlink_s_8xA100_all_active.txt"))


def test_nvlink_all_active_ok_and_inactive_fails():
    assert statuses(run_check(gpuhealth.nvlink, node(q(H100), nvlink_s=NVLINK_S, nvlink_e=""))) == [Status.OK]
    lines = NVLINK_S.splitlines()
    lines[3] = "         Link 2: <inactive>"  # GPU0's third link, as a down link prints
    findings = run_check(gpuhealth.nvlink, node(q(H100), nvlink_s="\n".join(lines) + "\n", nvlink_e=""))
    assert statuses(findings) == [Status.FAIL] and findings[0].summary == "GPU0: 11 of 12 NVLink links active (inactive: 2)"
    assert findings[0].action == "reset-gpu"


def test_nvlink_counters():
    status = ("GPU 0: Tesla V100-SXM2-32GB-LS (UUID: GPU-a)\n" + "".join(f"\t Link {i}: 25.781 GB/s\n" for i in range(6))
              + "GPU 2: Tesla V100-SXM2-32GB-LS (UUID: GPU-b)\n" + "".join(f"\t Link {i}: 25.781 GB/s\n" for i in range(6)))
    errors = fixture_text(data_path("nvlink", "nvlink_e_2xV100_crc_65535_replay_scuffedsquared.txt"))
    findings = run_check(gpuhealth.nvlink, node(q(H100), nvlink_s=status, nvlink_e=errors))
    by = {f.subject: f for f in findings}
    assert by["GPU2/link0"].status is Status.FAIL and "saturated" in by["GPU2/link0"].summary
    assert by["GPU0/link3"].status is Status.WARN and "replay errors 2353" in by["GPU0/link3"].summary
    later = fixture_text(data_path("nvlink", "nvlink_e_2xV100_replaced_gpus_crc2805_scuffedsquared.txt"))
    findings = run_check(gpuhealth.nvlink, node(q(H100), nvlink_s=status, nvlink_e=later))
    assert [(f.status, f.subject) for f in findings] == [(Status.WARN, "GPU2/link0")]


def test_no_nvlink_skips():
    text = "GPU 0: NVIDIA A10 (UUID: GPU-a)\n"
    assert statuses(run_check(gpuhealth.nvlink, node(q(H100), nvlink_s=text))) == [Status.SKIP]
    # a PCIe card without its bridge lists every link <inactive>: not a fault unless the site expects links
    bridgeless = "GPU 0: NVIDIA A100-PCIE-40GB (UUID: GPU-a)\n" + "".join(f"\t Link {i}: <inactive>\n" for i in range(12))
    host = node(q(H100), nvlink_s=bridgeless)
    assert statuses(run_check(gpuhealth.nvlink, host)) == [Status.SKIP]
    assert statuses(run_check(gpuhealth.nvlink, host, {"expected_links": 12})) == [Status.FAIL]


# --- PCIe ------------------------------------------------------------------------------------


def test_pcie_width_and_idle_gen():
    a10g = run_check(gpuhealth.pcie_link, node(xml=q("qx_515_A10G_idle_x8_of_x16.xml")))
    assert statuses(a10g) == [Status.WARN] and "x8 of x16" in a10g[0].summary and not drains(a10g)
    idle = run_check(gpuhealth.pcie_link, node(q("q_535_8xRTX4090_idle_gen1_healthy.txt")))
    assert statuses(idle) == [Status.OK]
    busy = q("q_535_8xRTX4090_idle_gen1_healthy.txt").replace("        Gpu                               : 0 %",
                                                                  "        Gpu                               : 97 %")
    findings = run_check(gpuhealth.pcie_link, node(busy))
    assert all("Gen1 of Gen4 while 97 % busy" in f.summary for f in findings if f.status is Status.WARN)
    assert len([f for f in findings if f.status is Status.WARN]) >= 1


def test_aer_fatal_drains_and_corrected_does_not():
    fatal = run_check(gpuhealth.pcie_link, node(q(H100), kmsg=kernel("dmesg_human_relative_aer_multiple_fatal_returnn1500.log")))
    assert [f.action for f in drains(fatal)] == ["reboot"] and fatal[0].subject == "0000:00:03.0"
    corrected = run_check(gpuhealth.pcie_link, node(q(H100), kmsg=kernel("syslog_uptime_aer_correctable_popos3363_EXCERPT.log")))
    assert statuses(corrected) == [Status.OK]


# --- throttling ------------------------------------------------------------------------------


def test_persistent_power_brake_drains():
    findings = run_check(gpuhealth.throttle, node(q(H100)), {"window_seconds": 0.05})
    assert len(findings) == 8 and all(f.action == "replace-hardware" for f in findings)
    assert findings[0].summary == "GPU0: hw power brake slowdown, hw slowdown in 6 of 6 readings"


def test_one_reading_is_not_enough():
    # The first reading shows the brake; the next five (the same node a moment later) do not.
    findings = run_check(gpuhealth.throttle, node(q(H100), perf=q("q_535_8xRTX4090_idle_gen1_healthy.txt")),
                         {"window_seconds": 0.05})
    assert statuses(findings) == [Status.OK] and "not lasting" in findings[0].summary


def test_one_gpu_braked_of_eight():
    findings = run_check(gpuhealth.throttle, node(q("q_535_8xH100_one_gpu_power_brake_sw_thermal.txt")),
                         {"window_seconds": 0.05})
    assert [(f.status, f.subject) for f in findings] == [(Status.FAIL, "GPU2")]


def test_idle_gpus_are_not_throttled():
    assert statuses(run_check(gpuhealth.throttle, node(q("q_535_8xRTX4090_idle_gen1_healthy.txt")))) == [Status.OK]


# --- device nodes, peermem, fabric, MIG --------------------------------------------------------


def dev_files(n, uvm=True):
    files = {f"/dev/nvidia{i}": "" for i in range(n)}
    files["/dev/nvidiactl"] = ""
    if uvm:
        files["/dev/nvidia-uvm"] = ""
    return files


def test_device_nodes():
    assert statuses(run_check(gpufabric.device_nodes, node(q(H100), files=dev_files(8)))) == [Status.OK]
    findings = run_check(gpufabric.device_nodes, node(q(H100), files=dev_files(8, uvm=False)))
    assert statuses(findings) == [Status.FAIL] and "nvidia-modprobe -u" in findings[0].fix
    assert findings[0].action == "fix-config"


def ib_tree(name="h100_8hca_gpud", zero=False):
    """The sysfs tree under tests/data/ib_sysfs/<name> as FakeHost files below /sys/class/infiniband."""
    root = data_path("ib_sysfs", name)
    files = {}
    for base, _dirs, names in os.walk(root):
        for n in names:
            path = os.path.join(base, n)
            value = open(path).read()
            if zero and "/counters/" in path:
                value = "0\n"
            files["/sys/class/infiniband/" + os.path.relpath(path, root)] = value
    return files


def test_peermem_expected_with_hcas():
    findings = run_check(gpufabric.peermem, node(q(H100), files=ib_tree()))
    assert statuses(findings) == [Status.WARN] and "modprobe nvidia-peermem" in findings[0].fix
    loaded = {**ib_tree(), "/sys/module/nvidia_peermem/refcnt": "0\n"}
    assert statuses(run_check(gpufabric.peermem, node(q(H100), files=loaded))) == [Status.OK]
    assert statuses(run_check(gpufabric.peermem, node(q(H100)))) == [Status.SKIP]


def test_fabric_judged_only_with_nvswitch():
    active = {("systemctl", "is-active", "nvidia-fabricmanager"): "active\n"}
    assert statuses(run_check(gpufabric.fabric, node(q(H100), commands=active))) == [Status.OK]
    from distdoctor.host import CommandResult
    down = {("systemctl", "is-active", "nvidia-fabricmanager"): CommandResult(("systemctl",), 3, "inactive\n")}
    findings = run_check(gpufabric.fabric, node(q(H100), commands=down))
    assert statuses(findings) == [Status.FAIL] and "inactive" in findings[0].summary
    state = "        State                             : "
    pending = q(H100).replace(state + "Completed", state + "In Progress", 1)
    findings = run_check(gpufabric.fabric, node(pending, commands=active))
    assert [(f.status, f.subject) for f in findings] == [(Status.FAIL, "GPU0")]
    # A PCIe workstation: no fabric state, no NVSwitch device: not judged, the service not asked.
    host = node(q("q_535_8xRTX4090_idle_gen1_healthy.txt"), commands=down)
    assert statuses(run_check(gpufabric.fabric, host)) == [Status.SKIP]
    assert ("systemctl", "is-active", "nvidia-fabricmanager") not in host.calls


def test_mig_consistency():
    assert statuses(run_check(gpufabric.mig_consistency, node(q(H100)))) == [Status.OK]
    mixed = q(H100).replace("    MIG Mode\n        Current                           : Disabled",
                            "    MIG Mode\n        Current                           : Enabled", 1)
    findings = run_check(gpufabric.mig_consistency, node(mixed))
    assert statuses(findings) == [Status.WARN] and findings[0].summary.startswith("MIG enabled on GPU 0 but not on GPU 1,2")
    assert statuses(run_check(gpufabric.mig_consistency, node(q("q_535_8xRTX4090_idle_gen1_healthy.txt")))) == [Status.SKIP]


# --- InfiniBand ------------------------------------------------------------------------------


def test_ib_counters_history_warns_rising_fails():
    findings = run_check(ib.port_counters, FakeHost(files={**ib_tree(), "/proc/uptime": "100000.0 0\n"}),
                         {"sample_seconds": 0.01})
    assert len(findings) == 8 and all(f.status is Status.WARN for f in findings)
    assert "excessive_buffer_overrun_errors 15 since boot" in findings[0].summary
    assert any("link_downed 255" in f.summary for f in findings)

    reads = {"n": 0}
    files = {**ib_tree(), "/proc/uptime": "100000.0 0\n"}

    class Rising(FakeHost):
        def read_text(self, path, max_bytes=4 * 1024 * 1024):
            if path.endswith("mlx5_0/ports/1/counters/link_downed"):
                reads["n"] += 1
                return f"{reads['n']}\n"
            return super().read_text(path, max_bytes)

    findings = run_check(ib.port_counters, Rising(files=files), {"sample_seconds": 0.01})
    rising = next(f for f in findings if f.subject == "mlx5_0:1")
    assert rising.status is Status.FAIL and "link_downed rose by 1" in rising.summary
    assert rising.action == "replace-hardware"


def test_ib_counters_zero_ok_and_rate():
    ok_run = run_check(ib.port_counters, FakeHost(files={**ib_tree(zero=True), "/proc/uptime": "100.0 0\n"}))
    assert statuses(ok_run) == [Status.OK]
    files = {**ib_tree(zero=True), "/proc/uptime": "3600.0 0\n",
             "/sys/class/infiniband/mlx5_4/ports/1/counters/symbol_error": "500\n"}
    findings = run_check(ib.port_counters, FakeHost(files=files), {"sample_seconds": 0})
    assert [(f.status, f.subject) for f in findings] == [(Status.FAIL, "mlx5_4:1")]
    assert "500/h (limit 120/h)" in findings[0].summary


def test_ib_port_state():
    files = ib_tree(zero=True)
    assert statuses(run_check(ib.port_state, FakeHost(files=files))) == [Status.OK]
    files["/sys/class/infiniband/mlx5_5/ports/1/state"] = "2: INIT\n"
    files["/sys/class/infiniband/mlx5_6/ports/1/phys_state"] = "2: Polling\n"
    files["/sys/class/infiniband/mlx5_6/ports/1/state"] = "1: DOWN\n"
    findings = run_check(ib.port_state, FakeHost(files=files))
    assert [(f.status, f.subject, f.action) for f in findings] == [
        (Status.FAIL, "mlx5_5:1", "fix-config"), (Status.WARN, "mlx5_6:1", "replace-hardware")]


def test_ib_link_flaps():
    files = {**ib_tree(zero=True), "/proc/uptime": "100000 0\n"}
    boot = kernel("journalctl_short_mlx5_port_link_init_active_gpud1209_EXCERPT.log")
    # The journal's times carry no year (FakeHost's clock says 2023): a window wide enough to hold them.
    wide = {"window_hours": 1e6}
    assert statuses(run_check(ib.link_flaps, FakeHost(files={**files, "/dev/kmsg": boot}), wide)) == [Status.OK]
    lines = boot.splitlines()
    flapping = "\n".join(lines + [lines[1], lines[-1]] * 3) + "\n"  # the port's INIT/ACTIVE pair, three more times
    findings = run_check(ib.link_flaps, FakeHost(files={**files, "/dev/kmsg": flapping}), wide)
    assert statuses(findings) == [Status.FAIL] and findings[0].subject == "mlx5_5/1"
    assert statuses(run_check(ib.link_flaps, FakeHost(files={**files, "/dev/kmsg": flapping}))) == [Status.OK]


def test_fabric_manager_log_errors_judged_by_the_sxid_catalogue():
    active = {("systemctl", "is-active", "nvidia-fabricmanager"): "active\n"}
    for name, count in (("fmlog_hgx_sxid12028_many_ports_gpud.log", 18), ("fmlog_hgx_one_sxid12028_inband_gpud.log", 1)):
        log = fixture_text(data_path("fabric_manager", name))
        findings = run_check(gpufabric.fabric, node(q(H100), commands=active, files={"/var/log/fabricmanager.log": log}))
        fm = next(f for f in findings if f.subject == "nvidia-fabricmanager")
        assert fm.status is Status.FAIL and fm.action == "reboot"
        assert fm.summary.startswith(f"the fabric manager logged {count} NVSwitch error")
        assert "SXid 12028 egress nonposted PRIV error" in fm.summary
    healthy = fixture_text(data_path("fabric_manager", "journal_fm_started_ok_nvtrust128.txt"))
    commands = {**active, ("journalctl", "-u", "nvidia-fabricmanager", "-b", "--no-pager", "-q"): healthy}
    assert statuses(run_check(gpufabric.fabric, node(q(H100), commands=commands))) == [Status.OK]
    # NV_WARN_NOTHING_TO_DO on a node without NVSwitch: not judged at all
    nothing = fixture_text(data_path("fabric_manager", "journal_fm_nothing_to_do_no_nvswitch_cubestudio29.txt"))
    workstation = node(q("q_535_8xRTX4090_idle_gen1_healthy.txt"),
                       commands={("journalctl", "-u", "nvidia-fabricmanager", "-b", "--no-pager", "-q"): nothing})
    assert statuses(run_check(gpufabric.fabric, workstation)) == [Status.SKIP]


def test_imex_needed_only_in_a_multi_node_nvlink_domain():
    # The H100 capture's Fabric section with a ClusterUUID and CliqueId added after its Status line,
    # as drivers from R550 print them on GB200 NVL72 nodes (constructed: no such capture was found).
    state = "        Status                            : Success\n"
    text = q(H100).replace(state, state + "        CliqueId                          : 32766\n"
                           "        ClusterUUID                       : 5f8e2c1a-0b7d-4c3e-9a61-2d4f8b7e9c10\n")
    assert parse_gpus(text)[0].fabric_cluster_uuid == "5f8e2c1a-0b7d-4c3e-9a61-2d4f8b7e9c10"
    from distdoctor.host import CommandResult
    fm = {("systemctl", "is-active", "nvidia-fabricmanager"): "active\n"}
    down = {**fm, ("systemctl", "is-active", "nvidia-imex"): CommandResult(("systemctl",), 3, "inactive\n")}
    findings = run_check(gpufabric.fabric, node(text, commands=down))
    assert [(f.status, f.subject, f.action) for f in findings] == [(Status.FAIL, "nvidia-imex", "fix-config")]
    up = {**fm, ("systemctl", "is-active", "nvidia-imex"): "active\n"}
    assert statuses(run_check(gpufabric.fabric, node(text, commands=up))) == [Status.OK]
    # a single-node HGX reports no domain (or zeros): IMEX is not asked about
    host = node(q(H100), commands=down)
    assert statuses(run_check(gpufabric.fabric, host)) == [Status.OK]
    assert ("systemctl", "is-active", "nvidia-imex") not in host.calls


def parse_gpus(text):
    from distdoctor.parsers.nvidia_smi_query import parse_query

    return parse_query(text).gpus
