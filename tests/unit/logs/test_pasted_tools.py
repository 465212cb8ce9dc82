"""Pasted launcher, GPU-listing and environment output (distdoctor/logs/pasted_tools.py), read
through `log` from the project's real captures: each is recognised and stated back, judged by
the check that reads the same facts, and what it cannot show is unknown, never failed."""

import glob
import os

import pytest

from distdoctor.logs.analysis import analyse
from distdoctor.model import Status
from tests.conftest import data_path


def _pasted(path):
    runs, _ok = analyse([path], use_grep=False)
    return [r for r in runs if "pasted" in r.tags or r.id == "log.pasted-output"]


def _one(path, tool=None):
    runs = _pasted(path)
    assert runs, f"nothing recognised in {path}"
    return runs


@pytest.mark.parametrize("path, label", [
    ("mpiexec-version_intelmpi_2021.5_nesi_mahuika_host.txt", "Intel MPI 2021.5"),
    ("mpiexec-version_mpich_3.4.2_ucx.txt", "MPICH 3.4.2"),
    ("mpirun-version_openmpi_2.1.1_ubuntu18.txt", "Open MPI 2.1.1"),
    ("mpirun-version_openmpi_5.0.6_https.txt", "Open MPI 5.0.6"),
])
def test_mpirun_version_is_stated(path, label):
    run = _one(data_path("mpirun_version", path))[0]
    assert run.status == Status.OK and label in run.findings[0].summary


def test_horovod_build_is_stated_and_judged():
    for path in glob.glob(os.path.join(data_path("horovod_check_build"), "*.txt")):
        runs = _one(path)
        assert runs[0].findings[0].summary.startswith("pasted `horovodrun --check-build`: Horovod ")
    nothing = _one(data_path("horovod_check_build", "horovod-0.18.1_nothing_built.txt"))
    assert [(r.id, r.status) for r in nothing][1:] == [("build.horovod", Status.FAIL)]
    assert "neither the MPI nor the Gloo controller" in nothing[1].findings[0].summary


@pytest.mark.parametrize("path, gpus", [
    ("nvidia-smi-L_8xH100_rhelai_vm_list-gpus.txt", "8 GPU(s): 8x NVIDIA H100 80GB HBM3"),
    ("nvidia-smi-L_A100PCIe_1mig.txt", "1 GPU(s): 1x NVIDIA A100-PCIE-40GB; 1 MIG device(s)"),
    ("nvidia-smi-L_srun_frida_4xH100.txt", "4 GPU(s): 4x NVIDIA H100 80GB HBM3"),
])
def test_gpu_listing_is_stated(path, gpus):
    run = _one(data_path("nvidia_smi_L", path))[0]
    assert run.status == Status.OK and gpus in run.findings[0].summary


@pytest.mark.parametrize("name", ["nvidia-smi_unable_device_handle_workspace19.md",
                                  "nvidia-smi_unable_device_handle_nospace_syno22.md"])
def test_a_gpu_the_driver_cannot_reach_fails(name):
    run = _one(data_path("logs", "pasted", name))[0]
    assert run.status == Status.FAIL and "cannot reach" in run.findings[0].summary


def test_nvidia_smi_table_alone_states_driver_cuda_and_gpus():
    run = _one(data_path("nvidia_smi", "nvidia-smi_565_8xH100SXM_cuda12.7.txt"))[0]
    assert run.findings[0].summary == ("pasted `nvidia-smi`: driver 565.57.01, CUDA 12.7, 8 GPU(s): "
                                       "8x NVIDIA H100 80GB HBM3")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(data_path("slurm_env"), "*.txt"))),
                         ids=os.path.basename)
def test_slurm_environment_dump_is_stated_and_counted(path):
    runs = _one(path)
    statement = next(r for r in runs if r.id == "log.pasted-output")
    assert statement.findings[0].summary.startswith("pasted Slurm environment: ")
    # the paste cannot show which node printed it: no verdict about "this node"
    for r in runs:
        for f in r.findings:
            assert "this node" not in f.summary


@pytest.mark.parametrize("name, shown", [
    ("ip-link_cumulus_no_addresses_netlab1750.md", "lo (UNKNOWN), eth0 (UP), swp1 (UP)"),
    ("netstat-i_kernel_interface_table_net-tools10.md", "lo"),
])
def test_a_listing_without_addresses_is_unknown_not_failed(name, shown):
    runs = _one(data_path("logs", "pasted", name))
    assert [r.status for r in runs] == [Status.OK]
    assert shown in runs[0].findings[0].summary and "cannot be told" in runs[0].findings[0].explanation


def test_an_ibstat_port_down_is_named():
    runs = _one(data_path("logs", "pasted", "ibstat_port1_disabled_port2_active_rdma-core847.md"))
    assert any(r.status == Status.WARN and "mlx4_0 port 1 is DOWN" in f.summary for r in runs for f in r.findings)


@pytest.mark.parametrize("name, gpus", [
    ("collect_env_torch1.6_8xV100_driver410_oldformat.txt", "8 GPU(s)"),
    # ROCm lists its GPU on the same line, without "GPU 0:"; CUDA available, never "0 GPU(s)"
    ("collect_env_torch2.5.1_rocm6.2_wsl2_rx7900xtx_runpy_warning.txt", "GPU AMD Radeon RX 7900 XTX (gfx1100)"),
])
def test_collect_env_states_the_gpus_it_shows(name, gpus):
    run = next(r for r in _pasted(data_path("collect_env", name)) if r.id == "log.pasted-collect-env")
    assert run.findings[0].summary.endswith(gpus)
    # what the paste says about the node, under the inventory's names
    from distdoctor.inventory import field_for
    evidence = run.findings[0].evidence
    assert evidence["torch.version"] and all(field_for(k) is not None for k in evidence), evidence


@pytest.mark.parametrize("name, status, shown", [
    ("scontrol_show_node_drained.txt", Status.WARN, "node1 is IDLE+DRAIN (distdoctor: host.shm-size"),
    ("scontrol_show_node_idle_oneliner.txt", Status.OK, "node1 is IDLE"),
])
def test_scontrol_show_node_is_stated_and_a_drained_node_warned(name, status, shown):
    run = _one(data_path("slurm", name))[0]
    assert run.status == status and shown in run.findings[0].summary


def test_ldconfig_cache_states_the_libraries_a_job_turns_on():
    run = _one(data_path("ldconfig_p_debian12.txt"))[0]
    summary = run.findings[0].summary
    assert run.status == Status.OK and summary.startswith("pasted `ldconfig -p`: 594 entries")
    assert "libcudart: /usr/local/cuda-13.0/lib/libcudart.so" in summary and "libibverbs" in summary


def test_ibstatus_is_stated_port_by_port():
    run = _one(data_path("logs", "pasted", "ibstatus_a100_9ports_all_active_gpud.md"))[0]
    summary = run.findings[0].summary
    assert run.status == Status.OK and summary.startswith("pasted `ibstatus`: 9 port(s): mlx5_0/1 ACTIVE 200 Gb/sec")
    assert [p["hca"] for p in run.findings[0].evidence["ports"]][-1] == "mlx5_8"
