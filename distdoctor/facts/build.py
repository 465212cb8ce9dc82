"""Facts for the 'build' area: what was built and what will really load.

MPI launchers and Open MPI's CUDA flag come from the tools themselves; NCCL libraries are
found where a training process could load them and each one's real version is asked of the
library (ncclGetVersion through ctypes, in ONE throwaway interpreter so that a library that
crashes or hangs on load costs a finding, not distdoctor); torch.distributed's backends come
from the build flags torch's wheel records, or from a probe of torch in a subprocess when
asked for (`--probe-torch`, and always in `nccl-test`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace

from distdoctor import bounded
from distdoctor.facts import fact, slowtools
from distdoctor.parsers import ParseError
from distdoctor.parsers.horovod import HorovodBuild, parse_check_build
from distdoctor.parsers.ldconfig import parse_ldconfig_cache
from distdoctor.parsers.mpirun import MpiVersion, parse_mpirun_version
from distdoctor.parsers.ompi_info import OmpiInfo, parse_ompi_info

VERSION_TIMEOUT = 5.0
HOROVOD_TIMEOUT = 60.0  # --check-build imports every framework Horovod knows
NCCL_PROBE_TIMEOUT = 20.0
TORCH_PROBE_TIMEOUT = 60.0

# Launchers distdoctor asks for their version: the generic names first (what `mpirun` in a job
# script runs), then the per-implementation names distributions install beside them.
LAUNCHERS = ("mpirun", "mpiexec")
SIDE_LAUNCHERS = ("mpirun.openmpi", "mpiexec.openmpi", "mpiexec.mpich", "mpirun.mpich", "mpiexec.hydra")


# --- MPI --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MpiLauncher:
    name: str  # as asked for: mpirun, mpiexec, mpiexec.mpich ...
    path: str = ""  # where PATH finds it; "" when absent
    resolved: str = ""  # after symlinks and Debian's alternatives
    mpi: MpiVersion | None = None
    error: str = ""  # why the version is unknown (tool failed, hung, unknown banner)


@dataclass(frozen=True)
class MpiInstall:
    launchers: tuple[MpiLauncher, ...]  # mpirun and mpiexec, present or not
    others: tuple[MpiLauncher, ...] = ()  # other implementations installed beside them

    def launcher(self, name: str) -> MpiLauncher | None:
        return next((launcher for launcher in self.launchers if launcher.name == name), None)


def _launcher(host, name: str) -> MpiLauncher:
    path = host.which(name)
    if not path:
        return MpiLauncher(name)
    resolved = host.realpath(path)
    result = host.run_cached([path, "--version"], timeout=VERSION_TIMEOUT)
    text = (result.stdout or "") + (result.stderr or "")
    if result.timed_out or (not result.ok and not text.strip()):
        return MpiLauncher(name, path, resolved, error=result.describe())
    try:
        return MpiLauncher(name, path, resolved, parse_mpirun_version(text))
    except ParseError as exc:
        return MpiLauncher(name, path, resolved, error=f"`{name} --version` printed something unrecognised: {exc}")


def _launchers(host, names: list[str]) -> dict[str, MpiLauncher]:
    """Ask every launcher at once: a sick node's hung `mpirun --version` then costs one
    timeout, not one per launcher."""
    answers = bounded.map(lambda name: _launcher(host, name), names, VERSION_TIMEOUT + 3, name="mpi-version")
    return {name: MpiLauncher(name, host.which(name) or "", error="no answer")
            if isinstance(answer, bounded.TimedOut) else answer for name, answer in zip(names, answers)}


@fact
def mpi(facts) -> MpiInstall:
    host = facts.host
    # one question per real binary: mpirun.openmpi is usually the orterun that mpirun already is
    seen = {host.realpath(path) for path in map(host.which, LAUNCHERS) if path}
    side = []
    for name in SIDE_LAUNCHERS:
        path = host.which(name)
        if path and host.realpath(path) not in seen:
            seen.add(host.realpath(path))
            side.append(name)
    # mpirun and mpiexec are usually one binary (Open MPI's orterun): ask it once.
    first_by_real: dict[str, str] = {}
    for name in [*LAUNCHERS, *side]:
        path = host.which(name)
        first_by_real.setdefault(host.realpath(path) if path else f"absent:{name}", name)
    answers = _launchers(host, list(first_by_real.values()))

    def answer(name: str) -> MpiLauncher:
        path = host.which(name)
        if not path:
            return MpiLauncher(name)
        first = first_by_real[host.realpath(path)]
        return answers[first] if first == name else replace(answers[first], name=name, path=path)

    launchers = tuple(answer(name) for name in LAUNCHERS)
    others: list[MpiLauncher] = []
    for name in side:
        launcher = answer(name)
        known = {(o.mpi.implementation, o.mpi.version) for o in (*launchers, *others) if o.mpi}
        if launcher.mpi is None or (launcher.mpi.implementation, launcher.mpi.version) not in known:
            others.append(launcher)
    return MpiInstall(launchers, tuple(others))


@dataclass(frozen=True)
class OmpiBuild:
    path: str = ""  # ompi_info's path; "" when Open MPI's ompi_info is not on PATH
    info: OmpiInfo | None = None
    error: str = ""
    seconds: float = 0.0


@fact
def ompi_build(facts) -> OmpiBuild:
    """`ompi_info --parsable --all`: the CUDA keys are only printed with --all, and asking for
    one framework's parameters costs the same 0.2 s (the time goes to loading components)."""
    host = facts.host
    path = host.which(slowtools.OMPI_INFO[0])
    if not path:
        return OmpiBuild()
    # The same command line that `check` may have started early (slowtools.start).
    result = host.run_cached([path, *slowtools.OMPI_INFO[1:]], timeout=slowtools.OMPI_INFO_TIMEOUT)
    if not result.ok:
        return OmpiBuild(path, error=result.describe(), seconds=result.duration)
    try:
        return OmpiBuild(path, parse_ompi_info(result.stdout), seconds=result.duration)
    except ParseError as exc:
        return OmpiBuild(path, error=str(exc), seconds=result.duration)


_MPI4PY_PROBE = """
import json, mpi4py
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
from mpi4py import MPI
print(json.dumps({"library": MPI.Get_library_version(), "version": list(MPI.Get_version()),
                  "config": {k: str(v) for k, v in mpi4py.get_config().items()}}))
"""


def _python_failure(result) -> str:
    """How a probe interpreter failed, in one line: its own last words, not the snippet."""
    if result.timed_out:
        return f"the probe did not finish within {result.duration:.0f} s and was killed"
    lines = (result.stderr or result.stdout or "").strip().splitlines()
    if result.error or not lines:
        return result.error or f"the probe exited with status {result.returncode} and printed nothing"
    return f"{lines[-1][:300]} (exit status {result.returncode})"


@dataclass(frozen=True)
class Mpi4py:
    installed: bool
    version: str = ""
    library: str = ""  # MPI_Get_library_version of the MPI mpi4py loads
    mpi: MpiVersion | None = None  # the implementation that library belongs to
    error: str = ""


def _library_banner(text: str) -> MpiVersion | None:
    first = text.strip().splitlines()[0] if text.strip() else ""
    if m := re.match(r"Open MPI v(\S+?),", first):
        return MpiVersion("Open MPI", m[1])
    if m := re.match(r"MVAPICH2? Version:\s*(\S+)", first):
        return MpiVersion("MVAPICH", m[1])
    if m := re.match(r"MPICH Version:\s*(\S+)", first):
        return MpiVersion("MPICH", m[1])
    if m := re.match(r"Intel\(R\) MPI Library (\S+)", first):
        return MpiVersion("Intel MPI", m[1])
    return None


@fact
def mpi4py(facts) -> Mpi4py:
    """The MPI mpi4py really loads. MPI_Get_library_version may be called before MPI_Init, so
    the probe never starts MPI (which could hang waiting for a launcher)."""
    dist = facts.host.distribution("mpi4py")
    if dist is None:
        return Mpi4py(False)
    result = facts.host.python(_MPI4PY_PROBE, timeout=VERSION_TIMEOUT * 2)
    if not result.ok:
        return Mpi4py(True, dist.version, error=_python_failure(result))
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Mpi4py(True, dist.version, error=f"mpi4py probe printed no result: {result.stdout[-200:]!r}")
    library = str(data.get("library", "")).strip()
    return Mpi4py(True, dist.version, library, _library_banner(library))


# --- NCCL -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NcclLibrary:
    path: str
    realpath: str
    sources: tuple[str, ...]  # where it was found: "pip nvidia-nccl-cu13", "LD_LIBRARY_PATH", ...
    # pip distributions whose RECORD lists this file: (name, version). Two when cu12 and cu13
    # packages are both installed, since both install nvidia/nccl/lib/libnccl.so.2.
    packages: tuple[tuple[str, str], ...] = ()
    version_code: int | None = None  # from ncclGetVersion
    error: str = ""  # load failure, missing symbol, crash or hang

    @property
    def package(self) -> str:
        return self.packages[-1][0] if self.packages else ""

    @property
    def package_version(self) -> str:
        return self.packages[-1][1] if self.packages else ""

    @property
    def version(self) -> str:
        return nccl_version_string(self.version_code) if self.version_code is not None else ""


@dataclass(frozen=True)
class NcclLibraries:
    libraries: tuple[NcclLibrary, ...]
    packages: tuple[tuple[str, str], ...] = ()  # every nvidia-nccl-* distribution installed
    default_path: str = ""  # what a bare dlopen("libnccl.so.2") loads: LD_LIBRARY_PATH, then the cache
    default_error: str = ""
    problems: tuple[str, ...] = ()  # lookups that failed (ldconfig missing, probe crashed)
    seconds: float = 0.0  # time spent in the probe subprocess(es)

    def by_realpath(self, path: str) -> NcclLibrary | None:
        return next((lib for lib in self.libraries if lib.realpath == path or lib.path == path), None)


def nccl_version_string(code: int) -> str:
    """NCCL's version code: major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 +
    patch before (2.8.4 is 2804)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


NCCL_PACKAGE = re.compile(r"^nvidia[-_]nccl([-_]cu\d+)?$", re.IGNORECASE)
_NCCL_FILE = re.compile(r"^libnccl\.so\.\d+$")
SONAME = "libnccl.so.2"
# Where glibc's dlopen looks after LD_LIBRARY_PATH and /etc/ld.so.cache.
_LOADER_DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu",
                        "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")

# Run in a fresh interpreter with the user's environment, so LD_LIBRARY_PATH is the one a
# training process would see. Each library is announced before it is loaded: if the
# interpreter dies or hangs, the last announced library is the culprit.
_NCCL_PROBE = r"""
import ctypes, json, sys
targets = json.loads(%r)
class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
libc = ctypes.CDLL(None)
def probe(target):
    out = {"target": target}
    try:
        lib = ctypes.CDLL(target)
    except OSError as exc:
        out["error"] = "cannot load: " + str(exc)
        return out
    try:
        func = lib.ncclGetVersion
    except AttributeError:
        out["error"] = "loads, but has no ncclGetVersion symbol (not an NCCL library, or a stub)"
        return out
    info = DlInfo()
    if libc.dladdr(ctypes.cast(func, ctypes.c_void_p), ctypes.byref(info)) and info.fname:
        out["file"] = info.fname.decode(errors="replace")
    code = ctypes.c_int(-1)
    rc = func(ctypes.byref(code))
    if rc != 0:
        out["error"] = "ncclGetVersion returned %%d" %% rc
    else:
        out["code"] = code.value
    return out
for index, target in enumerate(targets):
    print("@@dd-begin %%d" %% index, flush=True)
    print("@@dd-result " + json.dumps(probe(target)), flush=True)
"""


def _nccl_candidates(facts) -> tuple[dict[str, dict], list[tuple[str, str]], list[str]]:
    """Every libnccl a process could load, keyed by real path, in the loader's order."""
    host = facts.host
    env = host.env
    found: dict[str, dict] = {}
    problems: list[str] = []

    def add(path: str, source: str, package: str = "", version: str = "") -> None:
        real = host.realpath(path)
        entry = found.setdefault(real, {"path": path, "sources": [], "packages": []})
        if source not in entry["sources"]:
            entry["sources"].append(source)
        if package:
            entry["packages"].append((package, version))

    def scan(directory: str, source: str) -> None:
        try:
            names = host.list_dir(directory) or []
        except OSError as exc:
            problems.append(f"{directory} ({source}): {exc.strerror or exc}")
            return
        for name in names:
            if _NCCL_FILE.match(name):
                add(os.path.join(directory, name), source)

    for directory in [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]:
        scan(directory, "LD_LIBRARY_PATH")
    packages: list[tuple[str, str]] = []
    for normalized in host.distribution_names():
        if not NCCL_PACKAGE.match(normalized):
            continue
        dist = host.distribution(normalized)
        if dist is None:
            continue
        name, version = dist.name, dist.version
        packages.append((name, version))
        for rel in dist.files:
            if _NCCL_FILE.match(os.path.basename(rel)):
                add(os.path.join(dist.location, rel), f"pip {name}", name, version)
    for var in ("NCCL_HOME", "NCCL_ROOT", "CONDA_PREFIX"):
        if env.get(var):
            for sub in ("lib", "lib64"):
                scan(os.path.join(env[var], sub), var)
    ldconfig = host.which("ldconfig") or ("/sbin/ldconfig" if host.exists("/sbin/ldconfig") else None)
    if ldconfig:
        result = host.run_cached([ldconfig, "-p"], timeout=VERSION_TIMEOUT, depends_on=("/etc/ld.so.cache",))
        if result.ok:
            try:
                for entry in parse_ldconfig_cache(result.stdout):
                    if _NCCL_FILE.match(entry.name):
                        add(entry.path, "ldconfig cache")
            except ParseError as exc:
                problems.append(str(exc))
        else:
            problems.append(result.describe())
    return found, packages, problems


def _run_nccl_probe(host, targets: list[str], timeout: float) -> tuple[dict[int, dict], list[str], float]:
    """Probe every target; when the interpreter crashes or hangs on one, record that and go on
    with the rest in a fresh one."""
    results: dict[int, dict] = {}
    problems: list[str] = []
    seconds = 0.0
    start = 0
    while start < len(targets):
        batch = targets[start:]
        result = host.python(_NCCL_PROBE % json.dumps(batch), timeout=timeout)
        seconds += result.duration
        last = None
        for line in result.stdout.splitlines():
            if line.startswith("@@dd-begin "):
                last = start + int(line.split()[1])
            elif line.startswith("@@dd-result ") and last is not None:
                try:
                    results[last] = json.loads(line[len("@@dd-result "):])
                except ValueError:
                    results[last] = {"error": "probe printed a garbled result"}
        if last is None:  # the interpreter itself did not start
            problems.append(f"NCCL probe could not run: {result.describe()}")
            break
        if last in results and last == len(targets) - 1:
            break
        if last not in results:
            how = "hung (killed after %.0f s)" % timeout if result.timed_out else (
                f"crashed the process (exit status {result.returncode})")
            results[last] = {"error": f"loading it {how}"}
        start = last + 1
    return results, problems, seconds


@fact
def nccl_libraries(facts) -> NcclLibraries:
    found, packages, problems = _nccl_candidates(facts)
    reals = list(found)
    if not found and not any(facts.host.exists(os.path.join(d, SONAME)) for d in _LOADER_DEFAULT_DIRS):
        # Nothing the loader could find (cache, LD_LIBRARY_PATH and its default directories all
        # empty): say what dlopen would say without paying for a probe interpreter, which is
        # most of what this check costs on a login node.
        return NcclLibraries((), tuple(packages), "", f"{SONAME}: cannot open shared object file: "
                             "No such file or directory", tuple(problems), 0.0)
    targets = [SONAME] + [found[real]["path"] for real in reals]
    results, probe_problems, seconds = _run_nccl_probe(facts.host, targets, NCCL_PROBE_TIMEOUT)
    problems.extend(probe_problems)
    libraries = []
    for index, real in enumerate(reals, 1):
        entry, res = found[real], results.get(index, {})
        libraries.append(NcclLibrary(entry["path"], real, tuple(entry["sources"]), tuple(entry["packages"]),
                                     res.get("code"),
                                     res.get("error", "" if res else "not probed")))
    default = results.get(0, {})
    default_path = facts.host.realpath(default["file"]) if default.get("file") else ""
    default_error = default.get("error", "")
    if default_path and default_path not in found:
        # found by the loader somewhere distdoctor did not look (e.g. /etc/ld.so.conf.d not yet cached)
        libraries.append(NcclLibrary(default["file"], default_path, ("dynamic loader",),
                                     version_code=default.get("code")))
    return NcclLibraries(tuple(libraries), tuple(packages), default_path, default_error, tuple(problems), seconds)


# --- torch.distributed ------------------------------------------------------------------------

BACKENDS = ("gloo", "nccl", "mpi", "ucc")
_DEFINES = {"gloo": "USE_C10D_GLOO", "nccl": "USE_C10D_NCCL", "mpi": "USE_C10D_MPI", "ucc": "USE_C10D_UCC"}
_CMAKE_TARGETS = os.path.join("torch", "share", "cmake", "Caffe2", "Caffe2Targets.cmake")
_REQUIRES_NCCL = re.compile(r"^Requires-Dist:\s*(nvidia-nccl-cu\d+)\s*(?:\(?\s*==\s*([\w.]+))?", re.I | re.M)

# Runs in a child interpreter only (never in `distdoctor check`'s own process).
TORCH_PROBE = r"""
import json, os, torch
dist = torch.distributed
out = {"version": torch.__version__, "cuda": torch.version.cuda,
       "backends": {name: bool(getattr(dist, "is_%s_available" % name, lambda: False)()) for name in
                    ("gloo", "nccl", "mpi", "ucc")} if dist.is_available() else {}}
if out["backends"].get("nccl"):
    try:
        out["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception as exc:
        out["nccl_error"] = str(exc)
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libnccl" in line and "/" in line}
    out["nccl_paths"] = sorted(paths)
print("@@dd-torch " + json.dumps(out), flush=True)
"""


@dataclass(frozen=True)
class TorchDistributed:
    installed: bool
    version: str = ""
    backends: dict[str, bool] = field(default_factory=dict)  # empty when unknown
    source: str = ""  # "build flags" (Caffe2Targets.cmake) or "probe" (import torch in a subprocess)
    nccl_requirement: tuple[str, str] | None = None  # (package, pinned version) from torch's metadata
    nccl_runtime: str = ""  # probe only: torch.cuda.nccl.version()
    nccl_paths: tuple[str, ...] = ()  # probe only: the libnccl files torch had mapped
    error: str = ""


def probe_torch_distributed(host, timeout: float = TORCH_PROBE_TIMEOUT) -> dict:
    """Import torch in a subprocess and report what torch.distributed really offers. Returns
    the probe's dict, or {"error": ...}. `nccl-test` uses this before it starts ranks."""
    result = host.python(TORCH_PROBE, timeout=timeout)
    for line in result.stdout.splitlines():
        if line.startswith("@@dd-torch "):
            try:
                return json.loads(line[len("@@dd-torch "):])
            except ValueError:
                break
    return {"error": f"torch probe failed: {_python_failure(result)}"}


@fact
def torch_distributed(facts) -> TorchDistributed:
    host = facts.host
    found = facts.torch_distribution
    if found is None:
        return TorchDistributed(False)
    version, location, metadata = found
    requirement = None
    if m := _REQUIRES_NCCL.search(metadata):
        requirement = (m[1].lower(), m[2] or "")
    options = facts.options
    if options.get("probe_torch"):
        data = probe_torch_distributed(host)
        if "error" not in data:
            return TorchDistributed(True, version, dict(data.get("backends", {})), "probe", requirement,
                                    data.get("nccl", ""), tuple(data.get("nccl_paths", ())),
                                    data.get("nccl_error", ""))
        probe_error = data["error"]
    else:
        probe_error = ""
    try:
        text = host.read_text(os.path.join(location, _CMAKE_TARGETS))
    except OSError as exc:
        text, probe_error = None, probe_error or f"{_CMAKE_TARGETS}: {exc.strerror or exc}"
    if text is None:
        return TorchDistributed(True, version, {}, "", requirement,
                                error=probe_error or "torch records no build flags here (no Caffe2Targets.cmake)")
    defines = set()
    for value in re.findall(r'INTERFACE_COMPILE_DEFINITIONS\s+"([^"]*)"', text):
        defines.update(value.split(";"))
    distributed = "USE_DISTRIBUTED" in defines
    backends = {name: distributed and define in defines for name, define in _DEFINES.items()}
    return TorchDistributed(True, version, backends, "build flags", requirement, error=probe_error)


# --- Horovod ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HorovodInstall:
    installed: bool  # horovodrun on PATH
    build: HorovodBuild | None = None
    error: str = ""


@fact
def horovod(facts) -> HorovodInstall:
    host = facts.host
    path = host.which("horovodrun")
    if not path:
        return HorovodInstall(False)
    result = host.run([path, "--check-build"], timeout=HOROVOD_TIMEOUT)
    if not result.ok:
        return HorovodInstall(True, error=result.describe())
    try:
        return HorovodInstall(True, parse_check_build(result.stdout))
    except ParseError as exc:
        return HorovodInstall(True, error=str(exc))


# --- the node's GPUs, as the driver lists them ------------------------------------------------

@fact
def driver_gpu_count(facts) -> int:
    """NVIDIA GPUs the kernel driver knows (one directory per PCI address). Cheaper than
    nvidia-smi and enough to decide whether CUDA-aware MPI or Horovod's NCCL matter here."""
    try:
        return len(facts.host.list_dir("/proc/driver/nvidia/gpus") or [])
    except OSError:
        return 0
