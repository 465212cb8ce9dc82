"""The node inventory: one flat, documented table of named facts about this node.

It is what `check --format json` carries under "inventory", what `distdoctor inventory`
prints, what `[expect]` in the config file is written against, and what a cross-node
comparison lines up. Names are dotted and stable (dashboards and `[expect]` tables key on
them); values are JSON scalars or short lists of scalars. A fact that cannot be read is
absent or None, never an exception: one unreadable file must not cost the whole inventory.

`FIELDS` below is the table of names; docs/inventory.md is generated from it
(`python -m distdoctor.docgen inventory`) and a test keeps the two equal.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from distdoctor import bounded
from distdoctor.config import toml_value
from distdoctor.facts.system import SLURMD_PATHS
from distdoctor.redact import REDACTED, is_secret_name
from distdoctor.render.json import json_safe

COLLECT_TIMEOUT = 20.0  # seconds for the whole inventory; what is known by then is reported


# What a getter returns for a fact this node does not have (no torch, no MPI): the name is then
# left out, where None says "there, but unreadable".
ABSENT = object()


@dataclass(frozen=True)
class Field:
    name: str  # may hold a <placeholder>: net.if.<name>.mtu
    meaning: str
    source: str
    agree: bool  # should be the same on every node of a job or cluster
    # written by --snapshot: a property of the node itself. The environment is the job's, not the
    # node's: slurmd runs a health check with almost none, so pinning it would fail every node.
    snapshot: bool = True
    # The value from the Facts of this node (ABSENT to leave it out); a row with a <placeholder>
    # gives {concrete name: value}. None: `check` does not collect it (another command publishes it).
    get: Callable[[Any], Any] | None = None
    slow: bool = False  # asks a tool or library that can hang: read after every quick row


def _f(name: str, meaning: str, source: str, agree: bool = True, snapshot: bool | None = None,
       get: Callable[[Any], Any] | None = None, slow: bool = False) -> Field:
    return Field(name, meaning, source, agree, agree if snapshot is None else snapshot, get, slow)


# --- the rows' getters that are more than one attribute of one fact ---------------------------

def _packages(facts) -> dict[str, Any]:
    versions = facts.distributions
    return {f"pip.{name}": versions[name] for name in sorted(versions) if RELEVANT_PACKAGES.match(name)}


def _cuda_runtime(facts) -> str | None:
    versions = facts.distributions
    return next((versions[n] for n in sorted(versions) if re.match(r"nvidia_cuda_runtime(_cu\d+)?$", n)), None)


def _driver(facts, attribute: str) -> Any:
    driver = facts.gpu_driver
    return ABSENT if driver.problem is not None else getattr(driver, attribute)


def _gpu_count(facts) -> Any:
    driver = facts.gpu_driver
    if driver.problem is not None:
        # No driver here (a login node) is a value: zero GPUs. A hung or broken one is unknown.
        return 0 if driver.problem.state == "absent" else None
    return _gpu_list(facts, len)


def _gpu_list(facts, read: Callable[[list], Any]) -> Any:
    """read(the GPUs), or ABSENT when the driver or the GPU table cannot be read."""
    if facts.gpu_driver.problem is not None or facts.gpus.problem is not None:
        return ABSENT
    return read(facts.gpus.gpus)


def _gpu_model(facts) -> Any:
    def model(gpus: list) -> Any:
        models = list(dict.fromkeys(g.name for g in gpus))
        return (models[0] if len(models) == 1 else models) if models else None
    return _gpu_list(facts, model)


def _mode(values) -> Any:
    known = {v for v in values if v is not None}
    return None if not known else ("mixed" if len(known) > 1 else known.pop())


def _gpu_health(facts, read: Callable[[list], Any]) -> Any:
    return _gpu_list(facts, lambda _gpus: read(facts.gpu_health.gpus))


def _pcie(health: list) -> str | None:
    links = [(g.pcie_gen_max, g.pcie_width_max) for g in health if g.pcie_gen_max and g.pcie_width_max]
    return "Gen{} x{}".format(*min(links)) if links else None


def _nvlinks(facts) -> Any:
    def fewest(_gpus: list) -> int | None:
        counts = [len(g.links) for g in facts.nvlink.gpus]
        return min(counts) if counts else None
    return _gpu_list(facts, fewest)


def _fabric(facts) -> dict[str, Any]:
    got = _gpu_health(facts, lambda health: {
        "gpu.fabric.clique": _mode(g.fabric_clique or None for g in health),
        "gpu.fabric.cluster_uuid": _mode(g.fabric_cluster_uuid or None for g in health)})
    return {} if got is ABSENT else got


def _torch(facts, attribute: str) -> Any:
    torch = facts.torch_install
    return getattr(torch, attribute) if torch.installed else ABSENT


def _cuda_available(facts) -> Any:
    torch = facts.torch_install
    if not torch.installed:
        return ABSENT
    if torch.build != "cuda":
        return False
    return facts.gpu_driver.problem is None and bool(facts.gpus.gpus)


def _nccl_conf(facts) -> dict[str, Any]:
    settings = facts.nccl_settings
    out = {}
    for name in sorted(settings.values)[:MAX_SETTINGS]:
        setting = settings.values[name]
        if setting.source != "environment":  # the environment's are under env.<NAME>
            out[f"nccl.conf.{name}"] = REDACTED if is_secret_name(name) and setting.value else setting.value
    return out


def _nccl_found(facts) -> list[str]:
    return list(dict.fromkeys(lib.version for lib in facts.nccl_libraries.libraries if lib.version))


def _nccl_version(facts) -> Any:
    libs = facts.nccl_libraries
    default = libs.by_realpath(libs.default_path) if libs.default_path else None
    if default is not None and default.version:
        return default.version
    versions = _nccl_found(facts)
    return versions[0] if len(versions) == 1 else ABSENT


def _nccl_versions(facts) -> Any:
    versions = _nccl_found(facts)
    return versions if len(versions) > 1 else ABSENT


def _slurm_version(facts) -> Any:
    if not any(facts.host.which(tool) for tool in ("slurmd", "sinfo", "srun", "scontrol")) and \
            not any(facts.host.exists(p) for p in SLURMD_PATHS):
        return ABSENT
    return facts.slurm_version


def _host_hash(facts) -> Any:
    boot_id, hostid = facts.host_identity.boot_id, facts.host.env.get("NCCL_HOSTID")
    if boot_id is None and hostid is None:
        return ABSENT  # NCCL's own string would differ: no hash beats a wrong one
    return nccl_host_hash(facts.hostname, boot_id, hostid)


def _mpi(facts, attribute: str) -> Any:
    found = next((launcher.mpi for launcher in facts.mpi.launchers if launcher.mpi is not None), None)
    return ABSENT if found is None else getattr(found, attribute)


def _per_interface(facts, what: str, read: Callable[[Any], Any]) -> dict[str, Any]:
    shown = [i for i in facts.interfaces.interfaces if i.kind != "loopback"][:MAX_INTERFACES]
    return {f"net.if.{iface.name}.{what}": read(iface) for iface in shown}


def _first_address(iface) -> str | None:
    v4 = [a for a in iface.addresses if a.family == "inet"]
    v6 = [a for a in iface.addresses if a.family == "inet6" and not a.address.lower().startswith("fe80")]
    first = (v4 or v6 or [None])[0]
    if first is None:
        return None
    return f"{first.address}/{first.prefixlen}" if first.prefixlen is not None else first.address


def _per_ib_port(facts, what: str) -> dict[str, Any]:
    return {f"ib.{p.hca}.{p.port}.{what}": getattr(p, what) or None for p in facts.infiniband.ports[:MAX_IB_PORTS]}


FIELDS: tuple[Field, ...] = (
    # --- operating system -----------------------------------------------------------------
    _f("os.name", "distribution name", "/etc/os-release NAME", get=lambda f: f.os_release.name),
    _f("os.version", "distribution version", "/etc/os-release VERSION_ID", get=lambda f: f.os_release.version_id),
    _f("os.pretty", "distribution, as it names itself (collect_env's OS)", "/etc/os-release PRETTY_NAME",
       get=lambda f: f.os_release.pretty_name),
    _f("kernel", "kernel release", "uname -r", snapshot=False, get=lambda f: f.platform.get("release") or None),
    _f("arch", "machine architecture", "uname -m", get=lambda f: f.platform.get("machine") or None),
    _f("libc", "C library and version (collect_env's Libc version)", "confstr(CS_GNU_LIBC_VERSION)",
       get=lambda f: f.platform.get("libc") or None),
    _f("gcc", "gcc version, when installed", "gcc --version", agree=False, get=lambda f: f.compilers["gcc"], slow=True),
    _f("clang", "clang version, when installed", "clang --version", agree=False,
       get=lambda f: f.compilers["clang"], slow=True),
    _f("cmake", "cmake version, when installed", "cmake --version", agree=False,
       get=lambda f: f.compilers["cmake"], slow=True),
    # --- Python ---------------------------------------------------------------------------
    _f("python.version", "interpreter version", "sys.version_info", get=lambda f: f.host.python_version()),
    _f("python.executable", "interpreter path", "sys.executable", agree=False, get=lambda f: f.host.python_executable()),
    _f("python.platform", "Python's platform string (collect_env's Python platform)", "platform.platform()",
       agree=False, get=lambda f: f.platform.get("platform") or None),
    _f("pip.<package>", "version of an installed package that matters to distributed training (torch, "
       "numpy, triton, nvidia-*, mpi4py, horovod, deepspeed, ...; collect_env's 'Versions of relevant "
       "libraries')", "*.dist-info folder names on sys.path", get=_packages),
    # --- GPUs and CUDA --------------------------------------------------------------------
    _f("gpu.count", "GPUs visible to this process", "NVML, else nvidia-smi", get=_gpu_count, slow=True),
    _f("gpu.model", "GPU model (a list when GPUs differ)", "NVML, else nvidia-smi", get=_gpu_model, slow=True),
    _f("gpu.memory_mib", "memory of the first GPU, MiB", "NVML, else nvidia-smi",
       get=lambda f: _gpu_list(f, lambda gpus: gpus[0].memory_total_mib if gpus else None), slow=True),
    _f("gpu.driver", "NVIDIA driver version", "NVML, else nvidia-smi",
       get=lambda f: _driver(f, "driver_version"), slow=True),
    _f("gpu.uuids", "GPU UUIDs", "NVML, else nvidia-smi", agree=False,
       get=lambda f: _gpu_list(f, lambda gpus: [g.uuid for g in gpus if g.uuid]), slow=True),
    _f("gpu.persistence", "persistence mode of every GPU: on, off, or mixed", "NVML, else nvidia-smi -q",
       get=lambda f: _gpu_health(f, lambda h: _mode({True: "on", False: "off"}.get(g.persistence_mode) for g in h)),
       slow=True),
    _f("gpu.mig", "MIG mode of every GPU: enabled, disabled, mixed (absent where unsupported)", "NVML, else nvidia-smi -q",
       get=lambda f: _gpu_health(f, lambda h: _mode({True: "enabled", False: "disabled"}.get(g.mig_mode) for g in h)),
       slow=True),
    _f("gpu.pcie", "the narrowest GPU link's maximum: Gen5 x16", "NVML, else nvidia-smi -q",
       get=lambda f: _gpu_health(f, _pcie), slow=True),
    _f("gpu.nvlinks", "NVLink links per GPU (the fewest any GPU has)", "NVML, else nvidia-smi nvlink -s",
       get=_nvlinks, slow=True),
    _f("gpu.fabric.<clique|cluster_uuid>", "NVLink fabric clique id / cluster UUID (one NVLink domain)", "nvidia-smi -q",
       snapshot=False, get=_fabric, slow=True),
    _f("cuda.driver", "highest CUDA version the driver supports", "NVML, else the nvidia-smi header",
       get=lambda f: _driver(f, "cuda_version"), slow=True),
    _f("cuda.runtime", "CUDA runtime library version installed by pip", "nvidia-cuda-runtime-* package",
       get=_cuda_runtime),
    _f("cuda.toolkit", "CUDA toolkit (nvcc through the caller's PATH: not in --snapshot)", "nvcc --version",
       snapshot=False, get=lambda f: f.compilers["nvcc"], slow=True),
    _f("cudnn", "cuDNN version", "nvidia-cudnn-* package, else cudnn_version.h", get=lambda f: f.cudnn),
    # --- NCCL -----------------------------------------------------------------------------
    _f("nccl.version", "NCCL a bare dlopen(\"libnccl.so.2\") loads (else the only one found); follows the caller's "
       "LD_LIBRARY_PATH, so --snapshot leaves it out (pip.nvidia_nccl_* is the installed one)",
       "ncclGetVersion in a throwaway interpreter", snapshot=False, get=_nccl_version, slow=True),
    _f("nccl.versions", "every NCCL library found, when there are several", "ncclGetVersion",
       get=_nccl_versions, slow=True),
    _f("nccl.host_hash", "the host hash NCCL computes: DJB2a of hostname + boot id, or of "
       "NCCL_HOSTID; two nodes with the same hash are treated by NCCL as one", "NCCL's getHostHash, recomputed",
       agree=False, get=_host_hash),
    _f("nccl.network", "the network NCCL chose (IB or Socket), read from an NCCL_DEBUG=INFO log",
       "`distdoctor log` (NCCL INFO lines); `check` does not collect it", snapshot=False),
    _f("nccl.gdr", "GPUDirect RDMA on (true) or off (false), read from an NCCL_DEBUG=INFO log",
       "`distdoctor log` (NCCL INFO lines); `check` does not collect it", snapshot=False),
    _f("env.<NAME>", "an environment variable that steers distributed training: NCCL_*, TORCH_NCCL_*, "
       "GLOO_*, TORCH_DISTRIBUTED_*, CUDA_DEVICE_ORDER, CUDA_MODULE_LOADING, OMPI_MCA_btl/oob_tcp_if_*, UCX_* "
       "(secret-looking names redacted)", "environment", snapshot=False, get=lambda f: compared_env(f.host.env)),
    _f("nccl.conf.<NAME>", "an NCCL setting from ~/.nccl.conf ($NCCL_CONF_FILE) or /etc/nccl.conf that the "
       "environment does not override", "NCCL config files", get=_nccl_conf),
    # --- frameworks and launchers ---------------------------------------------------------
    _f("torch.version", "torch version", "torch/version.py (torch is not imported)", get=lambda f: _torch(f, "version")),
    _f("torch.cuda", "CUDA torch was built with (collect_env's 'CUDA used to build PyTorch')", "torch/version.py",
       get=lambda f: _torch(f, "cuda")),
    _f("torch.hip", "ROCm/HIP torch was built with", "torch/version.py", get=lambda f: _torch(f, "hip")),
    _f("torch.build", "cuda, rocm, cpu or unknown", "torch/version.py", get=lambda f: _torch(f, "build")),
    _f("torch.debug", "a debug build (collect_env's 'Is debug build')", "torch/version.py",
       get=lambda f: _torch(f, "debug")),
    _f("torch.git_version", "commit torch was built from", "torch/version.py", get=lambda f: _torch(f, "git_version")),
    _f("cuda.available", "torch would find a GPU: a CUDA build of torch, an NVIDIA driver and at least one GPU "
       "(collect_env's 'Is CUDA available', predicted without importing torch)", "torch/version.py, NVML",
       get=_cuda_available, slow=True),
    _f("rocm.version", "ROCm installation (collect_env's 'HIP runtime version')", "/opt/rocm/.info/version",
       get=lambda f: f.rocm.version or ABSENT),
    _f("miopen", "MIOpen version", "/opt/rocm/include/miopen/version.h", get=lambda f: f.rocm.miopen or ABSENT),
    _f("mpi.impl", "MPI implementation of mpirun/mpiexec (Open MPI, MPICH, ...)", "mpirun --version", snapshot=False,
       get=lambda f: _mpi(f, "implementation"), slow=True),
    _f("mpi.version", "MPI version (mpirun through PATH, as `module load` sets it)", "mpirun --version",
       snapshot=False, get=lambda f: _mpi(f, "version"), slow=True),
    _f("slurm.version", "Slurm version", "slurmd -V (found in /usr/sbin without PATH), else sinfo --version",
       get=_slurm_version, slow=True),
    _f("horovod.version", "Horovod version", "horovod package metadata", get=lambda f: f.distributions.get("horovod")),
    # --- host limits and layout -----------------------------------------------------------
    _f("limits.memlock", "RLIMIT_MEMLOCK soft limit: bytes, or \"unlimited\"", "getrlimit",
       get=lambda f: "unlimited" if f.memlock.soft < 0 else f.memlock.soft),
    _f("shm.size", "size of /dev/shm, bytes", "statvfs(/dev/shm)", get=lambda f: f.shm.total),
    _f("cpu.model", "CPU model", "/proc/cpuinfo", get=lambda f: f.cpu.model),
    _f("cpu.flags", "CPU features compiled code may need (avx2, avx512*, amx*, fma, f16c, sse4_2)", "/proc/cpuinfo",
       get=lambda f: sorted(x for x in f.cpu.flags if CPU_FLAGS.match(x)) if f.cpu.flags else None),
    _f("mem.total_gib", "installed memory, GiB (MemTotal, rounded)", "/proc/meminfo",
       get=lambda f: round(f.cpu.mem_total_kib / 1024 ** 2) if f.cpu.mem_total_kib else None),
    _f("cpu.count", "logical CPUs", "os.cpu_count()", get=lambda f: f.cpu.count),
    _f("cpu.usable", "CPUs this process may run on", "sched_getaffinity", agree=False, get=lambda f: f.cpu.usable),
    _f("numa.nodes", "NUMA nodes", "/sys/devices/system/node", get=lambda f: f.cpu.numa_nodes),
    _f("container.kind", "docker, podman, kubernetes, or none", "/.dockerenv, /run/.containerenv, cgroup",
       get=lambda f: f.container_network or "none"),
    _f("cgroup.version", "1 or 2", "/proc/self/cgroup", get=lambda f: f.cgroup.version if f.cgroup else ABSENT),
    _f("cgroup", "this process's cgroup (v2 path, or v1's cpu controller path)", "/proc/self/cgroup",
       agree=False, get=lambda f: f.cgroup.path if f.cgroup else ABSENT),
    # --- host identity (must differ between nodes) ----------------------------------------
    _f("host.name", "hostname", "gethostname()", agree=False, get=lambda f: f.hostname),
    _f("host.boot_id", "kernel boot id", "/proc/sys/kernel/random/boot_id", agree=False,
       get=lambda f: f.host_identity.boot_id),
    _f("host.machine_id", "machine id, hashed (systemd asks that the raw id stay confidential)",
       "sha256 of /etc/machine-id", agree=False, get=lambda f: f.host_identity.machine_id),
    # --- network --------------------------------------------------------------------------
    _f("net.if.<name>.kind", "interface kind: physical, veth, bridge, container, bond, ib, ...",
       "ip -d -j link, sysfs", agree=False, get=lambda f: _per_interface(f, "kind", lambda i: i.kind)),
    _f("net.if.<name>.address", "first IPv4 address with prefix (else IPv6)", "psutil", agree=False,
       get=lambda f: _per_interface(f, "address", _first_address)),
    _f("net.if.<name>.mtu", "MTU", "sysfs", agree=False, get=lambda f: _per_interface(f, "mtu", lambda i: i.mtu)),
    _f("net.if.<name>.speed", "link speed, Mb/s", "sysfs", agree=False,
       get=lambda f: _per_interface(f, "speed", lambda i: i.speed)),
    _f("net.if.<name>.state", "up, down or no-carrier", "sysfs, psutil", agree=False,
       get=lambda f: _per_interface(f, "state", lambda i: i.state)),
    _f("ib.<hca>.<port>.state", "InfiniBand port state (ACTIVE, DOWN, ...)", "/sys/class/infiniband",
       get=lambda f: _per_ib_port(f, "state")),
    _f("ib.<hca>.<port>.phys_state", "physical state (LinkUp, Polling, ...)", "/sys/class/infiniband",
       get=lambda f: _per_ib_port(f, "phys_state")),
    _f("ib.<hca>.<port>.rate", "port rate", "/sys/class/infiniband", get=lambda f: _per_ib_port(f, "rate")),
    _f("ib.<hca>.<port>.link_layer", "InfiniBand or Ethernet (RoCE)", "/sys/class/infiniband",
       get=lambda f: _per_ib_port(f, "link_layer")),
    _f("ib.<hca>.fw", "HCA firmware version", "/sys/class/infiniband/<hca>/fw_ver",
       get=lambda f: {f"ib.{hca}.fw": v for hca, v in sorted(f.ib_firmware.items())[:MAX_IB_PORTS]}),
    # --- the inventory itself -------------------------------------------------------------
    _f("inventory.incomplete", "rows still unread when the time bound came (a hung tool)", "distdoctor",
       agree=False),
    _f("inventory.errors", "rows that could not be read, with the error (the other rows are kept)",
       "distdoctor", agree=False),
)
# The order rows are read in: quick ones first, so a slow tool (a hung nvidia-smi, mpirun) costs
# only the rows after it; rows another command publishes (get=None) are not read here.
_COLLECTED = tuple(r for r in FIELDS if r.get and not r.slow) + tuple(r for r in FIELDS if r.get and r.slow)

# Packages reported as pip.<name>: what collect_env lists, and what distributed training adds.
CPU_FLAGS: re.Pattern[str] = re.compile(r"^(avx2|avx512\w*|amx\w*|fma|f16c|sse4_2)$")
# Installed beside distdoctor but not what a job runs on: a snapshot does not pin them.
SNAPSHOT_SKIP_PACKAGES = re.compile(r"^(mypy|flake8|distdoctor|pytest.*|ruff|hypothesis)$")
RELEVANT_PACKAGES = re.compile(
    r"^(torch|torchvision|torchaudio|numpy|triton|pytorch_triton.*|mypy|flake8|onnx.*|optree|nvidia_.*|"
    r"mpi4py|horovod|deepspeed|accelerate|lightning|pytorch_lightning|transformers|jax|jaxlib|"
    r"cupy.*|apex|flash_attn|xformers|ray|megatron.*|distdoctor)$")

# The one list of environment variables reported as env.<NAME> and compared across the nodes
# and ranks of a job (crosscheck/rules.py's env.*): what changes how NCCL, Gloo, torch.distributed,
# UCX and Open MPI connect. Per-rank values (RANK, CUDA_VISIBLE_DEVICES) are left out: they
# differ by design.
COMPARED_ENV = re.compile(r"^(NCCL_\w+|TORCH_NCCL_\w+|GLOO_\w+|TORCH_DISTRIBUTED_\w+|CUDA_DEVICE_ORDER|"
                          r"CUDA_MODULE_LOADING|OMPI_MCA_(btl|oob)_tcp_if_(include|exclude)|UCX_\w+)$")
MAX_SETTINGS = 64


def compared_env(env: Mapping[str, str]) -> dict[str, str]:
    """{env.<NAME>: value} for the variables of COMPARED_ENV that are set, secret-looking values
    redacted: what the inventory reports and nccl-test's fingerprint publishes."""
    names = sorted(n for n in env if COMPARED_ENV.match(n))[:MAX_SETTINGS]
    return {f"env.{n}": REDACTED if is_secret_name(n) and env[n] else env[n] for n in names}

# Interfaces and ports beyond these counts are left out: an inventory is not a dump of every
# veth on a container host.
MAX_INTERFACES = 32
MAX_IB_PORTS = 32


def field_for(name: str) -> Field | None:
    """The FIELDS row a concrete name belongs to (net.if.eth0.mtu -> net.if.<name>.mtu)."""
    for row in FIELDS:
        if row.name == name:
            return row
    for row in FIELDS:
        if "<" in row.name and _pattern(row.name).match(name):
            return row
    return None


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"<[^>]+>", template)
    return re.compile("^" + r"(.+?)".join(re.escape(p) for p in parts) + "$")


# collect_env's labels and the inventory name that answers each; None where only importing
# torch can tell (distdoctor never imports torch). A test reads real collect_env outputs and
# fails on a label missing here.
COLLECT_ENV: dict[str, str | None] = {
    "PyTorch version": "torch.version",
    "Is debug build": "torch.debug",
    "CUDA used to build PyTorch": "torch.cuda",
    "ROCM used to build PyTorch": "torch.hip",
    "OS": "os.pretty",
    "GCC version": "gcc",
    "Clang version": "clang",
    "CMake version": "cmake",
    "Libc version": "libc",
    "Python version": "python.version",
    "Python platform": "python.platform",
    "Is CUDA available": "cuda.available",
    "CUDA runtime version": "cuda.toolkit",  # collect_env asks nvcc, as cuda.toolkit does
    "CUDA_MODULE_LOADING set to": "env.<NAME>",  # env.CUDA_MODULE_LOADING
    "GPU models and configuration": "gpu.model",
    "Nvidia driver version": "gpu.driver",
    "cuDNN version": "cudnn",
    "HIP runtime version": "rocm.version",
    "MIOpen runtime version": "miopen",
    "Is XNNPACK available": None,  # torch.backends.xnnpack.enabled: a property of the loaded library
    "CPU": "cpu.model",
    "Versions of relevant libraries": "pip.<package>",
}


def nccl_host_hash(hostname: str, boot_id: str | None, hostid: str | None = None) -> str:
    """NCCL's getHostHash (src/misc/utils.cc since 2.5): DJB2a (h = h*33 ^ c, from 5381, over
    signed chars) of the hostname followed by the first word of the boot id, or of NCCL_HOSTID
    alone when that is set. Printed as NCCL prints it (%lx)."""
    text = hostid if hostid is not None else hostname + ((boot_id or "").split() or [""])[0]
    data = text.encode("utf-8")[:1023]
    value = 5381
    mask = (1 << 64) - 1
    for byte in data:
        signed = byte - 256 if byte >= 128 else byte
        value = (((value << 5) + value) ^ (signed & mask)) & mask
    return f"{value:x}"


def collect(facts, timeout: float = COLLECT_TIMEOUT) -> dict[str, Any]:
    """The inventory of this node: every row's getter over `facts`, the quick rows first, on a
    daemon thread. A row that hangs past `timeout` leaves the inventory without it and the rows
    after it (`inventory.incomplete` names them) instead of holding up the report; a row that
    fails is named in `inventory.errors` and costs only itself."""
    out: dict[str, Any] = {}
    lock = threading.Lock()
    pending = [row.name for row in _COLLECTED]
    errors: list[str] = []

    def work() -> None:
        for row in _COLLECTED:
            values: dict[str, Any] = {}
            try:
                value = row.get(facts)  # type: ignore[misc]
                if "<" in row.name:
                    values = dict(value)
                elif value is not ABSENT:
                    values = {row.name: value}
            except Exception as exc:  # this row is absent, named; the others are read
                errors.append(f"{row.name}: {type(exc).__name__}: {exc}"[:200])
            with lock:
                out.update({k: json_safe(v) for k, v in values.items()})
                pending.remove(row.name)

    bounded.call(work, timeout, name="inventory")
    with lock:
        result = dict(out)
        if pending:
            result["inventory.incomplete"] = list(pending)
        if errors:
            result["inventory.errors"] = list(errors)
    return dict(sorted(result.items()))


def snapshot_names(inventory: dict[str, Any]) -> list[str]:
    """The facts of this inventory that should agree across nodes: what `--snapshot` writes."""
    out = []
    for name, value in inventory.items():
        row = field_for(name)
        if row is not None and row.snapshot and value is not None and not (
                name.startswith("pip.") and SNAPSHOT_SKIP_PACKAGES.match(name[4:])):
            out.append(name)
    return out


def text_value(value: Any) -> str:
    """A value as `distdoctor inventory` prints it: JSON, so None, lists and strings stay
    unambiguous (`gpu.model = "H100"`, `cudnn = null`)."""
    return json.dumps(value)


def snapshot_toml(inventory: dict[str, Any], hostname: str) -> str:
    """An `[expect]` table for the config file from this node's inventory (as nhc-genconf
    writes an NHC config from a known-good node): the facts that should agree across nodes,
    not host identity or addresses."""
    lines = [f"# distdoctor inventory --snapshot, taken on {hostname}.",
             "# Every node `distdoctor check` (node.expectations) or `distdoctor health` runs on must match.",
             "# Values can also be comparisons: \"gpu.count\" = \">= 8\", \"nccl.version\" = \">= 2.18\".",
             "[expect]"]
    for name in snapshot_names(inventory):
        lines.append(f"{json.dumps(name)} = {toml_value(inventory[name])}")
    return "\n".join(lines) + "\n"
