"""/proc/cpuinfo (the CPU model as x86 'model name', some arm64 kernels 'Model name' and
s390/mips 'cpu model' print it; the feature flags) and /proc/meminfo's MemTotal."""

from __future__ import annotations

_MODEL_KEYS = ("model name", "Model name", "cpu model")


def parse_cpu_model(text: str) -> str | None:
    """The first processor's model; None when no line names one (arm64 often prints none)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in _MODEL_KEYS:
            return value.strip() or None
    return None


def parse_cpu_flags(text: str) -> list[str]:
    """The first processor's feature flags (x86 `flags`, arm64 `Features`); [] without them."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return value.split()
    return []


def parse_mem_total_kib(meminfo: str) -> int | None:
    """MemTotal from /proc/meminfo, in kB as the kernel prints it; None when absent."""
    for line in meminfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key == "MemTotal":
            number = value.split()[0] if value.split() else ""
            return int(number) if number.isdigit() else None
    return None
