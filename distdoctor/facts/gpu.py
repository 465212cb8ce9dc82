"""Facts for the 'gpu' area: the driver, the GPUs, and how they are wired to each other and to NICs.

NVML (nvidia-ml-py) answers the driver and per-GPU questions when libnvidia-ml is loadable; it is
one dlopen and no process. Otherwise `nvidia-smi` does. The topology matrix always comes from
`nvidia-smi topo -m`: NVML has no single call for it.

A hung `nvidia-smi` is what a GPU that fell off the bus looks like. Every call here is bounded by
NVIDIA_SMI_TIMEOUT, shorter than any gpu check's deadline, so the check (not the engine) says what
a hang means; after one call has hung, later calls are not made at all, so one sick GPU costs one
timeout, not one per check.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from distdoctor.facts import fact
from distdoctor.host import CommandResult
from distdoctor.parsers import ParseError
from distdoctor.parsers.nvidia_smi import (
    BASIC_QUERY_FIELDS, QUERY_FIELDS, Gpu, MigDevice, SmiTable, TopoMatrix, parse_list_gpus,
    parse_query_gpu, parse_table, parse_topo_matrix,
)

NVIDIA_SMI_TIMEOUT = 8.0
NVML_TIMEOUT = 4.0
# Every gpu check's deadline: room for one hung call plus the quick ones before it.
CHECK_TIMEOUT = 20.0

# Drivers before R410 print no "CUDA Version" in the header; the minimum driver of each CUDA
# release (CUDA toolkit release notes, table 3) gives the highest CUDA such a driver runs.
_OLD_DRIVER_CUDA = (((396, 26), "9.2"), ((390, 46), "9.1"), ((384, 81), "9.0"), ((367, 48), "8.0"),
                    ((352, 31), "7.5"), ((346, 46), "7.0"))
# The Linux x86_64 driver each CUDA toolkit release needs (NVIDIA's CUDA Toolkit release
# notes, table 3): a driver supports every CUDA up to the newest row it meets. Used where only
# the driver version is known (a pasted collect_env); a live node asks the driver itself.
_DRIVER_CUDA = (((570, 26), "12.8"), ((560, 28), "12.6"), ((555, 42), "12.5"), ((550, 54), "12.4"),
                ((545, 23), "12.3"), ((535, 54), "12.2"), ((530, 30), "12.1"), ((525, 60), "12.0"),
                ((520, 61), "11.8"), ((515, 43), "11.7"), ((510, 39), "11.6"), ((495, 29), "11.5"),
                ((470, 42), "11.4"), ((465, 19), "11.3"), ((460, 27), "11.2"), ((455, 23), "11.1"),
                ((450, 36), "11.0"), ((440, 33), "10.2"), ((418, 39), "10.1"), ((410, 48), "10.0"))


@dataclass(frozen=True)
class GpuProblem:
    """Why the GPUs could not be judged; checks turn it into their finding."""

    state: str  # "absent" (no driver), "no-devices", "error", "hung", "unreadable"
    summary: str
    explanation: str = ""
    fix: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)


def _hung(what: str, timeout: float) -> GpuProblem:
    return GpuProblem(
        "hung", f"{what} did not answer within {timeout:g} s — a GPU that fell off the bus or a hung driver "
                "looks like this",
        explanation="Every NVML client blocks when a GPU has dropped off the PCIe bus (Xid 79) or the driver is "
                    "stuck in the kernel: CUDA jobs and NCCL initialisation hang the same way. The node needs "
                    "attention before it runs jobs.",
        fix="dmesg -T | grep -iE 'NVRM|Xid'   # then drain the node and reboot it: "
            "scontrol update nodename=$(hostname -s) state=drain reason='GPU hung'",
        evidence={"command": what, "timeout_s": timeout})


# nvidia-smi(1), RETURN VALUE, plus what the driver prints in each case.
_EXIT_CODES = {
    2: ("nvidia-smi rejected its arguments (a driver too old for this query?)", "", ""),
    3: ("the requested operation is not available on this GPU", "", ""),
    4: ("no permission to use the GPU device files",
        "nvidia-smi could not open /dev/nvidia*: the device files are missing in this container or the user "
        "lacks access to them.",
        "ls -l /dev/nvidia*   # in a container: run it with --gpus all (NVIDIA container toolkit)"),
    6: ("the NVIDIA driver is loaded but finds no GPU",
        "Inside a Slurm job without a GPU request the cgroup hides every GPU; in a container the devices were "
        "not passed in; otherwise the GPUs are not detected on the PCIe bus.",
        "lspci | grep -i nvidia   # on the bus? In a job, ask Slurm for the GPUs: srun --gpus-per-node=COUNT ..."),
    8: ("a GPU's external power cables are not properly attached", "", "# power the node off and reseat the GPU's power cables"),
    9: ("the NVIDIA driver is not loaded",
        "nvidia-smi exists but cannot talk to the kernel module (\"NVIDIA-SMI has failed because it couldn't "
        "communicate with the NVIDIA driver\"): the module failed to load, often after a kernel update without "
        "a rebuilt module (DKMS).",
        "sudo modprobe nvidia && dmesg -T | grep -i nvrm   # after a kernel update: reinstall the driver or "
        "run dkms autoinstall"),
    10: ("the NVIDIA kernel module detected an interrupt problem with a GPU", "",
         "dmesg -T | grep -iE 'NVRM|Xid'   # then reboot the node"),
    12: ("nvidia-smi cannot load the NVML library (libnvidia-ml.so)",
         "The driver's user-space libraries are missing: in a container the NVIDIA container toolkit did not "
         "mount them.", "ldconfig -p | grep libnvidia-ml   # containers: run with --gpus all"),
    13: ("this NVML is too old for the function nvidia-smi asked for", "", ""),
    14: ("a GPU's infoROM is corrupted",
         "The infoROM holds the GPU's ECC and configuration records; a corrupted one makes the GPU unreliable.",
         "nvidia-smi -q | grep -i inforom   # report the GPU to the vendor for repair"),
    15: ("a GPU has fallen off the bus or become inaccessible",
         "The driver lost the GPU (Xid 79): every job using it fails or hangs until the node is rebooted.",
         "dmesg -T | grep -iE 'NVRM|Xid'   # drain the node and reboot it"),
    18: ("the NVIDIA driver and library versions do not match",
         "The kernel module and the user-space libraries come from different driver versions, usually because "
         "the driver was upgraded and the node not rebooted (\"Failed to initialize NVML: Driver/library version "
         "mismatch\").",
         "cat /proc/driver/nvidia/version   # then reboot, or reload the modules: "
         "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia"),
}
_TEXT_CODES = (("couldn't communicate with the NVIDIA driver", 9), ("Driver/library version mismatch", 18),
               ("No devices were found", 6), ("fallen off the bus", 15), ("GPU is lost", 15),
               ("Insufficient Permissions", 4), ("NVML Shared Library Not Found", 12))


def command_problem(result: CommandResult) -> GpuProblem:
    """A failed nvidia-smi call as a problem: its documented exit codes and messages explained."""
    cmd = " ".join(result.argv)
    evidence = {"command": cmd, "exit_code": result.returncode,
                "output": (result.stderr or result.stdout).strip()[-500:]}
    if result.timed_out:
        return _hung(f"`{cmd}`", NVIDIA_SMI_TIMEOUT)
    if result.missing:
        return GpuProblem("absent", "no NVIDIA driver on this node (nvidia-smi is not on PATH)",
                          explanation="A login or CPU node has no GPU driver; nothing to check here. On a GPU node "
                                      "the driver is not installed or PATH lacks /usr/bin.",
                          fix="srun --gpus-per-node=1 distdoctor check --only gpu   # on a GPU node",
                          evidence=evidence)
    if result.error:
        return GpuProblem("error", f"{result.describe()}", evidence=evidence)
    output = result.stderr + result.stdout
    code = result.returncode
    for text, mapped in _TEXT_CODES:
        if text.lower() in output.lower():
            code = mapped
            break
    summary, explanation, fix = _EXIT_CODES.get(code, (None, "", ""))
    if summary is None:
        return GpuProblem("error", result.describe(),
                          explanation="nvidia-smi failed in a way its manual does not document (255: an internal "
                                      "driver error).", fix="dmesg -T | grep -iE 'NVRM|Xid'", evidence=evidence)
    state = "no-devices" if code == 6 else "error"
    return GpuProblem(state, f"{summary} (`{cmd}` exit {result.returncode})", explanation, fix, evidence)


def unreadable(what: str, exc: ParseError, result: CommandResult) -> GpuProblem:
    shown = result.stdout.strip().splitlines()[:3]
    return GpuProblem("unreadable", f"could not read the output of `{what}`: {exc}",
                      explanation="The command succeeded but printed something distdoctor does not understand "
                                  "(an empty answer, a cut-off matrix, garbled bytes, a new driver's format).",
                      fix=f"{what}   # run it by hand; if the output looks normal, report it to distdoctor with it",
                      evidence={"command": what, "first_lines": shown, "exit_code": result.returncode})


class NvidiaSmi:
    """Runs nvidia-smi under the per-call timeout and stops calling it once it has hung."""

    def __init__(self, host):
        self.host = host
        self.hung: CommandResult | None = None
        self._lock = threading.Lock()

    def run(self, *args: str) -> CommandResult:
        argv = ("nvidia-smi", *args)
        with self._lock:
            hung = self.hung
        if hung is not None:
            return CommandResult(argv, None, duration=hung.duration, timed_out=True)
        result = self.host.run(argv, timeout=NVIDIA_SMI_TIMEOUT)
        if result.timed_out:
            with self._lock:
                self.hung = self.hung or result
        return result


@fact
def nvidia_smi(facts) -> NvidiaSmi:
    return NvidiaSmi(facts.host)


@fact
def nvml(facts) -> dict[str, Any]:
    """NVML's snapshot (see Host.nvml_snapshot); status "unavailable" without a driver library."""
    return facts.host.nvml_snapshot(NVML_TIMEOUT)


def cuda_from_int(value: Any) -> str | None:
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def cuda_for_old_driver(driver: str) -> str | None:
    try:
        parts = tuple(int(p) for p in driver.split(".")[:2])
    except ValueError:
        return None
    for minimum, cuda in _OLD_DRIVER_CUDA:
        if parts >= minimum:
            return cuda
    return None


def cuda_for_driver(driver: str) -> str | None:
    """The newest CUDA a Linux driver of this version supports, from the release-notes table
    (older drivers through _OLD_DRIVER_CUDA); None when the version is unreadable."""
    try:
        parts = tuple(int(p) for p in driver.split(".")[:2])
    except ValueError:
        return None
    for minimum, cuda in _DRIVER_CUDA:
        if parts >= minimum:
            return cuda
    return cuda_for_old_driver(driver)


@dataclass(frozen=True)
class GpuDriver:
    driver_version: str | None = None
    cuda_version: str | None = None  # the highest CUDA version the driver supports
    cuda_field: str = ""  # "present", "N/A", "absent" (pre-R410 header), "derived" (from the driver version)
    source: str = ""  # "nvml" or "nvidia-smi"
    problem: GpuProblem | None = None
    table: SmiTable | None = None
    nvml_status: str = ""  # why NVML was not used, when it was not


@fact
def gpu_driver(facts) -> GpuDriver:
    snapshot = facts.nvml
    status = snapshot.get("status")
    if status == "ok":
        cuda = cuda_from_int(snapshot.get("cuda_version"))
        return GpuDriver(snapshot.get("driver_version"), cuda, "present" if cuda else "absent", "nvml")
    if status == "hung":
        return GpuDriver(source="nvml", problem=_hung("NVML", NVML_TIMEOUT))
    note = f"NVML {status}: {snapshot.get('error', '')}"
    result = facts.nvidia_smi.run()
    if not result.ok:
        return GpuDriver(source="nvidia-smi", problem=command_problem(result), nvml_status=note)
    try:
        table = parse_table(result.stdout)
    except ParseError as exc:
        return GpuDriver(source="nvidia-smi", problem=unreadable("nvidia-smi", exc, result), nvml_status=note)
    cuda, field_ = table.cuda_version, table.cuda_field
    if field_ == "absent":
        cuda = cuda_for_old_driver(table.driver_version)
        field_ = "derived" if cuda else "absent"
    return GpuDriver(table.driver_version, cuda, field_, "nvidia-smi", None, table, note)


@dataclass(frozen=True)
class GpuInventory:
    gpus: tuple[Gpu, ...] = ()
    source: str = ""  # "nvml" or "nvidia-smi"
    problem: GpuProblem | None = None
    notes: tuple[str, ...] = ()  # lines nvidia-smi printed instead of a GPU
    unreported: tuple[str, ...] = ()  # --query-gpu fields this driver does not know

    def by_index(self, index: int) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)


def _nvml_gpus(snapshot: dict[str, Any]) -> tuple[Gpu, ...]:
    gpus = []
    for g in snapshot.get("gpus", []):
        migs = tuple(MigDevice(m.get("profile", ""), int(m.get("index", 0)), m.get("uuid", ""))
                     for m in g.get("mig_devices", []))
        gpus.append(Gpu(int(g["index"]), g.get("name", ""), g.get("uuid"), g.get("bus_id"),
                        g.get("memory_total_mib"), g.get("persistence_mode"), g.get("mig_mode"),
                        g.get("ecc_uncorrected"), g.get("throttle_reasons"), migs))
    return tuple(gpus)


@fact
def gpus(facts) -> GpuInventory:
    driver = facts.gpu_driver
    if driver.problem is not None:
        return GpuInventory(source=driver.source, problem=driver.problem)
    if driver.source == "nvml":
        return GpuInventory(_nvml_gpus(facts.nvml), "nvml")
    smi = facts.nvidia_smi
    notes: list[str] = []
    fields = QUERY_FIELDS
    # A driver that lacks one field refuses the whole query ('Field "x" is not a valid field to
    # query.', exit 2): drop the field it names and ask again, down to the fields every driver has.
    for _attempt in range(len(QUERY_FIELDS) - len(BASIC_QUERY_FIELDS) + 1):
        result = smi.run(f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits")
        said = result.stdout + result.stderr
        if result.ok or not (result.returncode == 2 or "not a valid field" in said):
            break
        named = re.search(r'Field "([^"]+)" is not a valid field', said)
        if named and named.group(1) in fields and named.group(1) not in BASIC_QUERY_FIELDS:
            fields = tuple(f for f in fields if f != named.group(1))
        elif fields != BASIC_QUERY_FIELDS:
            fields = BASIC_QUERY_FIELDS
        else:
            break
    unreported = tuple(f for f in QUERY_FIELDS if f not in fields)
    if not result.ok:
        return GpuInventory(source="nvidia-smi", problem=command_problem(result))
    try:
        found = parse_query_gpu(result.stdout, fields)
    except ParseError as exc:
        return GpuInventory(source="nvidia-smi", problem=unreadable("nvidia-smi --query-gpu", exc, result))
    if any(g.mig_mode for g in found) or (driver.table and driver.table.mig_devices):
        listed = smi.run("-L")
        if listed.ok:
            try:
                gpu_list = parse_list_gpus(listed.stdout)
            except ParseError as exc:
                notes.append(f"MIG devices unknown: {exc}")
            else:
                notes.extend(gpu_list.errors)
                migs = {g.uuid: g.mig_devices for g in gpu_list.gpus}
                found = tuple(Gpu(g.index, g.name, g.uuid, g.bus_id, g.memory_total_mib, g.persistence_mode,
                                  g.mig_mode, g.ecc_uncorrected, g.throttle_reasons, migs.get(g.uuid, ()))
                              for g in found)
        else:
            notes.append(f"MIG devices unknown: {listed.describe()}")
    return GpuInventory(found, "nvidia-smi", None, tuple(notes), unreported)


@dataclass(frozen=True)
class GpuTopology:
    matrix: TopoMatrix | None = None
    problem: GpuProblem | None = None


@fact
def gpu_topology(facts) -> GpuTopology:
    """GPUs, NICs, the link class of every pair, CPU and NUMA affinity (`nvidia-smi topo -m`)."""
    driver = facts.gpu_driver
    if driver.problem is not None:
        return GpuTopology(None, driver.problem)
    result = facts.nvidia_smi.run("topo", "-m")
    if not result.ok:
        problem = command_problem(result)
        if problem.state == "absent":  # NVML answered, so there is a driver; only the tool is missing
            problem = GpuProblem("error", "nvidia-smi is not on PATH: the topology matrix needs it",
                                 explanation="NVML works, so the driver is installed, but its nvidia-smi is not "
                                             "reachable (a container that mounts only the libraries?).",
                                 fix="export PATH=$PATH:/usr/bin   # or mount nvidia-smi into the container",
                                 evidence=problem.evidence)
        return GpuTopology(None, problem)
    try:
        return GpuTopology(parse_topo_matrix(result.stdout))
    except ParseError as exc:
        return GpuTopology(None, unreadable("nvidia-smi topo -m", exc, result))
