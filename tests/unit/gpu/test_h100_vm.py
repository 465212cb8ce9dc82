"""The answers of a real H100 (driver 580, one GPU passed into a VM) that distdoctor 0.1 misread,
captured on a GPU machine by bench/device/gpu_truth.sh (docs/gpu-truth.md): the topology matrix
with its header underlined by terminal escapes, and `nvidia-smi nvlink -s` answering nothing."""

import pytest

from distdoctor.checks import gpu, gpuhealth
from distdoctor.model import Status
from distdoctor.parsers.nvidia_smi import parse_topo_matrix
from distdoctor.testing import FakeHost, fixture_text, run_check
from tests.conftest import data_path

TOPO = fixture_text(data_path("nvidia_smi_topo", "topo_1xH100_580_ansi_underlined_header.txt"))
QX = fixture_text(data_path("nvidia_smi_q", "qx_580_H100SXM_single_vm.xml"))
TABLE = fixture_text(data_path("nvidia_smi", "nvidia-smi_580_1xH100SXM_vm_cuda13.0.txt"))
# `--query-gpu` as distdoctor asked it there, with NVML off (DISTDOCTOR_NVML=0), byte for byte
QUERY_ARGS = ("--query-gpu=index,name,uuid,pci.bus_id,memory.total,persistence_mode,mig.mode.current,"
              "ecc.errors.uncorrected.volatile.total,clocks_throttle_reasons.active", "--format=csv,noheader,nounits")
QUERY = ("0, NVIDIA H100 80GB HBM3, GPU-8224b388-797a-aa50-1036-38dc218858d2, 00000000:00:06.0, 81559, Enabled, "
         "Disabled, 0, 0x0000000000000001\n")


def _node(**commands):
    cmds = {("nvidia-smi",): TABLE, ("nvidia-smi", "-q", "-x"): QX, ("nvidia-smi", "topo", "-m"): TOPO,
            ("nvidia-smi", "nvlink", "-s"): "", ("nvidia-smi", *QUERY_ARGS): QUERY}
    cmds.update({tuple(k.split()): v for k, v in commands.items()})
    return FakeHost(commands=cmds, env={"DISTDOCTOR_NVML": "0"})


def test_the_capture_holds_the_escapes_the_parser_must_drop():
    assert "\x1b[4mGPU0" in TOPO  # the capture is byte for byte what the driver wrote
    matrix = parse_topo_matrix(TOPO)
    assert [d.label for d in matrix.devices] == ["GPU0"]
    assert matrix.devices[0].cpu_affinity == "0-15"


@pytest.mark.parametrize("escape", ["\x1b[4m", "\x1b[1;32m", "\x1b[0m"])
def test_any_colour_or_underline_around_the_header_reads_the_same(escape):
    plain = parse_topo_matrix(TOPO.replace("\x1b[4m", "").replace("\x1b[0m", ""))
    coloured = parse_topo_matrix(TOPO.replace("\tGPU0\t", f"\t{escape}GPU0\x1b[0m\t", 1))
    assert coloured.devices == plain.devices and coloured.links == plain.links


def test_topology_on_one_gpu_is_not_a_warning():
    findings = run_check(gpu.p2p_topology, _node())
    assert findings and all(f.status in (Status.OK, Status.SKIP) for f in findings), findings
    assert not any("could not read" in f.summary for f in findings)


def test_an_empty_nvlink_answer_is_no_nvlink_not_unreadable():
    findings = run_check(gpuhealth.nvlink, _node())
    assert [f.status for f in findings] == [Status.SKIP]
    assert "no active NVLink" in findings[0].summary


def test_an_nvlink_answer_that_is_not_empty_and_unreadable_still_says_so():
    findings = run_check(gpuhealth.nvlink, _node(**{"nvidia-smi nvlink -s": "garbled \x00 bytes\n"}))
    assert [f.status for f in findings] == [Status.SKIP] and "not read" in findings[0].summary


def test_the_inventory_without_nvml_reads_the_real_table_and_query():
    findings = run_check(gpu.inventory, _node())
    assert [f.status for f in findings] == [Status.OK]
    assert findings[0].summary == "1 × NVIDIA H100 80GB HBM3"
