"""The health fields of one GPU through NVML, as the plain data nvidia-smi -q gives (the names of
distdoctor.parsers.nvidia_smi_query.QueryGpu), so that both sources are judged the same way."""

from __future__ import annotations

import uuid
from typing import Any, Callable

# NVML's clock-event reason bits (nvml.h, nvmlClocksEventReason*), named as nvidia-smi -q -x names them.
CLOCK_REASON_BITS = ((0x1, "idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                     (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                     (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
                     (0x100, "display_clock_setting"))
# nvmlGpuFabricState_t
FABRIC_STATES = {0: "", 1: "Not Started", 2: "In Progress", 3: "Completed"}
NVLINK_MAX_LINKS = 18
# nvmlNvLinkErrorCounter_t: DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT, DL_CRC_DATA
NVLINK_COUNTERS = ((0, "replay"), (1, "recovery"), (2, "crc"), (3, "crc_data"))


def _uuid(raw: Any) -> str:
    """nvmlGpuFabricInfo_t.clusterUuid (16 bytes, or a ctypes array of them) as 8-4-4-4-12 hex."""
    try:
        data = bytes(raw)[:16] if raw is not None else b""
    except (TypeError, ValueError):
        return ""
    if len(data) != 16:
        return ""
    return str(uuid.UUID(bytes=data))


def clock_reason_names(mask: int | None) -> tuple[str, ...]:
    if not isinstance(mask, int):
        return ()
    return tuple(name for bit, name in CLOCK_REASON_BITS if mask & bit)


def _field_uint(values: Any) -> int | None:
    """The unsigned value of a one-field nvmlDeviceGetFieldValues answer; None when it failed."""
    try:
        first = values[0]
        if first.nvmlReturn != 0:
            return None
        return int(first.value.ullVal if getattr(first, "valueType", 1) == 2 else first.value.uiVal)
    except (TypeError, IndexError, AttributeError, ValueError):
        return None


def read(pynvml: Any, handle: Any, ask: Callable[..., Any], reasons: int | None) -> dict[str, Any]:
    """One GPU's health fields; a field this GPU or nvidia-ml-py lacks is None."""
    remap = ask("nvmlDeviceGetRemappedRows", handle)
    ecc_mode = ask("nvmlDeviceGetEccMode", handle)
    sbe = ask("nvmlDeviceGetRetiredPages", handle,
              getattr(pynvml, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0))
    dbe = ask("nvmlDeviceGetRetiredPages", handle, getattr(pynvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
    pending = ask("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    pstate = ask("nvmlDeviceGetPerformanceState", handle)
    util = ask("nvmlDeviceGetUtilizationRates", handle)
    fabric = ask("nvmlDeviceGetGpuFabricInfo", handle)
    field = getattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)  # R570 drivers and nvidia-ml-py
    recovery = ask("nvmlDeviceGetFieldValues", handle, [field]) if field is not None else None
    links: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    for link in range(NVLINK_MAX_LINKS):
        state = ask("nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue  # not a link this GPU has
        links[str(link)] = bool(state)
        errors[str(link)] = {name: value for counter, name in NVLINK_COUNTERS
                             if (value := ask("nvmlDeviceGetNvLinkErrorCounter", handle, link, counter)) is not None}
    return {
        "ecc_enabled": None if ecc_mode is None else bool(ecc_mode[0]),
        "ecc_aggregate_uncorrectable": ask("nvmlDeviceGetTotalEccErrors", handle,
                                           getattr(pynvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                                           getattr(pynvml, "NVML_AGGREGATE_ECC", 1)),
        "retired_sbe": None if sbe is None else len(sbe),
        "retired_dbe": None if dbe is None else len(dbe),
        "retired_pending": None if pending is None else bool(pending),
        "remap_correctable": None if remap is None else int(remap[0]),
        "remap_uncorrectable": None if remap is None else int(remap[1]),
        "remap_pending": None if remap is None else bool(remap[2]),
        "remap_failure": None if remap is None else bool(remap[3]),
        "clock_reasons": list(clock_reason_names(reasons)),
        "pcie_gen_current": ask("nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "pcie_gen_max": ask("nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "pcie_width_current": ask("nvmlDeviceGetCurrPcieLinkWidth", handle),
        "pcie_width_max": ask("nvmlDeviceGetMaxPcieLinkWidth", handle),
        "performance_state": "" if not isinstance(pstate, int) or pstate > 15 else f"P{pstate}",
        "utilization": getattr(util, "gpu", None),
        "fabric_state": FABRIC_STATES.get(getattr(fabric, "state", 0), "") if fabric is not None else "",
        "fabric_status": ("Success" if getattr(fabric, "status", 1) == 0 else f"error {getattr(fabric, 'status', '?')}")
                         if fabric is not None and getattr(fabric, "state", 0) == 3 else "",
        # the NVLink domain, as nvidia-smi -q prints it (CliqueId, ClusterUUID), once the GPU joined it
        "fabric_clique": str(getattr(fabric, "cliqueId", "")) if fabric is not None and getattr(
            fabric, "state", 0) == 3 else "",
        "fabric_cluster_uuid": _uuid(getattr(fabric, "clusterUuid", None)) if fabric is not None and getattr(
            fabric, "state", 0) == 3 else "",
        # the driver's GPU Recovery Action as NVML's number (0 none); the facts name it as nvidia-smi does
        "recovery_action_code": _field_uint(recovery),
        "nvlink_active": links,
        "nvlink_errors": errors,
    }
