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

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from distdoctor import bounded
from distdoctor.config import toml_value
from distdoctor.parsers import ParseError
from distdoctor.parsers.slurm import parse_version as parse_slurm_version
from distdoctor.redact import REDACTED, is_secret_name
from distdoctor.render.json import json_safe

COLLECT_TIMEOUT = 20.0  # seconds for the whole inventory; what is known by then is reported
TOOL_TIMEOUT = 3.0  # gcc/clang/cmake/nvcc --version


@dataclass(frozen=True)
class Field:
    name: str  # may hold a <placeholder>: net.if.<name>.mtu
    meaning: str
    source: str
    agree: bool  # should be the same on every node of a job or cluster
    # written by --snapshot: a property of the node itself. The environment is the job's, not the
    # node's: slurmd runs a health check with almost none, so pinning it would fail every node.
    snapshot: bool = True


def _f(name: str, meaning: str, source: str, agree: bool = True, snapshot: bool | None = None) -> Field:
    return Field(name, meaning, source, agree, agree if snapshot is None else snapshot)


FIELDS: tuple[Field, ...] = (
    # --- operating system -----------------------------------------------------------------
    _f("os.name", "distribution name", "/etc/os-release NAME"),
    _f("os.version", "distribution version", "/etc/os-release VERSION_ID"),
    _f("os.pretty", "distribution, as it names itself (collect_env's OS)", "/etc/os-release PRETTY_NAME"),
    _f("kernel", "kernel release", "uname -r", snapshot=False),
    _f("arch", "machine architecture", "uname -m"),
    _f("libc", "C library and version (collect_env's Libc version)", "confstr(CS_GNU_LIBC_VERSION)"),
    _f("gcc", "gcc version, when installed", "gcc --version", agree=False),
    _f("clang", "clang version, when installed", "clang --version", agree=False),
    _f("cmake", "cmake version, when installed", "cmake --version", agree=False),
    # --- Python ---------------------------------------------------------------------------
    _f("python.version", "interpreter version", "sys.version_info"),
    _f("python.executable", "interpreter path", "sys.executable", agree=False),
    _f("python.platform", "Python's platform string (collect_env's Python platform)", "platform.platform()",
       agree=False),
    _f("pip.<package>", "version of an installed package that matters to distributed training (torch, "
       "numpy, triton, nvidia-*, mpi4py, horovod, deepspeed, ...; collect_env's 'Versions of relevant "
       "libraries')", "*.dist-info folder names on sys.path"),
    # --- GPUs and CUDA --------------------------------------------------------------------
    _f("gpu.count", "GPUs visible to this process", "NVML, else nvidia-smi"),
    _f("gpu.model", "GPU model (a list when GPUs differ)", "NVML, else nvidia-smi"),
    _f("gpu.memory_mib", "memory of the first GPU, MiB", "NVML, else nvidia-smi"),
    _f("gpu.driver", "NVIDIA driver version", "NVML, else nvidia-smi"),
    _f("gpu.uuids", "GPU UUIDs", "NVML, else nvidia-smi", agree=False),
    _f("gpu.persistence", "persistence mode of every GPU: on, off, or mixed", "NVML, else nvidia-smi -q"),
    _f("gpu.mig", "MIG mode of every GPU: enabled, disabled, mixed (absent where unsupported)", "NVML, else nvidia-smi -q"),
    _f("gpu.pcie", "the narrowest GPU link's maximum: Gen5 x16", "NVML, else nvidia-smi -q"),
    _f("gpu.nvlinks", "NVLink links per GPU (the fewest any GPU has)", "NVML, else nvidia-smi nvlink -s"),
    _f("gpu.fabric.<clique|cluster_uuid>", "NVLink fabric clique id / cluster UUID (one NVLink domain)", "nvidia-smi -q",
       snapshot=False),
    _f("cuda.driver", "highest CUDA version the driver supports", "NVML, else the nvidia-smi header"),
    _f("cuda.runtime", "CUDA runtime library version installed by pip", "nvidia-cuda-runtime-* package"),
    _f("cuda.toolkit", "CUDA toolkit (nvcc through the caller's PATH: not in --snapshot)", "nvcc --version",
       snapshot=False),
    _f("cudnn", "cuDNN version", "nvidia-cudnn-* package, else cudnn_version.h"),
    # --- NCCL -----------------------------------------------------------------------------
    _f("nccl.version", "NCCL a bare dlopen(\"libnccl.so.2\") loads (else the only one found); follows the caller's "
       "LD_LIBRARY_PATH, so --snapshot leaves it out (pip.nvidia_nccl_* is the installed one)",
       "ncclGetVersion in a throwaway interpreter", snapshot=False),
    _f("nccl.versions", "every NCCL library found, when there are several", "ncclGetVersion"),
    _f("nccl.host_hash", "the host hash NCCL computes: DJB2a of hostname + boot id, or of "
       "NCCL_HOSTID; two nodes with the same hash are treated by NCCL as one", "NCCL's getHostHash, recomputed",
       agree=False),
    _f("nccl.network", "the network NCCL chose (IB or Socket), read from an NCCL_DEBUG=INFO log",
       "`distdoctor log` (NCCL INFO lines); `check` does not collect it", snapshot=False),
    _f("nccl.gdr", "GPUDirect RDMA on (true) or off (false), read from an NCCL_DEBUG=INFO log",
       "`distdoctor log` (NCCL INFO lines); `check` does not collect it", snapshot=False),
    _f("env.<NAME>", "an environment variable that steers distributed training: NCCL_*, TORCH_NCCL_*, "
       "GLOO_*, TORCH_DISTRIBUTED_*, CUDA_DEVICE_ORDER, CUDA_MODULE_LOADING, OMPI_MCA_btl/oob_tcp_if_*, UCX_* "
       "(secret-looking names redacted)", "environment", snapshot=False),
    _f("nccl.conf.<NAME>", "an NCCL setting from ~/.nccl.conf ($NCCL_CONF_FILE) or /etc/nccl.conf that the "
       "environment does not override", "NCCL config files"),
    # --- frameworks and launchers ---------------------------------------------------------
    _f("torch.version", "torch version", "torch/version.py (torch is not imported)"),
    _f("torch.cuda", "CUDA torch was built with (collect_env's 'CUDA used to build PyTorch')", "torch/version.py"),
    _f("torch.hip", "ROCm/HIP torch was built with", "torch/version.py"),
    _f("torch.build", "cuda, rocm, cpu or unknown", "torch/version.py"),
    _f("torch.debug", "a debug build (collect_env's 'Is debug build')", "torch/version.py"),
    _f("torch.git_version", "commit torch was built from", "torch/version.py"),
    _f("cuda.available", "torch would find a GPU: a CUDA build of torch, an NVIDIA driver and at least one GPU "
       "(collect_env's 'Is CUDA available', predicted without importing torch)", "torch/version.py, NVML"),
    _f("rocm.version", "ROCm installation (collect_env's 'HIP runtime version')", "/opt/rocm/.info/version"),
    _f("miopen", "MIOpen version", "/opt/rocm/include/miopen/version.h"),
    _f("mpi.impl", "MPI implementation of mpirun/mpiexec (Open MPI, MPICH, ...)", "mpirun --version", snapshot=False),
    _f("mpi.version", "MPI version (mpirun through PATH, as `module load` sets it)", "mpirun --version",
       snapshot=False),
    _f("slurm.version", "Slurm version", "sinfo/srun --version"),
    _f("horovod.version", "Horovod version", "horovod package metadata"),
    # --- host limits and layout -----------------------------------------------------------
    _f("limits.memlock", "RLIMIT_MEMLOCK soft limit: bytes, or \"unlimited\"", "getrlimit"),
    _f("shm.size", "size of /dev/shm, bytes", "statvfs(/dev/shm)"),
    _f("cpu.model", "CPU model", "/proc/cpuinfo"),
    _f("cpu.flags", "CPU features compiled code may need (avx2, avx512*, amx*, fma, f16c, sse4_2)", "/proc/cpuinfo"),
    _f("mem.total_gib", "installed memory, GiB (MemTotal, rounded)", "/proc/meminfo"),
    _f("cpu.count", "logical CPUs", "os.cpu_count()"),
    _f("cpu.usable", "CPUs this process may run on", "sched_getaffinity", agree=False),
    _f("numa.nodes", "NUMA nodes", "/sys/devices/system/node"),
    _f("container.kind", "docker, podman, kubernetes, or none", "/.dockerenv, /run/.containerenv, cgroup"),
    _f("cgroup.version", "1 or 2", "/proc/self/cgroup"),
    _f("cgroup", "this process's cgroup (v2 path, or v1's cpu controller path)", "/proc/self/cgroup",
       agree=False),
    # --- host identity (must differ between nodes) ----------------------------------------
    _f("host.name", "hostname", "gethostname()", agree=False),
    _f("host.boot_id", "kernel boot id", "/proc/sys/kernel/random/boot_id", agree=False),
    _f("host.machine_id", "machine id, hashed (systemd asks that the raw id stay confidential)",
       "sha256 of /etc/machine-id", agree=False),
    # --- network --------------------------------------------------------------------------
    _f("net.if.<name>.kind", "interface kind: physical, veth, bridge, container, bond, ib, ...",
       "ip -d -j link, sysfs", agree=False),
    _f("net.if.<name>.address", "first IPv4 address with prefix (else IPv6)", "psutil", agree=False),
    _f("net.if.<name>.mtu", "MTU", "sysfs", agree=False),
    _f("net.if.<name>.speed", "link speed, Mb/s", "sysfs", agree=False),
    _f("net.if.<name>.state", "up, down or no-carrier", "sysfs, psutil", agree=False),
    _f("ib.<hca>.<port>.state", "InfiniBand port state (ACTIVE, DOWN, ...)", "/sys/class/infiniband"),
    _f("ib.<hca>.<port>.phys_state", "physical state (LinkUp, Polling, ...)", "/sys/class/infiniband"),
    _f("ib.<hca>.<port>.rate", "port rate", "/sys/class/infiniband"),
    _f("ib.<hca>.<port>.link_layer", "InfiniBand or Ethernet (RoCE)", "/sys/class/infiniband"),
    _f("ib.<hca>.fw", "HCA firmware version", "/sys/class/infiniband/<hca>/fw_ver"),
    # --- the inventory itself -------------------------------------------------------------
    _f("inventory.incomplete", "sections still running when the time bound came (a hung tool)", "distdoctor",
       agree=False),
    _f("inventory.errors", "sections that failed part-way, with the error (their other facts are kept)",
       "distdoctor", agree=False),
)

# Packages reported as pip.<name>: what collect_env lists, and what distributed training adds.
CPU_FLAGS = re.compile(r"^(avx2|avx512\w*|amx\w*|fma|f16c|sse4_2)$")
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


def collect(facts, host=None, timeout: float = COLLECT_TIMEOUT) -> dict[str, Any]:
    """The inventory of this node. Sections run in order on a daemon thread; a section that
    hangs past `timeout` leaves the inventory without it (and `inventory.incomplete` lists
    the sections not finished) instead of holding up the report."""
    host = host or facts.host
    out: dict[str, Any] = {}
    lock = threading.Lock()
    pending = [name for name, _func in _SECTIONS]

    errors: list[str] = []

    def work() -> None:
        for name, func in _SECTIONS:
            values: dict[str, Any] = {}
            try:
                for key, value in func(facts, host):
                    values[key] = value
            except Exception as exc:  # what the section had read stays; the rest is absent, named
                errors.append(f"{name}: {type(exc).__name__}: {exc}"[:200])
            with lock:
                out.update({k: json_safe(v) for k, v in values.items()})
                pending.remove(name)

    bounded.call(work, timeout, name="inventory")
    with lock:
        result = dict(out)
        if pending:
            result["inventory.incomplete"] = list(pending)
        if errors:
            result["inventory.errors"] = list(errors)
    return dict(sorted(result.items()))


# --- sections ---------------------------------------------------------------------------------

def _read(host, path: str, max_bytes: int = 65536) -> str | None:
    try:
        return host.read_text(path, max_bytes=max_bytes)
    except OSError:
        return None


def _os(facts, host) -> Iterable[tuple[str, Any]]:
    text = _read(host, "/etc/os-release") or _read(host, "/usr/lib/os-release") or ""
    release = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            release[key.strip()] = value.strip().strip('"').strip("'")
    yield "os.name", release.get("NAME")
    yield "os.version", release.get("VERSION_ID")
    yield "os.pretty", release.get("PRETTY_NAME")
    info = host.platform_info()
    yield "kernel", info.get("release") or None
    yield "arch", info.get("machine") or None
    yield "libc", info.get("libc") or None
    yield "python.platform", info.get("platform") or None
    yield "python.version", host.python_version()
    yield "python.executable", host.python_executable()


_TOOL_VERSION = re.compile(r"(?<!\d)(\d+\.\d+(?:\.\d+)?)")  # starts only where a run of digits starts: linear


def _tool_version(host, argv: list[str], pattern: re.Pattern[str] = _TOOL_VERSION) -> str | None:
    if not host.which(argv[0]):
        return None
    result = host.run(argv, timeout=TOOL_TIMEOUT)
    if not result.ok:
        return None
    m = pattern.search(result.stdout)
    return m.group(1) if m else None


_NVCC_RELEASE = re.compile(r"release (\d+\.\d+)")


_TOOLS = (("gcc", ["gcc", "--version"], _TOOL_VERSION), ("clang", ["clang", "--version"], _TOOL_VERSION),
          ("cmake", ["cmake", "--version"], _TOOL_VERSION), ("cuda.toolkit", ["nvcc", "--version"], _NVCC_RELEASE))


def _tools(facts, host) -> Iterable[tuple[str, Any]]:
    # All at once: four process starts in a row were most of what the inventory adds to `check`.
    found = bounded.map(lambda tool: _tool_version(host, tool[1], tool[2]), _TOOLS, TOOL_TIMEOUT + 1,
                        name="inventory-tool")
    for (key, _argv, _pattern), version in zip(_TOOLS, found):
        yield key, None if isinstance(version, bounded.TimedOut) else version


def _packages(facts, host) -> Iterable[tuple[str, Any]]:
    versions = host.distribution_versions()
    for name in sorted(versions):
        if RELEVANT_PACKAGES.match(name):
            yield f"pip.{name}", versions[name]
    runtime = next((versions[n] for n in sorted(versions) if re.match(r"nvidia_cuda_runtime(_cu\d+)?$", n)), None)
    yield "cuda.runtime", runtime
    cudnn = next((versions[n] for n in sorted(versions) if re.match(r"nvidia_cudnn(_cu\d+)?$", n)), None)
    yield "cudnn", cudnn or _cudnn_header(host)
    yield "horovod.version", versions.get("horovod")


_CUDNN_DEFINE = re.compile(r"#define\s+CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)")


def _cudnn_header(host) -> str | None:
    for path in ("/usr/include/cudnn_version.h", "/usr/local/cuda/include/cudnn_version.h",
                 "/usr/include/x86_64-linux-gnu/cudnn_version.h", "/usr/include/cudnn.h"):
        parts = dict(_CUDNN_DEFINE.findall(_read(host, path) or ""))
        if "MAJOR" in parts:
            return f"{parts['MAJOR']}.{parts.get('MINOR', '0')}.{parts.get('PATCHLEVEL', '0')}"
    return None


def _mode(values) -> Any:
    known = {v for v in values if v is not None}
    return None if not known else ("mixed" if len(known) > 1 else known.pop())


def _gpus(facts, host) -> Iterable[tuple[str, Any]]:
    driver = facts.gpu_driver
    if driver.problem is not None:
        # No driver here (a login node) is a value: zero GPUs. A hung or broken one is unknown.
        yield "gpu.count", 0 if driver.problem.state == "absent" else None
        return
    yield "gpu.driver", driver.driver_version
    yield "cuda.driver", driver.cuda_version
    inventory = facts.gpus
    if inventory.problem is not None:
        return
    gpus = inventory.gpus
    yield "gpu.count", len(gpus)
    models = list(dict.fromkeys(g.name for g in gpus))
    yield "gpu.model", (models[0] if len(models) == 1 else models) if models else None
    yield "gpu.memory_mib", gpus[0].memory_total_mib if gpus else None
    yield "gpu.uuids", [g.uuid for g in gpus if g.uuid]
    health = facts.gpu_health.gpus
    yield "gpu.persistence", _mode({True: "on", False: "off"}.get(g.persistence_mode) for g in health)
    yield "gpu.mig", _mode({True: "enabled", False: "disabled"}.get(g.mig_mode) for g in health)
    links = [(g.pcie_gen_max, g.pcie_width_max) for g in health if g.pcie_gen_max and g.pcie_width_max]
    yield "gpu.pcie", "Gen{} x{}".format(*min(links)) if links else None
    nvlinks = [len(g.links) for g in facts.nvlink.gpus]
    yield "gpu.nvlinks", min(nvlinks) if nvlinks else None
    yield "gpu.fabric.clique", _mode(g.fabric_clique or None for g in health)
    yield "gpu.fabric.cluster_uuid", _mode(g.fabric_cluster_uuid or None for g in health)


def _torch(facts, host) -> Iterable[tuple[str, Any]]:
    torch = facts.torch_install
    if not torch.installed:
        return
    yield "torch.version", torch.version
    yield "torch.cuda", torch.cuda
    yield "torch.hip", torch.hip
    yield "torch.build", torch.build
    yield "torch.debug", torch.debug
    yield "torch.git_version", torch.git_version


def _environment(facts, host) -> Iterable[tuple[str, Any]]:
    yield from compared_env(host.env).items()


def _cuda_available(facts, host) -> Iterable[tuple[str, Any]]:
    torch = facts.torch_install
    if not torch.installed:
        return
    if torch.build != "cuda":
        yield "cuda.available", False
        return
    driver = facts.gpu_driver
    yield "cuda.available", driver.problem is None and bool(facts.gpus.gpus)


_MIOPEN_DEFINE = re.compile(r"#define\s+MIOPEN_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)")


def _rocm(facts, host) -> Iterable[tuple[str, Any]]:
    version = (_read(host, "/opt/rocm/.info/version") or "").strip()
    if version:
        yield "rocm.version", version
    parts = dict(_MIOPEN_DEFINE.findall(_read(host, "/opt/rocm/include/miopen/version.h") or ""))
    if "MAJOR" in parts:
        yield "miopen", f"{parts['MAJOR']}.{parts.get('MINOR', '0')}.{parts.get('PATCH', '0')}"


def _nccl(facts, host) -> Iterable[tuple[str, Any]]:
    settings = facts.nccl_settings
    for name in sorted(settings.values)[:MAX_SETTINGS]:
        setting = settings.values[name]
        if setting.source != "environment":  # the environment's are under env.<NAME>
            yield f"nccl.conf.{name}", REDACTED if is_secret_name(name) and setting.value else setting.value
    libs = facts.nccl_libraries
    versions = list(dict.fromkeys(lib.version for lib in libs.libraries if lib.version))
    default = libs.by_realpath(libs.default_path) if libs.default_path else None
    if default is not None and default.version:
        yield "nccl.version", default.version
    elif len(versions) == 1:
        yield "nccl.version", versions[0]
    if len(versions) > 1:
        yield "nccl.versions", versions


def _mpi(facts, host) -> Iterable[tuple[str, Any]]:
    install = facts.mpi
    for launcher in install.launchers:
        if launcher.mpi is not None:
            yield "mpi.impl", launcher.mpi.implementation
            yield "mpi.version", launcher.mpi.version
            return


def _limits(facts, host) -> Iterable[tuple[str, Any]]:
    memlock = facts.memlock
    yield "limits.memlock", "unlimited" if memlock.soft < 0 else memlock.soft
    yield "shm.size", facts.shm.total


def _cpu(facts, host) -> Iterable[tuple[str, Any]]:
    cpuinfo = _read(host, "/proc/cpuinfo", 1 << 20) or ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.split(":", 1)[0].strip() in ("model name", "Model name", "cpu model")), None)
    yield "cpu.model", model
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    yield "cpu.flags", sorted(f for f in flags if CPU_FLAGS.match(f)) if flags else None
    mem = re.search(r"^MemTotal:\s+(\d+) kB", _read(host, "/proc/meminfo") or "", re.M)
    yield "mem.total_gib", round(int(mem.group(1)) / 1024 ** 2) if mem else None
    yield "cpu.count", host.cpu_count()
    yield "cpu.usable", len(host.cpu_affinity())
    try:
        nodes = host.list_dir("/sys/devices/system/node")
    except OSError:
        nodes = None
    yield "numa.nodes", len([n for n in nodes if re.fullmatch(r"node\d+", n)]) if nodes else None


def _container(facts, host) -> Iterable[tuple[str, Any]]:
    yield "container.kind", facts.container_network or "none"
    text = _read(host, "/proc/self/cgroup") or ""
    lines = [line.split(":", 2) for line in text.splitlines() if line.count(":") >= 2]
    if not lines:
        return
    unified = next((path for hid, ctl, path in lines if hid == "0" and ctl == ""), None)
    if unified is not None and len(lines) == 1:
        yield "cgroup.version", 2
        yield "cgroup", unified
    else:
        yield "cgroup.version", 1
        yield "cgroup", next((path for _h, ctl, path in lines if "cpu" in ctl.split(",")), lines[0][2])


def _identity(facts, host) -> Iterable[tuple[str, Any]]:
    name = facts.hostname
    yield "host.name", name
    boot_id = (_read(host, "/proc/sys/kernel/random/boot_id") or "").strip() or None
    yield "host.boot_id", boot_id
    machine_id = (_read(host, "/etc/machine-id") or "").strip()
    # Hashed with a fixed prefix, as sd_id128_get_machine_app_specific() does: equal ids still
    # compare equal across nodes, and the report does not carry the raw id.
    yield "host.machine_id", hashlib.sha256(b"distdoctor:" + machine_id.encode()).hexdigest()[:32] \
        if machine_id else None
    hostid = host.env.get("NCCL_HOSTID")
    if boot_id is not None or hostid is not None:
        yield "nccl.host_hash", nccl_host_hash(name, boot_id, hostid)


def _network(facts, host) -> Iterable[tuple[str, Any]]:
    table = facts.interfaces
    shown = [i for i in table.interfaces if i.kind != "loopback"][:MAX_INTERFACES]
    for iface in shown:
        base = f"net.if.{iface.name}"
        yield f"{base}.kind", iface.kind
        v4 = [a for a in iface.addresses if a.family == "inet"]
        v6 = [a for a in iface.addresses if a.family == "inet6" and not a.address.lower().startswith("fe80")]
        first = (v4 or v6 or [None])[0]
        yield f"{base}.address", (f"{first.address}/{first.prefixlen}" if first.prefixlen is not None
                                  else first.address) if first else None
        yield f"{base}.mtu", iface.mtu
        yield f"{base}.speed", iface.speed
        yield f"{base}.state", iface.state


def _infiniband(facts, host) -> Iterable[tuple[str, Any]]:
    for port in facts.infiniband.ports[:MAX_IB_PORTS]:
        base = f"ib.{port.hca}.{port.port}"
        yield f"{base}.state", port.state or None
        yield f"{base}.phys_state", port.phys_state or None
        yield f"{base}.rate", port.rate or None
        yield f"{base}.link_layer", port.link_layer or None
    for hca, version in sorted(facts.ib_firmware.items())[:MAX_IB_PORTS]:
        yield f"ib.{hca}.fw", version


def _slurm_version(text: str) -> str | None:
    try:
        return parse_slurm_version(text)
    except ParseError:
        return None


def _slurm(facts, host) -> Iterable[tuple[str, Any]]:
    tool = next((t for t in ("sinfo", "srun", "scontrol") if host.which(t)), None)
    if tool is None:
        return
    result = host.run_cached([tool, "--version"], TOOL_TIMEOUT)
    yield "slurm.version", _slurm_version(result.stdout) if result.ok else None


# Cheap sections first, so that a slow tool (a hung nvidia-smi, mpirun) costs only what follows it.
_SECTIONS: tuple[tuple[str, Callable[[Any, Any], Iterable[tuple[str, Any]]]], ...] = (
    ("os", _os), ("identity", _identity), ("cpu", _cpu), ("limits", _limits), ("container", _container),
    ("packages", _packages), ("torch", _torch), ("network", _network), ("infiniband", _infiniband),
    ("tools", _tools), ("environment", _environment), ("gpus", _gpus), ("cuda", _cuda_available), ("rocm", _rocm),
    ("nccl", _nccl), ("slurm", _slurm),
    ("mpi", _mpi),
)


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
