"""Facts for node hardware health: each GPU's ECC/remap/PCIe/clock/fabric state, NVLink, the
kernel log's hardware events, and InfiniBand port counters.

GPU health comes from NVML when it loads (the same snapshot facts.gpu uses, with its `health`
part) and otherwise from `nvidia-smi -q -x` (the text form when a driver's XML cannot be read);
both give the same record (parsers/nvidia_smi_query.QueryGpu), so every check judges one thing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from distdoctor.facts import fact
from distdoctor.hardware import recovery
from distdoctor.facts.gpu import GpuProblem, command_problem, unreadable
from distdoctor.parsers import ParseError
from distdoctor.parsers.dcgmi import DcgmHealth, parse_health
from distdoctor.parsers.fabric_manager import FabricManagerLog, parse_fabric_manager_log
from distdoctor.parsers.kernel_log import KernelEvent, KernelLog, parse_kernel_log
from distdoctor.parsers.nvidia_smi_query import QueryGpu, parse_query_text, parse_query_xml
from distdoctor.parsers.nvlink import NvlinkGpu, parse_nvlink_errors, parse_nvlink_status

JOURNALCTL_TIMEOUT = 8.0
KMSG_TIMEOUT = 2.0
SYS_IB = "/sys/class/infiniband"
FM_LOG = "/var/log/fabricmanager.log"  # the fabric manager's default LOG_FILE_NAME


@dataclass(frozen=True)
class GpuHealth:
    gpus: tuple[QueryGpu, ...] = ()
    source: str = ""  # "nvml", "nvidia-smi -q -x", "nvidia-smi -q"
    problem: GpuProblem | None = None
    nvlink: tuple[NvlinkGpu, ...] = ()  # from NVML when it answered for links, else empty


def _nvml_gpu(g: dict[str, Any]) -> tuple[QueryGpu, NvlinkGpu | None]:
    h = g.get("health") or {}
    given = ("index", "bus_id", "name", "uuid", "persistence_mode", "mig_mode", "ecc_volatile_uncorrectable")
    values = {k: v for k, v in h.items() if k in QueryGpu.__dataclass_fields__ and k not in given}
    values["clock_reasons"] = tuple(values.get("clock_reasons") or ())
    code = h.get("recovery_action_code")
    # nvidia-smi's "None" reads as "" (nothing to do): NVML's 0 likewise
    values["recovery_action"] = recovery.word_for_code(int(code)) if isinstance(code, int) and code else ""
    gpu = QueryGpu(index=int(g["index"]), bus_id=g.get("bus_id") or "", name=g.get("name") or "",
                   uuid=g.get("uuid") or "", persistence_mode=g.get("persistence_mode"), mig_mode=g.get("mig_mode"),
                   ecc_volatile_uncorrectable=g.get("ecc_uncorrected"), **values)
    links = h.get("nvlink_active") or {}
    if not links:
        return gpu, None
    errors = {int(k): dict(v) for k, v in (h.get("nvlink_errors") or {}).items()}
    return gpu, NvlinkGpu(gpu.index, gpu.name, gpu.uuid, {int(k): (1.0 if v else None) for k, v in links.items()}, errors)


@fact
def gpu_health(facts) -> GpuHealth:
    driver = facts.gpu_driver
    if driver.problem is not None:
        return GpuHealth(source=driver.source, problem=driver.problem)
    snapshot = facts.nvml
    if driver.source == "nvml" and all("health" in g for g in snapshot.get("gpus", [])):
        pairs = [_nvml_gpu(g) for g in snapshot.get("gpus", [])]
        return GpuHealth(tuple(p[0] for p in pairs), snapshot.get("source", "nvml"),
                         nvlink=tuple(p[1] for p in pairs if p[1] is not None))
    smi = facts.nvidia_smi
    result = smi.run("-q", "-x")
    if result.ok:
        try:
            return GpuHealth(parse_query_xml(result.stdout).gpus, "nvidia-smi -q -x")
        except ParseError:
            pass  # some drivers' XML does not parse (a stray byte); the text form says the same
    if result.timed_out:
        return GpuHealth(source="nvidia-smi -q -x", problem=command_problem(result))
    text = smi.run("-q")
    if not text.ok:
        return GpuHealth(source="nvidia-smi -q", problem=command_problem(text))
    try:
        return GpuHealth(parse_query_text(text.stdout).gpus, "nvidia-smi -q")
    except ParseError as exc:
        return GpuHealth(source="nvidia-smi -q", problem=unreadable("nvidia-smi -q", exc, text))


@dataclass(frozen=True)
class NvlinkState:
    gpus: tuple[NvlinkGpu, ...] = ()  # links and their error counters, merged per GPU
    source: str = ""
    problem: str = ""


@fact
def nvlink(facts) -> NvlinkState:
    """Each GPU's NVLink links (active or not) and error counters (NVML, else nvidia-smi nvlink -s/-e)."""
    health = facts.gpu_health
    if health.problem is not None:
        return NvlinkState(problem=health.problem.summary)
    if health.source != "nvml" and health.source.startswith("pasted"):
        return NvlinkState(problem="not in the paste")
    if health.source == "nvml":
        return NvlinkState(health.nvlink, "nvml")
    smi = facts.nvidia_smi
    status = smi.run("nvlink", "-s")
    if not status.ok:
        return NvlinkState(source="nvidia-smi nvlink -s", problem=status.describe())
    if not status.stdout.strip():
        # Driver 580 on a GPU with no NVLink to show (a PCIe card, or an SXM module passed into a VM
        # without its NVSwitch links) answers nothing, successfully: no links, not an unreadable answer.
        return NvlinkState((), "nvidia-smi nvlink -s")
    try:
        gpus = parse_nvlink_status(status.stdout)
    except ParseError as exc:
        return NvlinkState(source="nvidia-smi nvlink -s", problem=str(exc))
    if not any(g.links for g in gpus):
        return NvlinkState(gpus, "nvidia-smi nvlink -s")  # no NVLink: nothing to count
    errors = smi.run("nvlink", "-e")
    counted: dict[int, dict[int, dict[str, int]]] = {}
    if errors.ok:
        try:
            counted = {g.index: g.errors for g in parse_nvlink_errors(errors.stdout)}
        except ParseError:
            counted = {}
    merged = tuple(replace(g, errors=counted.get(g.index, {})) for g in gpus)
    return NvlinkState(merged, "nvidia-smi nvlink -s/-e")


@dataclass(frozen=True)
class KernelLogFact:
    log: KernelLog | None = None
    source: str = ""  # "/dev/kmsg", "journalctl -k", "dmesg"
    now: float = 0.0  # the node's clock when read
    uptime: float | None = None  # seconds since boot when read
    problem: str = ""  # why no source could be read
    tried: tuple[str, ...] = field(default_factory=tuple)

    def wall_time(self, event: KernelEvent) -> float | None:
        if event.time is not None:
            return event.time
        if event.uptime is not None and self.uptime is not None:
            return self.now - (self.uptime - event.uptime)
        return None

    def within(self, event: KernelEvent, window_s: float) -> bool:
        """In the window, or undated (a log read since boot counts its undated lines as recent)."""
        moment = self.wall_time(event)
        return moment is None or moment >= self.now - window_s


def _uptime(host) -> float | None:
    try:
        text = host.read_text("/proc/uptime") or ""
        return float(text.split()[0])
    except (OSError, ValueError, IndexError):
        return None


@fact
def kernel_log(facts) -> KernelLogFact:
    """The hardware events in this boot's kernel log: /dev/kmsg (non-destructive), else
    `journalctl -k -b`, else `dmesg`; the first that can be read."""
    host = facts.host
    now = host.time()
    uptime = _uptime(host)
    year = time.gmtime(now).tm_year
    tried: list[str] = []
    try:
        text = host.read_kmsg(timeout=KMSG_TIMEOUT)
    except OSError as exc:
        tried.append(f"/dev/kmsg: {exc.strerror or exc}")
        text = None
    else:
        if text is None:
            tried.append("/dev/kmsg: absent")
    if text:
        return KernelLogFact(parse_kernel_log(text, year), "/dev/kmsg", now, uptime, "", tuple(tried))
    for argv, name in ((["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"], "journalctl -k"),
                       (["dmesg"], "dmesg")):
        result = host.run(argv, timeout=JOURNALCTL_TIMEOUT)
        if result.ok and result.stdout.strip():
            return KernelLogFact(parse_kernel_log(result.stdout, year), name, now, uptime, "", tuple(tried))
        tried.append(f"{name}: {result.describe() if not result.ok else 'empty'}")
    return KernelLogFact(None, "", now, uptime, "; ".join(tried), tuple(tried))


@dataclass(frozen=True)
class IbPortCounters:
    hca: str
    port: int
    counters: dict[str, int]
    state: str = ""
    phys_state: str = ""
    link_layer: str = ""


def read_ib_counters(host, ports) -> tuple[IbPortCounters, ...]:
    """The counters of each (hca, port, state, phys_state, link_layer) under /sys/class/infiniband;
    an attribute that cannot be read (EINVAL on a down link) is left out."""
    out = []
    for hca, port, state, phys, layer in ports:
        base = f"{SYS_IB}/{hca}/ports/{port}/counters"
        values: dict[str, int] = {}
        try:
            names = host.list_dir(base) or []
        except OSError:
            names = []
        for name in names:
            try:
                text = (host.read_text(f"{base}/{name}", max_bytes=64) or "").strip()
            except OSError:
                continue
            if text.isdigit():
                values[name] = int(text)
        out.append(IbPortCounters(hca, port, values, state, phys, layer))
    return tuple(out)


@dataclass(frozen=True)
class IbCounters:
    ports: tuple[IbPortCounters, ...] = ()
    read_at: float = 0.0  # monotonic seconds, for a second reading's rate
    uptime: float | None = None


@fact
def ib_counters(facts) -> IbCounters:
    table = facts.infiniband
    keys = [(p.hca, p.port, p.state, p.phys_state, p.link_layer) for p in table.ports]
    started = time.monotonic()
    return IbCounters(read_ib_counters(facts.host, keys), started, _uptime(facts.host))


@fact
def ib_firmware(facts) -> dict[str, str]:
    """Each HCA's firmware version (/sys/class/infiniband/<hca>/fw_ver)."""
    out = {}
    for hca in facts.infiniband.hcas:
        try:
            text = facts.host.read_text(f"{SYS_IB}/{hca}/fw_ver", max_bytes=128)
        except OSError:
            text = None
        if text and text.strip():
            out[hca] = text.strip()
    return out


@dataclass(frozen=True)
class FabricManagerState:
    log: FabricManagerLog | None = None
    source: str = ""
    problem: str = ""


@fact
def fabric_manager_log(facts) -> FabricManagerState:
    """What the fabric manager logged: its log file, else its journal for this boot."""
    host = facts.host
    try:
        text = host.read_text(FM_LOG, max_bytes=16 * 1024 * 1024)
    except OSError as exc:
        text, problem = None, f"{FM_LOG}: {exc.strerror or exc}"
    else:
        problem = "" if text is not None else f"no {FM_LOG}"
    if text:
        return FabricManagerState(parse_fabric_manager_log(text), FM_LOG)
    result = host.run(["journalctl", "-u", "nvidia-fabricmanager", "-b", "--no-pager", "-q"], timeout=JOURNALCTL_TIMEOUT)
    if result.ok and result.stdout.strip():
        return FabricManagerState(parse_fabric_manager_log(result.stdout), "journalctl -u nvidia-fabricmanager")
    return FabricManagerState(problem=f"{problem}; journalctl: {result.describe() if not result.ok else 'empty'}")


DCGMI_TIMEOUT = 10.0  # `dcgmi health -c` answers from the host engine's cache in well under a second


@dataclass(frozen=True)
class DcgmHealthState:
    """`dcgmi health -c`: the report, or why there is none (state: absent, hung, error, ok)."""
    health: DcgmHealth | None = None
    state: str = "absent"
    detail: str = ""
    seconds: float = 0.0


@fact
def dcgm_health(facts) -> DcgmHealthState:
    """DCGM's passive health watches, where dcgmi is installed; bounded by DCGMI_TIMEOUT."""
    host = facts.host
    if host.which("dcgmi") is None:
        return DcgmHealthState()
    result = host.run(["dcgmi", "health", "-c"], timeout=DCGMI_TIMEOUT)
    if result.missing:
        return DcgmHealthState()
    if result.timed_out:
        return DcgmHealthState(state="hung", detail=result.describe(), seconds=DCGMI_TIMEOUT)
    text = (result.stdout or "") + "\n" + (result.stderr or "")
    try:
        return DcgmHealthState(parse_health(text), "ok", "", result.duration or 0.0)
    except ParseError:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        return DcgmHealthState(state="error", detail=f"{result.describe()}: {first[:200]}" if first
                               else result.describe())
