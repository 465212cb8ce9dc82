"""What the inventory reads about the system beyond the other areas: the distribution, the
platform, compilers, installed packages, CPU and cgroup, and the host's identity files."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

from distdoctor import bounded
from distdoctor.facts import fact
from distdoctor.parsers import ParseError
from distdoctor.parsers.cpuinfo import parse_cpu_flags, parse_cpu_model, parse_mem_total_kib
from distdoctor.parsers.os_release import OsRelease, parse_os_release
from distdoctor.parsers.proc_cgroup import CgroupMembership, parse_proc_cgroup
from distdoctor.parsers.slurm import parse_version as parse_slurm_version
from distdoctor.parsers.tool_version import parse_nvcc_version, parse_version_banner
from distdoctor.parsers.version_header import parse_cudnn_version_h, parse_miopen_version_h

TOOL_TIMEOUT = 3.0  # gcc/clang/cmake/nvcc --version
# name, argv, parser of its output
_TOOLS = (("gcc", ("gcc", "--version"), parse_version_banner), ("clang", ("clang", "--version"), parse_version_banner),
          ("cmake", ("cmake", "--version"), parse_version_banner), ("nvcc", ("nvcc", "--version"), parse_nvcc_version))
_CUDNN_HEADERS = ("/usr/include/cudnn_version.h", "/usr/local/cuda/include/cudnn_version.h",
                  "/usr/include/x86_64-linux-gnu/cudnn_version.h", "/usr/include/cudnn.h")


def _read(host, path: str, max_bytes: int = 65536) -> str | None:
    try:
        return host.read_text(path, max_bytes=max_bytes)
    except OSError:
        return None


@fact
def os_release(facts) -> OsRelease:
    host = facts.host
    return parse_os_release(_read(host, "/etc/os-release") or _read(host, "/usr/lib/os-release") or "")


@fact
def platform(facts) -> dict:
    """uname's release and machine, the C library, Python's platform string."""
    return dict(facts.host.platform_info())


@fact
def compilers(facts) -> dict[str, str | None]:
    """{gcc, clang, cmake, nvcc: version or None}. Asked all at once: four process starts in a
    row were most of what the inventory added to `check`."""
    host = facts.host

    def ask(tool) -> str | None:
        _name, argv, parse = tool
        if not host.which(argv[0]):
            return None
        result = host.run(list(argv), timeout=TOOL_TIMEOUT)
        return parse(result.stdout) if result.ok else None

    found = bounded.map(ask, _TOOLS, TOOL_TIMEOUT + 1, name="compiler-version")
    return {t[0]: None if isinstance(v, bounded.TimedOut) else v for t, v in zip(_TOOLS, found)}


@fact
def distributions(facts) -> dict[str, str]:
    """{normalized package name: version} of what is installed for this Python."""
    return dict(facts.host.distribution_versions())


@fact
def cudnn(facts) -> str | None:
    """cuDNN's version: the pip package's, else the first header found."""
    versions = facts.distributions
    pip = next((versions[n] for n in sorted(versions) if re.match(r"nvidia_cudnn(_cu\d+)?$", n)), None)
    if pip:
        return pip
    for path in _CUDNN_HEADERS:
        version = parse_cudnn_version_h(_read(facts.host, path) or "")
        if version:
            return version
    return None


@dataclass(frozen=True)
class Rocm:
    version: str | None
    miopen: str | None


@fact
def rocm(facts) -> Rocm:
    host = facts.host
    return Rocm((_read(host, "/opt/rocm/.info/version") or "").strip() or None,
                parse_miopen_version_h(_read(host, "/opt/rocm/include/miopen/version.h") or ""))


@dataclass(frozen=True)
class Cpu:
    model: str | None
    flags: tuple[str, ...]  # the first processor's, as /proc/cpuinfo lists them
    mem_total_kib: int | None
    count: int | None
    usable: int
    numa_nodes: int | None


@fact
def cpu(facts) -> Cpu:
    host = facts.host
    cpuinfo = _read(host, "/proc/cpuinfo", 1 << 20) or ""
    try:
        nodes = host.list_dir("/sys/devices/system/node")
    except OSError:
        nodes = None
    return Cpu(parse_cpu_model(cpuinfo), tuple(parse_cpu_flags(cpuinfo)),
               parse_mem_total_kib(_read(host, "/proc/meminfo") or ""), host.cpu_count(), len(host.cpu_affinity()),
               len([n for n in nodes if re.fullmatch(r"node\d+", n)]) if nodes else None)


SLURMD_PATHS = ("/usr/sbin/slurmd", "/usr/local/sbin/slurmd", "/opt/slurm/sbin/slurmd")


@fact
def slurm_version(facts) -> str | None:
    """The installed Slurm's version (`slurmd -V`, else `sinfo --version`, srun's or scontrol's);
    None when none of them is installed or the answer is unreadable."""
    host = facts.host
    # The clients need a slurm.conf (or DNS SRV records) even for --version; slurmd -V does not,
    # and a compute node has slurmd.
    # slurmd lives in an sbin directory that a user's PATH (and os.defpath, which an empty
    # environment falls back to) lacks: looked up where installations put it, so that the fact
    # does not depend on the caller's shell.
    slurmd = host.which("slurmd") or next((p for p in SLURMD_PATHS if host.exists(p)), None)
    for tool, flag in ((slurmd, "-V"), ("sinfo", "--version"), ("srun", "--version"), ("scontrol", "--version")):
        if not tool or not (os.sep in tool or host.which(tool)):
            continue
        result = host.run_cached([tool, flag], TOOL_TIMEOUT)
        try:
            return parse_slurm_version(result.stdout) if result.ok else None
        except ParseError:
            return None
    return None


@fact
def cgroup(facts) -> CgroupMembership | None:
    return parse_proc_cgroup(_read(facts.host, "/proc/self/cgroup") or "")


@dataclass(frozen=True)
class HostIdentity:
    boot_id: str | None
    machine_id: str | None  # hashed: systemd asks that the raw id stay confidential


@fact
def host_identity(facts) -> HostIdentity:
    host = facts.host
    boot_id = (_read(host, "/proc/sys/kernel/random/boot_id") or "").strip() or None
    machine_id = (_read(host, "/etc/machine-id") or "").strip()
    # Hashed with a fixed prefix, as sd_id128_get_machine_app_specific() does: equal ids still
    # compare equal across nodes, and the report does not carry the raw id.
    hashed = hashlib.sha256(b"distdoctor:" + machine_id.encode()).hexdigest()[:32] if machine_id else None
    return HostIdentity(boot_id, hashed)
