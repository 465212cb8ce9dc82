"""NVML (nvidia-ml-py), asked on a daemon thread that is abandoned at its timeout."""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from distdoctor import bounded
from distdoctor.host import nvml_health


class Nvml:
    env: Mapping[str, str]

    def nvml_snapshot(self, timeout: float = 4.0) -> dict[str, Any]:
        """The driver and every GPU as NVML (nvidia-ml-py) reports them, as plain data:
        {"status": "ok" | "unavailable" | "error" | "hung", "error": str, "driver_version": str,
        "cuda_version": int (12040 is 12.4), "gpus": [{index, name, uuid, bus_id, memory_total_mib,
        persistence_mode, mig_mode, ecc_uncorrected, throttle_reasons, mig_devices, health}]} (health:
        host/nvml_health.py).
        "unavailable" (no nvidia-ml-py, no libnvidia-ml: a login node) costs a failed dlopen;
        callers then ask nvidia-smi. NVML blocks on a GPU that fell off the bus, so the calls
        run on a daemon thread that is abandoned after `timeout`. DISTDOCTOR_NVML=0 turns NVML
        off (tests that stand in for nvidia-smi on a machine that has a driver)."""
        if self.env.get("DISTDOCTOR_NVML", "").strip() == "0":
            return {"status": "unavailable", "error": "NVML disabled by DISTDOCTOR_NVML=0"}
        if "pynvml" not in sys.modules and not os.path.exists("/proc/driver/nvidia"):
            # No NVIDIA kernel module: NVML cannot answer, and importing it costs a login node
            # tens of milliseconds of `distdoctor check` (once imported, asking costs nothing).
            return {"status": "unavailable", "error": "no NVIDIA kernel driver is loaded (no /proc/driver/nvidia)"}
        try:
            answer = bounded.call(_nvml_query, timeout, name="nvml")
        except Exception as exc:  # an nvidia-ml-py that does not match the driver: fall back
            return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        if isinstance(answer, bounded.TimedOut):
            return {"status": "hung", "error": f"NVML did not answer within {timeout:g} s"}
        return answer or {"status": "error", "error": "NVML query ended without a result"}


def _nvml_query() -> dict[str, Any]:
    try:
        import pynvml
    except ImportError:
        return {"status": "unavailable", "error": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return {"status": "unavailable", "error": "libnvidia-ml.so.1 not found"}
    except pynvml.NVMLError as exc:
        return {"status": "error", "error": str(exc)}
    except OSError as exc:  # a libnvidia-ml that is there but cannot be loaded
        return {"status": "unavailable", "error": str(exc)}

    def text(value: Any) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def ask(name: str, *args, default=None):
        # By name: older nvidia-ml-py releases lack some functions (MIG, _v2 calls).
        func = getattr(pynvml, name, None)
        if func is None:
            return default
        try:
            return func(*args)
        except pynvml.NVMLError:
            return default

    try:
        result: dict[str, Any] = {
            "status": "ok", "error": "",
            "driver_version": text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_version": ask("nvmlSystemGetCudaDriverVersion_v2"),
            "gpus": [],
        }
        reasons = "nvmlDeviceGetCurrentClocksEventReasons" if hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons") \
            else "nvmlDeviceGetCurrentClocksThrottleReasons"
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pci = ask("nvmlDeviceGetPciInfo", handle)
            memory = ask("nvmlDeviceGetMemoryInfo", handle)
            mig = ask("nvmlDeviceGetMigMode", handle)
            persistence = ask("nvmlDeviceGetPersistenceMode", handle)
            mig_devices = []
            if mig and mig[0]:
                for slot in range(ask("nvmlDeviceGetMaxMigDeviceCount", handle, default=0) or 0):
                    child = ask("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
                    if child is None:
                        continue
                    name = text(ask("nvmlDeviceGetName", child, default=""))
                    mig_devices.append({"index": slot, "uuid": text(ask("nvmlDeviceGetUUID", child, default="")),
                                        "profile": name.rsplit("MIG ", 1)[-1] if "MIG " in name else name})
            result["gpus"].append({
                "index": index,
                "name": text(ask("nvmlDeviceGetName", handle, default="")),
                "uuid": text(ask("nvmlDeviceGetUUID", handle, default="")) or None,
                "bus_id": text(pci.busId) if pci is not None else None,
                "memory_total_mib": memory.total // (1024 * 1024) if memory is not None else None,
                "persistence_mode": None if persistence is None else bool(persistence),
                "mig_mode": None if mig is None else bool(mig[0]),
                "ecc_uncorrected": ask("nvmlDeviceGetTotalEccErrors", handle,
                                       pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
                "throttle_reasons": ask(reasons, handle),
                "mig_devices": mig_devices,
            })
            try:
                result["gpus"][-1]["health"] = nvml_health.read(pynvml, handle, ask, result["gpus"][-1]["throttle_reasons"])
            except Exception:  # noqa: BLE001 - a binding that lacks a call: the health facts ask nvidia-smi instead
                pass
        return result
    except pynvml.NVMLError as exc:
        return {"status": "error", "error": str(exc)}
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass

