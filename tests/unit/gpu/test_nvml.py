"""Host.nvml_snapshot's mapping of NVML answers to plain data. There is no NVIDIA driver here, so
a stand-in `pynvml` module answers with the types nvidia-ml-py returns; a real library would be
found first only where one is installed and loadable."""

import sys
import time
import types

import pytest

from distdoctor.host import Host


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


def stand_in(gpus, init_error=None, **overrides):
    m = types.ModuleType("pynvml")
    m.NVMLError, m.NVMLError_LibraryNotFound = NVMLError, NVMLError_LibraryNotFound
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC = 1, 0
    state = {"shutdown": 0}

    def init():
        if init_error:
            raise init_error

    def need(value):
        if isinstance(value, Exception):
            raise value
        return value

    m.nvmlInit = init
    m.nvmlShutdown = lambda: state.__setitem__("shutdown", state["shutdown"] + 1)
    m.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    m.nvmlDeviceGetName = lambda h: gpus[h[1]]["name"] if h[0] == "gpu" else f"{gpus[h[1]]['name']} MIG 1g.10gb"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h[1]}" if h[0] == "gpu" else f"MIG-{h[1]}-{h[2]}"
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=f"00000000:{h[1]:02X}:00.0")
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 * 1024 ** 3)
    m.nvmlDeviceGetPersistenceMode = lambda h: need(gpus[h[1]].get("persistence", 1))
    m.nvmlDeviceGetMigMode = lambda h: need(gpus[h[1]].get("mig", (0, 0)))
    m.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7
    m.nvmlDeviceGetMigDeviceHandleByIndex = lambda h, slot: ("mig", h[1], slot) if slot < 2 else need(
        NVMLError("Not Found"))
    m.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: need(gpus[h[1]].get("ecc", 0))
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: gpus[h[1]].get("reasons", 1)
    for name, value in overrides.items():
        setattr(m, name, value)
    m.state = state
    return m


@pytest.fixture
def with_module(monkeypatch):
    def install(module):
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return install


def test_snapshot_maps_every_field(with_module):
    module = with_module(stand_in([
        {"name": "NVIDIA A100-SXM4-80GB", "ecc": 3, "reasons": 0x40},
        {"name": "NVIDIA A100-SXM4-80GB", "persistence": 0, "mig": (1, 1)},
        {"name": "NVIDIA A100-SXM4-80GB", "mig": NVMLError_NotSupported("Not Supported"),
         "ecc": NVMLError_NotSupported("Not Supported")},
    ]))
    snap = Host(env={}).nvml_snapshot(timeout=4)
    assert (snap["status"], snap["driver_version"], snap["cuda_version"]) == ("ok", "550.54.15", 12040)
    first, second, third = snap["gpus"]
    health = first.pop("health")  # host/nvml_health.py: the fields nvidia-smi -q gives
    assert health["clock_reasons"] == ["hw_thermal_slowdown"] and health["remap_pending"] is None
    assert health["nvlink_active"] == {} and health["performance_state"] == ""
    assert first == {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-0", "bus_id": "00000000:00:00.0",
                     "memory_total_mib": 81920, "persistence_mode": True, "mig_mode": False, "ecc_uncorrected": 3,
                     "throttle_reasons": 0x40, "mig_devices": []}
    assert second["persistence_mode"] is False and second["mig_mode"] is True
    assert second["mig_devices"] == [{"index": 0, "uuid": "MIG-1-0", "profile": "1g.10gb"},
                                     {"index": 1, "uuid": "MIG-1-1", "profile": "1g.10gb"}]
    assert third["mig_mode"] is None and third["ecc_uncorrected"] is None
    assert module.state["shutdown"] == 1


def test_snapshot_feeds_the_gpu_facts(with_module):
    from distdoctor.facts import Facts

    with_module(stand_in([{"name": "NVIDIA H100 80GB HBM3"}] * 2))
    facts = Facts(Host(env={"PATH": "/nonexistent"}))
    assert (facts.gpu_driver.driver_version, facts.gpu_driver.cuda_version, facts.gpu_driver.source) == \
        ("550.54.15", "12.4", "nvml")
    assert [g.uuid for g in facts.gpus.gpus] == ["GPU-0", "GPU-1"]


def test_library_not_found_is_unavailable(with_module):
    with_module(stand_in([], init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found")))
    assert Host(env={}).nvml_snapshot()["status"] == "unavailable"


def test_driver_not_loaded_is_an_error(with_module):
    with_module(stand_in([], init_error=NVMLError("Driver Not Loaded")))
    snap = Host(env={}).nvml_snapshot()
    assert snap == {"status": "error", "error": "Driver Not Loaded"}


def test_old_binding_without_newer_functions(with_module):
    module = stand_in([{"name": "Tesla V100-SXM2-32GB"}])
    del module.nvmlSystemGetCudaDriverVersion_v2, module.nvmlDeviceGetMigMode
    del module.nvmlDeviceGetCurrentClocksEventReasons
    module.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 4
    with_module(module)
    snap = Host(env={}).nvml_snapshot()
    assert snap["status"] == "ok" and snap["cuda_version"] is None
    assert snap["gpus"][0]["mig_mode"] is None and snap["gpus"][0]["throttle_reasons"] == 4


def test_unexpected_exception_becomes_an_error(with_module):
    def broken():
        raise RuntimeError("ctypes mismatch")
    with_module(stand_in([{"name": "x"}], nvmlDeviceGetCount=broken))
    snap = Host(env={}).nvml_snapshot()
    assert snap["status"] == "error" and "RuntimeError: ctypes mismatch" in snap["error"]


def test_hanging_nvml_is_abandoned(with_module):
    with_module(stand_in([], nvmlSystemGetDriverVersion=lambda: time.sleep(30)))
    start = time.monotonic()
    snap = Host(env={}).nvml_snapshot(timeout=0.5)
    assert snap["status"] == "hung" and time.monotonic() - start < 2


def test_disabled_by_environment(with_module):
    with_module(stand_in([{"name": "x"}]))
    assert Host(env={"DISTDOCTOR_NVML": "0"}).nvml_snapshot()["status"] == "unavailable"
