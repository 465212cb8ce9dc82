"""Every gpu check through the real Host and a stand-in nvidia-smi on PATH (there is no GPU
here): distdoctor runs it through its real subprocess path."""

import os
import time

import pytest

from distdoctor.checks import gpu as gpu_checks
from distdoctor.host import Host
from distdoctor.model import Status
from distdoctor.parsers.nvidia_smi import QUERY_FIELDS
from distdoctor.testing import FakeHost, run_check
from tests.conftest import data_path
from tests.harness.fake_nvidia_smi import StandIn

QUERY = f"--query-gpu={','.join(QUERY_FIELDS)} --format=csv,noheader,nounits"
H100_TABLE = data_path("nvidia_smi", "nvidia-smi_565_8xH100SXM_cuda12.7.txt")
H100_TOPO = data_path("nvidia_smi_topo", "topo_8xH100_NV18_8nic_gpu_numa_id.txt")


def csv_rows(n=8, name="NVIDIA H100 80GB HBM3", persistence="Enabled", mig="Disabled", ecc="0",
             throttle="0x0000000000000000", overrides=None):
    rows = []
    for i in range(n):
        values = {"name": name, "persistence": persistence, "mig": mig, "ecc": ecc, "throttle": throttle,
                  **(overrides or {}).get(i, {})}
        rows.append(f"{i}, {values['name']}, GPU-{i:08x}-1111-2222-3333-444444444444, 00000000:{0x18 + i:02X}:00.0, "
                    f"81559, {values['persistence']}, {values['mig']}, {values['ecc']}, {values['throttle']}")
    return "\n".join(rows) + "\n"


@pytest.fixture
def smi(tmp_path):
    return StandIn(tmp_path)


def node(smi, table=H100_TABLE, topo=H100_TOPO, query=None):
    smi.answer("", stdout_file=table)
    smi.answer("topo -m", stdout_file=topo)
    smi.answer(QUERY, stdout=query if query is not None else csv_rows())
    return smi


def run(info, smi, params=None, **env):
    return run_check(info, Host(env=smi.env(**env)), params)


def statuses(findings):
    return [f.status for f in findings]


# --- gpu.inventory ----------------------------------------------------------------------------

def test_inventory_ok_and_expected_count(smi):
    node(smi)
    findings = run(gpu_checks.inventory, smi, {"expected_count": 8})
    assert statuses(findings) == [Status.OK]
    assert findings[0].summary == "8 × NVIDIA H100 80GB HBM3 (as expected)"
    assert findings[0].evidence["driver_version"] == "565.57.01"
    assert len(findings[0].evidence["table"]["rows"]) == 8


def test_inventory_fails_when_a_gpu_is_missing(smi):
    node(smi, query=csv_rows(7))
    findings = run(gpu_checks.inventory, smi, {"expected_count": 8})
    assert statuses(findings) == [Status.FAIL]
    assert "7 GPUs visible, expected 8" in findings[0].summary


def test_inventory_expects_slurm_allocation(smi):
    node(smi, query=csv_rows(8))
    findings = run(gpu_checks.inventory, smi, {"expected_count": 8}, SLURM_GPUS_ON_NODE="4")
    assert statuses(findings) == [Status.WARN]
    assert "expected 4 (SLURM_GPUS_ON_NODE)" in findings[0].summary
    assert "ConstrainDevices" in findings[0].explanation


def test_inventory_warns_on_mixed_models(smi):
    node(smi, query=csv_rows(7, name="GeForce GTX 1070", overrides={6: {"name": "GeForce GTX 1080"}}))
    findings = run(gpu_checks.inventory, smi)
    assert statuses(findings) == [Status.OK, Status.WARN]
    assert findings[1].summary == "mixed GPU models on one node: 6 × GeForce GTX 1070, 1 × GeForce GTX 1080"


def test_inventory_skips_without_driver(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    host = Host(env={"PATH": str(empty), "HOME": str(tmp_path), "DISTDOCTOR_NVML": "0"})
    for info in gpu_checks.CHECKS:
        findings = run_check(info, host)
        if info.id == "gpu.cuda-compat" and findings[0].summary.startswith("torch"):
            continue  # torch-less interpreters skip for that reason first
        assert statuses(findings) == [Status.SKIP], info.id
        assert findings[0].summary.startswith("no NVIDIA driver on this node"), info.id


@pytest.mark.parametrize("code,message,expect", [
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.", "the NVIDIA driver is not loaded"),
    (18, "Failed to initialize NVML: Driver/library version mismatch", "driver and library versions do not match"),
    (15, "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error", "fallen off the bus"),
    (255, "Unknown Error", "exited with status 255"),
])
def test_inventory_explains_exit_codes(smi, code, message, expect):
    smi.answer("*", stdout=message + "\n", exit=code)
    findings = run(gpu_checks.inventory, smi)
    assert statuses(findings) == [Status.FAIL]
    assert expect in findings[0].summary
    assert findings[0].evidence["exit_code"] == code
    # the other checks point to it rather than repeating the failure
    assert statuses(run(gpu_checks.health, smi)) == [Status.SKIP]


def test_inventory_no_devices(smi):
    smi.answer("*", stdout="No devices were found\n", exit=6)
    assert statuses(run(gpu_checks.inventory, smi)) == [Status.WARN]
    findings = run(gpu_checks.inventory, smi, {"expected_count": 4})
    assert statuses(findings) == [Status.FAIL] and "--gpus-per-node" in findings[0].fix


def test_inventory_unreadable_output_is_named(smi):
    smi.answer("", stdout="")
    findings = run(gpu_checks.inventory, smi)
    assert statuses(findings) == [Status.WARN]
    assert "could not read the output of `nvidia-smi`" in findings[0].summary


def test_inventory_query_garbage_bytes(smi):
    node(smi, query=b"0, NVIDIA H100\xff\xfe, GPU-x, 00000000:18:00.0, lots, On, Off, 0, 0x0\n")
    findings = run(gpu_checks.inventory, smi)
    assert statuses(findings) == [Status.WARN] and "memory.total is 'lots'" in findings[0].summary


def test_old_driver_without_query_fields_falls_back(smi):
    node(smi, table=data_path("nvidia_smi", "nvidia-smi_384_7gpu_gtx1070_no_cuda_field.txt"))
    smi.answer(QUERY, stdout='Field "mig.mode.current" is not a valid field to query.\n', exit=2)
    without_mig = [f for f in QUERY_FIELDS if f != "mig.mode.current"]
    smi.answer(f"--query-gpu={','.join(without_mig)} --format=csv,noheader,nounits",
               stdout='Field "clocks_throttle_reasons.active" is not a valid field to query.\n', exit=2)
    known = [f for f in without_mig if f != "clocks_throttle_reasons.active"]
    smi.answer(f"--query-gpu={','.join(known)} --format=csv,noheader,nounits",
               stdout="".join(f"{i}, GeForce GTX 1070, GPU-{i}, 00000000:0{5 + i}:00.0, 8114, Disabled, "
                              f"{'[N/A]' if i else '1'}\n" for i in range(7)))
    findings = run(gpu_checks.inventory, smi)
    assert statuses(findings) == [Status.OK] and findings[0].summary == "7 × GeForce GTX 1070"
    assert findings[0].evidence["unreported_fields"] == ["mig.mode.current", "clocks_throttle_reasons.active"]
    health = run(gpu_checks.health, smi, {"require_persistence": False})
    assert statuses(health) == [Status.OK]  # memory errors are gpu.memory-errors' (tests/unit/hardware)
    assert health[0].evidence["table"]["rows"][1] == [1, "off", "-"]


def test_driver_that_refuses_the_query_without_naming_a_field(smi):
    node(smi)
    smi.answer(QUERY, stdout="Invalid combination of input arguments.\n", exit=2)
    smi.answer(f"--query-gpu={','.join(QUERY_FIELDS[:6])} --format=csv,noheader,nounits",
               stdout="0, Tesla K80, GPU-0, 0000:05:00.0, 11441, Enabled\n")
    findings = run(gpu_checks.inventory, smi)
    assert statuses(findings) == [Status.OK] and findings[0].summary == "1 × Tesla K80"




# --- gpu.p2p-topology -----------------------------------------------------------------------

def test_p2p_nvswitch_ok(smi):
    node(smi)
    findings = run(gpu_checks.p2p_topology, smi)
    assert statuses(findings) == [Status.OK]
    assert "NV18" in findings[0].summary and "NVSwitch" in findings[0].summary
    assert findings[0].evidence["table"]["rows"][0][:3] == ["GPU0", "X", "NV18"]


def test_p2p_pcie_box_warns_and_suggests_numa_placement(smi):
    node(smi, topo=data_path("nvidia_smi_topo", "topo_8xL40S_pcie_NODE_SYS_1nic_nolegend.txt"))
    findings = [f for f in run(gpu_checks.p2p_topology, smi) if f.status != Status.OK]
    assert statuses(findings) == [Status.WARN]
    assert "28 of 28 GPU pairs meet only over SYS/NODE (16 over SYS, 12 over NODE)" in findings[0].summary
    assert "GPU0–GPU4 (SYS)" in findings[0].summary
    assert "GPU0, GPU1, GPU2, GPU3 (NUMA 0)" in findings[0].explanation
    assert findings[0].fix.startswith("CUDA_VISIBLE_DEVICES=0,1,2,3")


def test_p2p_dgx1_cube_mesh_is_ok(smi):
    node(smi, topo=data_path("nvidia_smi_topo", "topo_dgx1_v100_4xmlx5_unsorted_nics.txt"))
    findings = run(gpu_checks.p2p_topology, smi)
    assert statuses(findings) == [Status.OK] and "joined by NVLink" in findings[0].summary


def test_p2p_only_the_visible_gpus(smi):
    node(smi, topo=data_path("nvidia_smi_topo", "topo_4xRTX6000Ada_pcie_4nic_genoa.txt"), query=csv_rows(4))
    findings = run(gpu_checks.p2p_topology, smi, CUDA_VISIBLE_DEVICES="1,2")
    assert statuses(findings) == [Status.WARN]
    assert findings[0].summary.endswith("GPU1–GPU2 (SYS)") and "1 of 1" in findings[0].summary
    assert findings[0].evidence["gpus"] == ["GPU1", "GPU2"]


def test_p2p_single_visible_gpu_skips(smi):
    node(smi)
    assert statuses(run(gpu_checks.p2p_topology, smi, CUDA_VISIBLE_DEVICES="3")) == [Status.SKIP]


def test_p2p_unknown_link_word(smi, tmp_path):
    text = open(H100_TOPO).read().replace("NV18", "C2C", 1)
    node(smi)
    smi.answer("topo -m", stdout=text)
    findings = run(gpu_checks.p2p_topology, smi)
    assert Status.WARN in statuses(findings)
    assert any("C2C" in f.summary for f in findings)


def test_p2p_truncated_matrix_is_named(smi):
    node(smi)
    smi.answer("topo -m", stdout="".join(open(H100_TOPO).readlines()[:4]))
    findings = run(gpu_checks.p2p_topology, smi)
    assert statuses(findings) == [Status.WARN]
    assert "could not read the output of `nvidia-smi topo -m`" in findings[0].summary
    assert "GPU3" in findings[0].summary


def test_p2p_topo_failure(smi):
    node(smi)
    smi.answer("topo -m", stdout="Failed to run topology query: Unknown Error\n", exit=255)
    findings = run(gpu_checks.p2p_topology, smi)
    assert statuses(findings) == [Status.FAIL] and "exited with status 255" in findings[0].summary


# --- gpu.nic-affinity -----------------------------------------------------------------------

def test_nic_affinity_ok_when_each_gpu_has_a_pix_nic(smi):
    node(smi)
    findings = run(gpu_checks.nic_affinity, smi)
    assert statuses(findings) == [Status.OK]
    assert findings[0].summary == "every GPU in use has an RDMA NIC within PIX"
    assert findings[0].evidence["table"]["rows"][4] == ["GPU4", "mlx5_4", "PIX", "mlx5_4", "PIX"]


def test_nic_affinity_hca_excludes_the_close_nics(smi):
    node(smi)
    findings = run(gpu_checks.nic_affinity, smi, NCCL_IB_HCA="mlx5_0,mlx5_1")
    assert statuses(findings) == [Status.WARN]
    assert "leaves GPU4, GPU5, GPU6, GPU7 SYS-far" in findings[0].summary
    assert findings[0].fix.startswith("export NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_4,mlx5_5,mlx5_6,mlx5_7")
    assert "GPU5→mlx5_5 (PIX)" in findings[0].fix


def test_nic_affinity_hca_from_nccl_conf(smi, tmp_path):
    node(smi)
    (tmp_path / ".nccl.conf").write_text("NCCL_IB_HCA=^mlx5_4,mlx5_5,mlx5_6,mlx5_7\n")
    findings = run(gpu_checks.nic_affinity, smi, HOME=str(tmp_path))
    assert statuses(findings) == [Status.WARN] and "GPU4" in findings[0].summary


def test_nic_affinity_gpus_on_the_socket_without_nics(smi):
    node(smi, topo=data_path("nvidia_smi_topo", "topo_4gpu_NV4_4xmlx5_2numa.txt"), query=csv_rows(4))
    findings = run(gpu_checks.nic_affinity, smi)
    assert statuses(findings) == [Status.WARN]
    assert findings[0].summary.startswith("GPU2, GPU3 are SYS-far from every NIC")


def test_nic_affinity_unknown_hca_name(smi):
    node(smi, topo=data_path("nvidia_smi_topo", "topo_2xRTX6000Ada_workstation_PHB_2nic.txt"), query=csv_rows(2))
    findings = run(gpu_checks.nic_affinity, smi, NCCL_IB_HCA="mlx5_0,mlx5_9")
    assert statuses(findings) == [Status.WARN, Status.OK]
    assert "mlx5_9" in findings[0].summary
    assert "GPUDirect RDMA off by default beyond PXB" in findings[1].summary  # NODE paths
    rows = findings[1].evidence["table"]["rows"]
    assert [r[3] for r in rows] == ["mlx5_0", "mlx5_1"]  # equally close NICs are spread over the GPUs


def test_nic_affinity_hca_cannot_apply_without_nic_legend(smi):
    node(smi, topo=data_path("nvidia_smi_topo", "topo_8xL40S_pcie_NODE_SYS_1nic_nolegend.txt"))
    findings = run(gpu_checks.nic_affinity, smi, NCCL_IB_HCA="mlx5_0")
    assert statuses(findings) == [Status.WARN]  # every GPU is SYS-far from the only NIC
    assert "cannot be applied" in findings[0].evidence["nics"]
    assert "NIC names are unknown" in findings[0].explanation


def test_nic_affinity_without_nics_skips(smi):
    node(smi, topo=data_path("nvidia_smi_topo", "topo_aws_p4d.24xlarge_8xA100_noNIC.txt"))
    findings = run(gpu_checks.nic_affinity, smi)
    assert statuses(findings) == [Status.SKIP] and "EFA" in findings[0].summary


# --- gpu.visible-devices --------------------------------------------------------------------

def test_visible_devices_unset_and_valid(smi):
    node(smi)
    assert statuses(run(gpu_checks.visible_devices, smi)) == [Status.OK]
    findings = run(gpu_checks.visible_devices, smi, CUDA_VISIBLE_DEVICES="GPU-00000003,1")
    assert statuses(findings) == [Status.OK] and "names 2 GPU(s)" in findings[0].summary


@pytest.mark.parametrize("value,expect", [
    ("0,1,9", "'9' is not a GPU of this node"),
    ("GPU-deadbeef", "'GPU-deadbeef' is not a GPU"),
    ("NoDevFiles", "'NoDevFiles' is not a GPU"),
    ("", "set but empty"),
])
def test_visible_devices_invalid(smi, value, expect):
    node(smi)
    findings = run(gpu_checks.visible_devices, smi, CUDA_VISIBLE_DEVICES=value)
    assert statuses(findings) == [Status.FAIL]
    assert expect in findings[0].summary
    if value == "0,1,9":
        assert "only 0,1 will be visible" in findings[0].explanation


def test_visible_devices_indices_on_mixed_models(smi):
    node(smi, query=csv_rows(7, name="GeForce GTX 1070", overrides={6: {"name": "GeForce GTX 1080"}}))
    findings = run(gpu_checks.visible_devices, smi, CUDA_VISIBLE_DEVICES="6,0")
    assert statuses(findings) == [Status.WARN, Status.OK] and findings[0].subject == "CUDA_DEVICE_ORDER"
    ordered = run(gpu_checks.visible_devices, smi, CUDA_VISIBLE_DEVICES="6,0", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert statuses(ordered) == [Status.OK]


def test_visible_devices_one_gpu_per_rank_under_srun(smi):
    node(smi)
    findings = run(gpu_checks.visible_devices, smi, CUDA_VISIBLE_DEVICES="2", SLURM_JOB_ID="7", SLURM_STEP_ID="0",
                   SLURM_NTASKS_PER_NODE="4", SLURM_LOCALID="2", SLURM_PROCID="2", SLURM_NTASKS="8")
    assert statuses(findings) == [Status.FAIL, Status.WARN]
    assert "invalid device ordinal" in findings[0].summary
    assert "NCCL cannot use CUDA IPC" in findings[1].summary and "--gpu-bind=none" in findings[1].fix


def test_visible_devices_one_gpu_per_rank_under_torchrun(smi):
    node(smi)
    findings = run(gpu_checks.visible_devices, smi, CUDA_VISIBLE_DEVICES="0", TORCHELASTIC_RUN_ID="x",
                   LOCAL_WORLD_SIZE="8", LOCAL_RANK="0", RANK="0", WORLD_SIZE="16", GROUP_RANK="0")
    assert statuses(findings) == [Status.WARN]


def test_visible_devices_mig(smi):
    node(smi, table=data_path("nvidia_smi", "nvidia-smi_590_A100SXM_mig_4devices_cuda13.1.txt"),
         query="0, NVIDIA A100-SXM4-40GB, GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0, 00000000:00:04.0, 40960, "
               "Disabled, Enabled, 0, 0x0\n")
    smi.answer("-L", stdout_file=data_path("nvidia_smi_L", "nvidia-smi-L_A100_mig_2x3g_legacy_spacing.txt"))
    one = run(gpu_checks.visible_devices, smi, CUDA_VISIBLE_DEVICES="MIG-c7384736-a75d-5afc-978f-d2f1294409fd")
    assert statuses(one) == [Status.OK]
    two = run(gpu_checks.visible_devices, smi, CUDA_VISIBLE_DEVICES="MIG-c7384736-a75d-5afc-978f-d2f1294409fd,"
                                                                     "MIG-a28ad590-3fda-56dd-84fc-0a0b96edc58d")
    assert statuses(two) == [Status.WARN, Status.OK] and "uses only the first" in two[0].summary
    health = run(gpu_checks.health, smi, {"require_persistence": False})
    assert statuses(health)[0] == Status.WARN and "MIG enabled (2 MIG device(s))" in health[0].summary
    assert statuses(run(gpu_checks.health, smi, {"require_persistence": False, "expect_mig": True})) == [Status.OK]


# --- gpu.health -----------------------------------------------------------------------------

def test_health_ok(smi):
    node(smi)
    findings = run(gpu_checks.health, smi)
    assert statuses(findings) == [Status.OK] and "persistence on" in findings[0].summary


def test_health_problems(smi):
    node(smi, query=csv_rows(overrides={3: {"ecc": "2"}, 5: {"throttle": "0x0000000000000040"},
                                        6: {"persistence": "Disabled"}}))
    findings = run(gpu_checks.health, smi)
    by_status = {(f.status, f.subject) for f in findings}
    assert by_status == {(Status.WARN, "persistence mode"), (Status.OK, "")}
    assert findings[0].action == "fix-config"
    # ECC and throttling are one finding each, in gpu.memory-errors and gpu.throttle (sampled), not here too.
    assert not any(f.subject in ("GPU3", "GPU5") for f in findings)
    assert not any(f.subject == "persistence mode" for f in run(gpu_checks.health, smi, {"require_persistence": False}))


# --- NVML -------------------------------------------------------------------------------------

def test_nvml_answers_without_nvidia_smi():
    nvml = {"status": "ok", "error": "", "driver_version": "550.54.15", "cuda_version": 12040,
            "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "uuid": f"GPU-{i}", "bus_id": f"00000000:{i}:00.0",
                      "memory_total_mib": 81920, "persistence_mode": True, "mig_mode": False, "ecc_uncorrected": 0,
                      "throttle_reasons": 0, "mig_devices": []} for i in range(4)]}
    host = FakeHost(nvml=nvml)
    findings = run_check(gpu_checks.inventory, host)
    assert statuses(findings) == [Status.OK] and findings[0].summary == "4 × NVIDIA A100-SXM4-80GB"
    assert findings[0].evidence["source"] == "nvml" and host.calls == []
    topo = run_check(gpu_checks.p2p_topology, host)  # the matrix still needs nvidia-smi
    assert statuses(topo) == [Status.FAIL] and "topology matrix needs it" in topo[0].summary


def test_nvml_hang_is_reported_without_calling_nvidia_smi():
    host = FakeHost(nvml={"status": "hung", "error": "NVML did not answer within 4 s"},
                    commands={"nvidia-smi": "should not be asked"})
    findings = run_check(gpu_checks.inventory, host)
    assert statuses(findings) == [Status.TIMEOUT] and "NVML did not answer" in findings[0].summary
    assert host.calls == []


def test_hung_topology_after_a_healthy_driver():
    from distdoctor.host import CommandResult

    host = FakeHost(commands={
        ("nvidia-smi",): open(H100_TABLE).read(),
        ("nvidia-smi", "topo", "-m"): CommandResult(("nvidia-smi", "topo", "-m"), None, duration=8.0,
                                                    timed_out=True)})
    p2p = run_check(gpu_checks.p2p_topology, host)
    assert statuses(p2p) == [Status.TIMEOUT] and "`nvidia-smi topo -m` did not answer" in p2p[0].summary
    nic = run_check(gpu_checks.nic_affinity, host)
    assert statuses(nic) == [Status.SKIP] and "see gpu.p2p-topology" in nic[0].summary


def test_real_nvml_without_a_driver_is_cheap():
    start = time.monotonic()
    snapshot = Host(env={"PATH": os.environ.get("PATH", "")}).nvml_snapshot(timeout=4)
    if snapshot["status"] == "ok":
        pytest.skip("this machine has an NVIDIA driver")
    assert snapshot["status"] in ("unavailable", "error") and snapshot["error"]
    assert time.monotonic() - start < 2


def test_nic_affinity_leaves_out_hcas_whose_ports_are_down():
    """mlx5_4 is GPU4's PIX neighbour, but its only port is DOWN: NCCL skips it, so GPU4's
    closest usable NIC is further away and the suggestion must not name mlx5_4."""
    query = QUERY.split()
    files = {}
    for i in range(8):
        state = "1: DOWN" if i == 4 else "4: ACTIVE"
        base = f"/sys/class/infiniband/mlx5_{i}/ports/1"
        files.update({f"{base}/state": state + "\n", f"{base}/phys_state": "5: LinkUp\n",
                      f"{base}/rate": "400 Gb/sec (4X NDR)\n", f"{base}/link_layer": "InfiniBand\n"})
    host = FakeHost(files=files, commands={("nvidia-smi",): open(H100_TABLE).read(),
                                           ("nvidia-smi", "topo", "-m"): open(H100_TOPO).read(),
                                           ("nvidia-smi", *query): csv_rows()})
    findings = run_check(gpu_checks.nic_affinity, host)
    rows = {r[0]: r for r in findings[-1].evidence["table"]["rows"]}
    assert rows["GPU4"][1] != "mlx5_4" and rows["GPU4"][3] != "mlx5_4"
    assert rows["GPU0"][1] == "mlx5_0"
    assert "without mlx5_4 (no ACTIVE port" in findings[-1].evidence["nics"]
