"""The two ways a node's GPUs are read give the same findings: every GPU health check run once
over a real `nvidia-smi -q` / `-q -x` capture (NVML unavailable, as with no driver library) and
once through NVML, where a stand-in `pynvml` answers each call with what the same capture says
and distdoctor's own NVML code (host/nvml.py, host/nvml_health.py) turns the answers into facts.
A field one path reads and the other does not shows up here as a different finding.

The plain `nvidia-smi` table (driver version only) and the kernel log are the same real captures
for every node: the checks judge them alike on both paths.
"""

import glob
import os
import re
import sys
import types
import uuid

import pytest

from distdoctor import checks as builtin
from distdoctor.host import nvml as host_nvml
from distdoctor.host.nvml_health import CLOCK_REASON_BITS
from distdoctor.parsers.nvidia_smi_query import parse_query
from distdoctor.testing import FakeHost, fixture_text, run_check
from tests.conftest import data_path

CAPTURES = sorted(os.path.basename(p) for p in glob.glob(data_path("nvidia_smi_q", "q*_*")) if not p.endswith(".json"))
# every GPU check that judges the GPUs' health (gpu.health and gpu.inventory read `--query-gpu`,
# gpu.dcgm-health reads dcgmi: neither has two paths to compare)
IDS = ("gpu.memory-errors", "gpu.xid", "gpu.nvlink", "gpu.pcie-link", "gpu.throttle", "gpu.device-nodes",
       "gpu.peermem", "gpu.fabric", "gpu.mig-consistency")
CHECKS = {c.id: c for c in builtin.CHECKS if c.id in IDS}
TABLE = fixture_text(data_path("nvidia_smi", "nvidia-smi_575_4xRTX6000Ada_cuda12.9.txt"))
KMSG = fixture_text(data_path("kernel_log", "dmesg_iso_xid48_xid63_xid94_dbe.log"))
SOURCE_WORDS = re.compile(r"\((?:nvml|nvidia-smi -q(?: -x)?)\)|nvidia-smi -q(?: -x)?|nvml")


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


def capture_backed_pynvml(report):
    """A pynvml whose answers are the capture's values, in nvidia-ml-py's types; a value the
    capture does not show raises NVMLError_NotSupported, as the library does."""
    m = types.ModuleType("pynvml")
    m.NVMLError, m.NVMLError_NotSupported, m.NVMLError_LibraryNotFound = (NVMLError, NVMLError_NotSupported,
                                                                          NVMLError_LibraryNotFound)
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC, m.NVML_AGGREGATE_ECC = 1, 0, 1
    m.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, m.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 0, 1
    gpus = report.gpus

    def given(value, shape=lambda v: v):
        if value is None or value == "":
            raise NVMLError_NotSupported("Not Supported")
        return shape(value)

    def gpu(handle):
        return gpus[handle[1]]

    def remap(h):
        g = gpu(h)
        if g.remap_pending is None and g.remap_failure is None:
            raise NVMLError_NotSupported("Not Supported")
        return (g.remap_correctable or 0, g.remap_uncorrectable or 0, int(bool(g.remap_pending)),
                int(bool(g.remap_failure)))

    def fabric(h):
        g = gpu(h)
        states = {"Not Started": 1, "In Progress": 2, "Completed": 3}
        if g.fabric_state not in states:
            raise NVMLError_NotSupported("Not Supported")
        return types.SimpleNamespace(state=states[g.fabric_state], status=0 if g.fabric_status in ("", "Success") else 1,
                                     cliqueId=int(g.fabric_clique) if g.fabric_clique.isdigit() else 0,
                                     clusterUuid=uuid.UUID(g.fabric_cluster_uuid).bytes if g.fabric_cluster_uuid else
                                     bytes(16))

    major, _, minor = report.cuda_version.partition(".")
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: report.driver_version
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: given(major and int(major) * 1000 + int(minor or 0) * 10)
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    m.nvmlDeviceGetName = lambda h: gpu(h).name
    m.nvmlDeviceGetUUID = lambda h: gpu(h).uuid
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpu(h).bus_id)
    m.nvmlDeviceGetPersistenceMode = lambda h: given(gpu(h).persistence_mode, int)
    m.nvmlDeviceGetMigMode = lambda h: given(gpu(h).mig_mode, lambda v: (int(v), int(v)))
    m.nvmlDeviceGetMaxMigDeviceCount = lambda h: 0
    m.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: given(
        gpu(h).ecc_volatile_uncorrectable if counter == 0 else gpu(h).ecc_aggregate_uncorrectable)
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: sum(
        bit for bit, name in CLOCK_REASON_BITS if name in gpu(h).clock_reasons)
    m.nvmlDeviceGetRemappedRows = remap
    m.nvmlDeviceGetEccMode = lambda h: given(gpu(h).ecc_enabled, lambda v: (int(v), int(v)))
    m.nvmlDeviceGetRetiredPages = lambda h, cause: given(
        gpu(h).retired_sbe if cause == 0 else gpu(h).retired_dbe, lambda n: [4096 * i for i in range(n)])
    m.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: given(gpu(h).retired_pending, int)
    m.nvmlDeviceGetPerformanceState = lambda h: given(gpu(h).performance_state, lambda p: int(p[1:]))
    m.nvmlDeviceGetUtilizationRates = lambda h: given(gpu(h).utilization, lambda u: types.SimpleNamespace(gpu=u))
    m.nvmlDeviceGetGpuFabricInfo = fabric
    m.nvmlDeviceGetNvLinkState = lambda h, link: given(None)  # no NVLink in these captures' NVML view
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: given(gpu(h).pcie_gen_current)
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: given(gpu(h).pcie_gen_max)
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: given(gpu(h).pcie_width_current)
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: given(gpu(h).pcie_width_max)
    return m


def nvml_snapshot(monkeypatch, report):
    monkeypatch.setitem(sys.modules, "pynvml", capture_backed_pynvml(report))
    return host_nvml._nvml_query()


def common():
    return {"files": {"/dev/kmsg": KMSG}, "hostname": "gpu01"}


def findings(host, check_id):
    params = {"window_seconds": 0.01} if check_id == "gpu.throttle" else None  # the samples, not the wait
    return [(f.status, f.action, SOURCE_WORDS.sub("SOURCE", f.summary), f.subject)
            for f in run_check(CHECKS[check_id], host, params)]


@pytest.mark.parametrize("capture", CAPTURES)
def test_nvidia_smi_and_nvml_give_the_same_findings(capture, monkeypatch):
    text = fixture_text(data_path("nvidia_smi_q", capture))
    report = parse_query(text)
    xml = capture.endswith(".xml")
    # what `nvidia-smi nvlink -s` prints for GPUs without NVLink: their headers, no link lines
    links = "".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in report.gpus)
    smi = {("nvidia-smi",): TABLE, ("nvidia-smi", "nvlink", "-s"): links,
           ("nvidia-smi", "-q", "-x") if xml else ("nvidia-smi", "-q"): text,
           ("nvidia-smi", "-q", "-x", "-d", "PERFORMANCE") if xml else ("nvidia-smi", "-q", "-d", "PERFORMANCE"): text}
    if not xml:
        smi[("nvidia-smi", "-q", "-x")] = "<nvidia_smi_log>\x01"  # as drivers whose XML does not parse
    snapshot = nvml_snapshot(monkeypatch, report)
    assert snapshot["status"] == "ok" and len(snapshot["gpus"]) == len(report.gpus)
    for check_id in IDS:
        by_smi = findings(FakeHost(commands=smi, nvml={"status": "unavailable", "error": "no driver library"},
                                   **common()), check_id)
        by_nvml = findings(FakeHost(nvml=snapshot, **common()), check_id)
        assert by_smi == by_nvml, check_id


def test_every_gpu_health_check_is_compared():
    hardware = {c.id for c in builtin.CHECKS if c.id.startswith("gpu.") and "health" in c.tags}
    assert hardware - set(IDS) == {"gpu.health", "gpu.dcgm-health"}, "a new GPU health check needs its parity here"
