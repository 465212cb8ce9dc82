"""What was built and what will really load: MPI, NCCL, torch.distributed, Horovod.

"It worked yesterday" after a pip install usually means a second NCCL, an MPI without CUDA
support, or a Horovod built without NCCL. These checks name what is installed and flag the
combinations that fail or run slowly."""

from __future__ import annotations

import os
import shlex

from distdoctor.api import Context, check, fail, ok, skip, warn
from distdoctor.text import plural

_q = shlex.quote  # a value from the machine, as one shell word in a fix

OPEN_MPI = "Open MPI"


def _label(launcher) -> str:
    return launcher.mpi.label if launcher.mpi else "unknown MPI"


def _torch_cuda(ctx: Context) -> str | None:
    """torch's CUDA version from the shared torch_install fact; None when torch is CPU-only or
    absent."""
    install = ctx.facts.torch_install
    return (install.cuda or None) if install.installed else None


# --- MPI --------------------------------------------------------------------------------------

@check("build.mpi-implementation", title="mpirun and mpiexec belong to one MPI", tags=("build", "mpi"),
       timeout=15)
def mpi_implementation(ctx: Context):
    """`mpirun` and `mpiexec` come from whatever is first on PATH (or Debian's alternatives).
    A program built against one MPI and started by another's launcher runs as N separate
    1-rank jobs, or fails in MPI_Init. Other MPIs installed beside the default are listed,
    because `module load` or a PATH change silently switches between them."""
    install = ctx.facts.mpi
    present = [launcher for launcher in install.launchers if launcher.path]
    evidence = {launcher.name: {"path": launcher.path, "resolved": launcher.resolved,
                                "implementation": launcher.mpi.implementation if launcher.mpi else None,
                                "version": launcher.mpi.version if launcher.mpi else None,
                                "error": launcher.error} for launcher in install.launchers + install.others}
    if not present:
        others = ", ".join(f"{_label(o)} ({o.name})" for o in install.others)
        yield skip("no mpirun or mpiexec on PATH" + (f"; installed but not on PATH as mpirun: {others}" if others else ""),
                   evidence=evidence, fix="module load openmpi   # or: apt-get install openmpi-bin")
        return
    for launcher in present:
        if launcher.error:
            yield warn(f"cannot tell which MPI `{launcher.name}` is: {launcher.error}", subject=launcher.name,
                       evidence=evidence, fix=f"{_q(launcher.path)} --version   # run it by hand and look")
    known = [launcher for launcher in present if launcher.mpi]
    kinds = {(launcher.mpi.implementation, launcher.mpi.version) for launcher in known}
    if len(kinds) > 1:
        described = "; ".join(f"{launcher.name} is {_label(launcher)} ({launcher.resolved})" for launcher in known)
        yield warn(f"mpirun and mpiexec are different MPIs: {described}", subject="mpirun/mpiexec",
                   evidence=evidence,
                   explanation="Scripts and launchers (Horovod uses mpirun, others mpiexec) will start ranks "
                               "with different runtimes; a binary built with one MPI started by the other runs "
                               "as separate 1-rank jobs.",
                   fix="module avail mpi   # then: module purge && module load ONE-MPI; on Debian/Ubuntu: "
                       "update-alternatives --config mpirun")
    elif known:
        main = known[0]
        names = " and ".join(f"`{launcher.name}`" for launcher in known)
        yield ok(f"{names} run {_label(main)} ({main.resolved})", subject=main.mpi.implementation,
                 evidence=evidence)
    for other in install.others:
        if other.mpi:
            yield ok(f"{_label(other)} is installed alongside ({other.name} -> {other.resolved})",
                     subject=other.mpi.implementation, evidence=evidence,
                     explanation="Not what `mpirun` starts. Programs and mpi4py must be built with the MPI "
                                 "whose launcher starts them; call the launcher by its full name to choose.")
        elif other.error:
            yield warn(f"cannot tell which MPI `{other.name}` is: {other.error}", subject=other.name,
                       evidence=evidence)


@check("build.mpi-cuda-aware", title="Open MPI is CUDA-aware where GPUs need it", tags=("build", "mpi", "gpu"),
       timeout=20)
def mpi_cuda_aware(ctx: Context):
    """Open MPI records whether CUDA support was compiled in as `opal_built_with_cuda_support`
    / `mpi_built_with_cuda_support` (`ompi_info --parsable --all`). The `cuda` entry in the
    MPI-extensions list is NOT proof: builds without CUDA list it too. Passing GPU buffers to
    an MPI without CUDA support crashes (segfault in the copy) or forces staging through host
    memory (Horovod/mpi4py with CuPy/torch tensors)."""
    build = ctx.facts.ompi_build  # first: the slow one (0.2 s), while build.mpi-implementation fills `mpi`
    mpirun = ctx.facts.mpi.launcher("mpirun")
    is_ompi = bool(mpirun and mpirun.mpi and mpirun.mpi.implementation == OPEN_MPI)
    gpus = ctx.facts.driver_gpu_count
    if not build.path:
        if is_ompi:
            yield warn(f"mpirun is {_label(mpirun)} but ompi_info is not on PATH: CUDA support unknown",
                       subject="ompi_info", fix=f"PATH={_q(os.path.dirname(mpirun.resolved))}:$PATH ompi_info --parsable "
                                                f"--all | grep built_with_cuda_support")
        elif mpirun and mpirun.mpi:
            yield skip(f"mpirun is {_label(mpirun)}: its tools do not record CUDA support",
                       subject=mpirun.mpi.implementation,
                       explanation="MPICH and derived MPIs are CUDA-aware only when configured --with-cuda (MPICH 4+) "
                                   "or built as such (MVAPICH2-GDR, Intel MPI with I_MPI_OFFLOAD).")
        else:
            yield skip("Open MPI is not installed (no ompi_info)")
        return
    evidence = {"ompi_info": build.path, "seconds": round(build.seconds, 3), "gpus": gpus}
    if build.error:
        yield warn(f"cannot read Open MPI's build flags: {build.error}", subject="ompi_info", evidence=evidence,
                   fix=f"{_q(build.path)} --parsable --all | grep built_with_cuda_support")
        return
    info = build.info
    label = f"Open MPI {info.version}" if info.version else "Open MPI"
    evidence.update({"version": info.version, "cuda_flags": dict(info.cuda_keys),
                     "mpi_extensions": list(info.mpi_extensions)})
    if mpirun and mpirun.mpi and mpirun.mpi.implementation == OPEN_MPI and info.version \
            and mpirun.mpi.version != info.version:
        yield warn(f"ompi_info is {label} but mpirun is {_label(mpirun)}: two Open MPI installs are mixed on PATH",
                   subject="ompi_info", evidence=evidence,
                   fix=f"ls {_q(os.path.join(os.path.dirname(mpirun.resolved), 'ompi_info'))}"
                       "   # use the ompi_info of mpirun's prefix: "
                       "put that directory first on PATH (or module purge && module load one openmpi)")
    cuda = info.cuda_support
    fix = ("module avail openmpi   # load a CUDA-aware build; or rebuild Open MPI with "
           "./configure --with-cuda=/usr/local/cuda --with-ucx=UCX_BUILT_WITH_CUDA")
    if cuda is None:
        yield warn(f"{label}: ompi_info did not print built_with_cuda_support, CUDA support unknown",
                   subject=label, evidence=evidence, fix=f"{_q(build.path)} --parsable --all | grep built_with_cuda")
    elif cuda:
        yield ok(f"{label} is built with CUDA support", subject=label, evidence=evidence)
    elif gpus:
        yield warn(f"{label} is built without CUDA support, on a node with {gpus} GPU(s)", subject=label,
                   evidence=evidence,
                   explanation="GPU buffers handed to MPI (Horovod MPI ops, mpi4py with CuPy/torch, "
                               "torch.distributed's mpi backend) crash or are staged through host memory. NCCL "
                               "does not need a CUDA-aware MPI; only MPI collectives on GPU memory do.",
                   fix=fix)
    else:
        yield ok(f"{label} is built without CUDA support (no NVIDIA GPU on this node, so only host buffers use it)",
                 subject=label, evidence=evidence,
                 explanation="On GPU nodes this build would crash or stage through host memory when given GPU "
                             "buffers. The 'cuda' entry in the MPI extensions list does not mean CUDA support.")


@check("build.mpi4py-mpi", title="mpi4py uses the MPI that mpirun starts", tags=("build", "mpi"), timeout=20)
def mpi4py_mpi(ctx: Context):
    """mpi4py is compiled (or, for binary wheels, dlopens) against one MPI library. Started by
    another implementation's launcher, every rank thinks it is rank 0 of 1."""
    info = ctx.facts.mpi4py
    if not info.installed:
        yield skip("mpi4py is not installed")
        return
    evidence = {"mpi4py": info.version, "library": info.library[:300]}
    if info.error:
        yield warn(f"mpi4py {info.version} cannot load its MPI: {info.error}", subject="mpi4py", evidence=evidence,
                   fix="pip install --force-reinstall --no-binary=mpi4py --no-cache-dir mpi4py   # rebuild against "
                       "the MPI on PATH")
        return
    mpirun = ctx.facts.mpi.launcher("mpirun")
    uses = info.mpi.label if info.mpi else info.library.splitlines()[0][:80] if info.library else "unknown MPI"
    if mpirun and mpirun.mpi and info.mpi and mpirun.mpi.implementation != info.mpi.implementation:
        yield fail(f"mpi4py {info.version} uses {uses} but mpirun is {_label(mpirun)}", subject="mpi4py",
                   evidence=evidence,
                   explanation="Each rank started by this mpirun initialises as a 1-rank world: no error, "
                               "just every process believing it is rank 0.",
                   fix="env MPICC=$(dirname $(readlink -f $(which mpirun)))/mpicc pip install --force-reinstall "
                       "--no-binary=mpi4py --no-cache-dir mpi4py")
    else:
        yield ok(f"mpi4py {info.version} uses {uses}", subject="mpi4py", evidence=evidence)


# --- NCCL -------------------------------------------------------------------------------------

def _parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _without_dir(value: str, directory: str) -> str:
    kept = [d for d in value.split(":") if d and os.path.normpath(d) != os.path.normpath(directory)]
    return ":".join(kept)


@check("build.nccl-libraries", title="One NCCL, of the version torch expects, is what loads",
       tags=("build", "nccl"), timeout=30)
def nccl_libraries(ctx: Context):
    """Lists every NCCL library a training process could load: nvidia-nccl-cu* pip packages in
    this Python environment, libnccl.so.* in LD_LIBRARY_PATH, NCCL_HOME, CONDA_PREFIX and the
    loader cache, each with the version the library itself reports (ncclGetVersion). A
    libnccl in LD_LIBRARY_PATH wins over the pip package torch was built against (the loader
    searches LD_LIBRARY_PATH before a library's RUNPATH): an older one fails with undefined
    symbols, a different one changes algorithms and defaults."""
    libs = ctx.facts.nccl_libraries
    tdist = ctx.facts.torch_distributed
    rows = [[lib.path, lib.version or "-", ", ".join(lib.sources),
             ", ".join(f"{name} {version}" for name, version in lib.packages) or "-", lib.error or "ok"]
            for lib in libs.libraries]
    evidence = {"default": libs.default_path, "packages": [list(p) for p in libs.packages],
                "torch_requires": list(tdist.nccl_requirement) if tdist.nccl_requirement else None,
                "probe_seconds": round(libs.seconds, 3)}
    if rows:
        evidence["table"] = {"columns": ["library", "version", "found via", "pip package", "load"], "rows": rows}
    for problem in libs.problems:
        yield warn(f"NCCL lookup incomplete: {problem}", evidence=evidence)
    torch_wants_nccl = bool(tdist.backends.get("nccl")) or tdist.nccl_requirement is not None
    if not libs.libraries:
        if torch_wants_nccl:
            pkg = tdist.nccl_requirement[0] if tdist.nccl_requirement else "nvidia-nccl-cu12"
            pin = f"=={tdist.nccl_requirement[1]}" if tdist.nccl_requirement and tdist.nccl_requirement[1] else ""
            yield fail(f"torch {tdist.version} is built with NCCL but no NCCL library is installed", subject="nccl",
                       evidence=evidence, fix=f"pip install {_q(pkg + pin)}")
        else:
            yield ok("no NCCL library on this node (nothing here needs one)", subject="nccl", evidence=evidence)
        return

    broken = [lib for lib in libs.libraries if lib.error]
    for lib in broken:
        yield warn(f"{lib.path} ({', '.join(lib.sources)}) is unusable: {lib.error}", subject=lib.path,
                   evidence=evidence,
                   fix=(f"pip install --force-reinstall --no-deps {_q(f'{lib.package}=={lib.package_version}')}" if lib.package
                        else f"ls -l {_q(lib.realpath)}   # repair or remove it, or take its directory out of LD_LIBRARY_PATH"))

    # pip packages: duplicates, files overwritten by another package, pins torch asks for
    cuda = _torch_cuda(ctx)
    if len(libs.packages) > 1:
        names = [name for name, _v in libs.packages]
        keep = None
        if tdist.nccl_requirement:
            keep = tdist.nccl_requirement[0]
        elif cuda:
            keep = next((n for n in names if n.lower().endswith(f"cu{cuda.split('.')[0]}")), None)
        stray = [n for n in names if n.lower() != (keep or "").lower()] if keep else names[1:]
        yield warn(f"{len(libs.packages)} NCCL pip packages installed: "
                   f"{', '.join(f'{n} {v}' for n, v in libs.packages)}", subject="pip",
                   evidence=evidence,
                   explanation="They install the same file, nvidia/nccl/lib/libnccl.so.2: the last one installed "
                               "wins, and pip's record of the other no longer matches what is on disk."
                               + (f" torch needs {keep}." if keep else ""),
                   fix=f"pip uninstall -y {' '.join(map(shlex.quote, stray))} && pip install --force-reinstall --no-deps "
                       + _q(f"{keep or names[0]}" + (f"=={tdist.nccl_requirement[1]}" if tdist.nccl_requirement
                                                             and tdist.nccl_requirement[1]
                                                             and keep == tdist.nccl_requirement[0] else "")))
    stale = set()
    for lib in libs.libraries:
        for name, version in lib.packages:
            if lib.version and _parse_version(lib.version) != _parse_version(version)[:3]:
                stale.add(name.lower())
                yield warn(f"{name} {version} is installed but its {os.path.basename(lib.path)} is NCCL {lib.version}",
                           subject=lib.path, evidence=evidence,
                           explanation="Another package (or a manual copy) overwrote the file pip installed.",
                           fix=f"pip install --force-reinstall --no-deps {_q(f'{name}=={version}')}")
    if tdist.nccl_requirement and tdist.nccl_requirement[1]:
        want_pkg, want = tdist.nccl_requirement
        have = dict((n.lower(), v) for n, v in libs.packages).get(want_pkg)
        if have is None:
            yield fail(f"torch {tdist.version} requires {want_pkg}=={want}, which is not installed", subject="pip",
                       evidence=evidence, fix=f"pip install {_q(f'{want_pkg}=={want}')}")
        elif want_pkg not in stale and _parse_version(have)[:3] != _parse_version(want)[:3]:
            yield warn(f"torch {tdist.version} was built against {want_pkg}=={want} but {have} is installed",
                       subject="pip", evidence=evidence,
                       explanation="A later `pip install -U` or another package replaced the NCCL torch was "
                                   "tested with; newer NCCL usually works, older fails with undefined symbols.",
                       fix=f"pip install {_q(f'{want_pkg}=={want}')}")
    if cuda:
        major = cuda.split(".")[0]
        for name, version in libs.packages:
            suffix = name.lower().rsplit("cu", 1)[-1]
            if suffix.isdigit() and suffix != major:
                yield warn(f"{name} {version} is for CUDA {suffix}, but torch uses CUDA {cuda}", subject="pip",
                           evidence=evidence, fix=f"pip uninstall -y {_q(name)}   # torch brings the NCCL for CUDA {major}")

    # what a training process actually loads
    pip_lib = next((lib for lib in libs.libraries if lib.package and lib.version), None)
    ld_path = [lib for lib in libs.libraries if "LD_LIBRARY_PATH" in lib.sources and lib.version]
    torch_loads = ld_path[0] if ld_path else pip_lib
    if ld_path and pip_lib and ld_path[0].version != pip_lib.version:
        shadow = ld_path[0]
        directory = os.path.dirname(shadow.path)
        required = tdist.nccl_requirement[1] if tdist.nccl_requirement and tdist.nccl_requirement[1] else pip_lib.version
        older = _parse_version(shadow.version) < _parse_version(required)[:3]
        make = fail if older else warn
        yield make(f"LD_LIBRARY_PATH puts NCCL {shadow.version} ({shadow.path}) ahead of pip's {pip_lib.package} "
                   f"{pip_lib.version}", subject=shadow.path, evidence=evidence,
                   explanation="The loader searches LD_LIBRARY_PATH before torch's RUNPATH, so torch loads this "
                               "library instead of the pip one. "
                               + ("Being older than what torch needs, it fails with undefined symbols or "
                                  "'NCCL version mismatch'." if older
                                  else "A different NCCL changes algorithms, protocols and defaults."),
                   fix=f"export LD_LIBRARY_PATH={_q(_without_dir(ctx.env.get('LD_LIBRARY_PATH', ''), directory))}")
    versions = sorted({lib.version for lib in libs.libraries if lib.version}, key=_parse_version)
    default = libs.by_realpath(libs.default_path)
    where = "; ".join(f"{lib.version} at {lib.path} ({', '.join(lib.sources)})" for lib in libs.libraries
                      if lib.version)
    shadowed = bool(ld_path and pip_lib and ld_path[0].version != pip_lib.version)  # its own finding above
    if len(versions) > 1 and tdist.installed and torch_loads and default and not shadowed:
        # Several on disk matter only where two loaders pick different ones: a pip torch's own NCCL
        # beside a system libnccl (the GPU image of docs/gpu-truth.md) is fine for torch, and
        # programs that dlopen libnccl.so.2 (nccl-tests, Horovod, MPI apps) get the other.
        if default.version != torch_loads.version:
            directory = os.path.dirname(torch_loads.path)
            current = ctx.env.get("LD_LIBRARY_PATH", "")
            yield warn(f"torch loads NCCL {torch_loads.version}, a plain dlopen of libnccl.so.2 gets {default.version}",
                       subject="nccl", evidence=evidence,
                       explanation=f"{where}. torch finds its own library through its RUNPATH; anything else that "
                                   f"loads libnccl.so.2 (nccl-tests, Horovod, an MPI program) gets {default.path}. "
                                   "Measurements and jobs outside torch then run another NCCL than training does.",
                       fix=f"export LD_LIBRARY_PATH={_q(':'.join(filter(None, [directory, current])))}"
                           "   # the NCCL torch loads, for everything else too")
        else:
            others = sorted({lib.path for lib in libs.libraries if lib.version and lib.version != default.version})
            yield ok(f"torch and a plain dlopen both load NCCL {default.version}; "
                     f"{plural(len(others), 'other library', 'other libraries')} on disk, loaded by neither",
                     subject="nccl", evidence={**evidence, "others": others})
    elif len(versions) > 1:
        yield warn(f"{len(versions)} different NCCL versions can load on this node: {', '.join(versions)}",
                   subject="nccl", evidence=evidence,
                   explanation=f"{where}. A plain dlopen of libnccl.so.2 gets "
                               f"{default.version + ' (' + default.path + ')' if default else 'none'}"
                               + (f"; torch gets {torch_loads.version} ({torch_loads.path})" if torch_loads and
                                  tdist.installed else "")
                               + ". Ranks built or launched differently can end up on different versions.",
                   fix="pip list 2>/dev/null | grep -i nccl; echo \"$LD_LIBRARY_PATH\"   # keep one: uninstall the "
                       "stray nvidia-nccl-* package, or take the other directory out of LD_LIBRARY_PATH")
    good = [lib for lib in libs.libraries if lib.version]
    if good:
        chosen = torch_loads or good[0]
        yield ok(f"NCCL {chosen.version} at {chosen.path} ({', '.join(chosen.sources)})"
                 + (f"; {len(good)} NCCL libraries found" if len(good) > 1 else ""),
                 subject="nccl", evidence=evidence)


# --- torch.distributed ------------------------------------------------------------------------

@check("build.torch-distributed", title="torch.distributed has the backends this node needs",
       tags=("build", "torch", "nccl"), timeout=70)
def torch_distributed(ctx: Context):
    """Reads the backends torch was compiled with from the build flags the wheel records
    (Caffe2Targets.cmake), without importing torch. `distdoctor check --probe-torch` imports
    torch in a subprocess instead and also reports the NCCL version torch really loads."""
    tdist = ctx.facts.torch_distributed
    if not tdist.installed:
        yield skip("torch is not installed in this Python environment")
        return
    gpus = ctx.facts.driver_gpu_count
    evidence = {"torch": tdist.version, "backends": dict(tdist.backends), "source": tdist.source,
                "nccl_requirement": list(tdist.nccl_requirement) if tdist.nccl_requirement else None,
                "nccl_runtime": tdist.nccl_runtime, "nccl_paths": list(tdist.nccl_paths), "gpus": gpus}
    if not tdist.backends:
        yield warn(f"torch {tdist.version}: cannot tell which distributed backends are built ({tdist.error})",
                   subject="torch.distributed", evidence=evidence, fix="distdoctor check --only build --probe-torch")
        return
    built = [name for name in ("gloo", "nccl", "mpi", "ucc") if tdist.backends.get(name)]
    missing = [name for name in ("gloo", "nccl", "mpi", "ucc") if name in tdist.backends and not tdist.backends[name]]
    summary = (f"torch {tdist.version} backends: {', '.join(built) or 'none'}"
               + (f" (not built: {', '.join(missing)})" if missing else "") + f"; from {tdist.source}")
    if not built:
        yield fail(f"torch {tdist.version} is built without torch.distributed", subject="torch.distributed",
                   evidence=evidence, fix="pip install --force-reinstall torch   # an official Linux wheel")
        return
    if gpus and not tdist.backends.get("nccl"):
        yield fail(f"{summary}, on a node with {gpus} GPU(s)", subject="torch.distributed", evidence=evidence,
                   explanation="init_process_group('nccl') fails with \"Distributed package doesn't have NCCL built "
                               "in\"; gloo on GPU tensors is slow. This is a CPU-only torch.",
                   fix="pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128   "
                       "# pick the CUDA version the driver supports")
    else:
        yield ok(summary, subject="torch.distributed", evidence=evidence)
    if tdist.source == "probe" and tdist.nccl_runtime and tdist.nccl_requirement and tdist.nccl_requirement[1]:
        if _parse_version(tdist.nccl_runtime)[:3] != _parse_version(tdist.nccl_requirement[1])[:3]:
            yield warn(f"torch runs NCCL {tdist.nccl_runtime} but was built against "
                       f"{tdist.nccl_requirement[0]}=={tdist.nccl_requirement[1]}", subject="nccl",
                       evidence=evidence, fix=f"pip install {_q(f'{tdist.nccl_requirement[0]}=={tdist.nccl_requirement[1]}')}   "
                                              "# or take the stray libnccl out of LD_LIBRARY_PATH (build.nccl-libraries)")
    if tdist.error:
        yield warn(f"torch probe failed, fell back to build flags: {tdist.error}", subject="torch.distributed",
                   evidence=evidence)


# --- Horovod ----------------------------------------------------------------------------------

_FRAMEWORK_PACKAGES = {"PyTorch": ("torch",), "TensorFlow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu",
                                                              "tf-nightly"), "MXNet": ("mxnet", "mxnet-cu112")}
_EXTRAS = {"PyTorch": "pytorch", "TensorFlow": "tensorflow", "MXNet": "mxnet"}


@check("build.horovod", title="Horovod is built for this node's framework, controller and GPUs",
       tags=("build", "horovod", "nccl"), timeout=70)
def horovod(ctx: Context):
    """`horovodrun --check-build` lists what Horovod compiled in. pip builds Horovod from source
    and silently leaves out whatever it could not find at build time (NCCL, MPI, a framework):
    the job then fails at import or falls back to slow MPI/Gloo allreduce on GPUs."""
    hvd = ctx.facts.horovod
    if not hvd.installed:
        yield skip("Horovod is not installed (no horovodrun on PATH)")
        return
    if hvd.error:
        yield warn(f"cannot read Horovod's build: {hvd.error}", subject="horovod",
                   fix="horovodrun --check-build   # run it by hand; an import error there is the real problem")
        return
    build = hvd.build
    gpus = ctx.facts.driver_gpu_count
    evidence = {"version": build.version, "frameworks": dict(build.frameworks), "controllers": dict(build.controllers),
                "operations": dict(build.operations), "gpus": gpus}
    in_use = [fw for fw, pkgs in _FRAMEWORK_PACKAGES.items() if any(ctx.host.distribution(p) for p in pkgs)]
    extras = ",".join(_EXTRAS[fw] for fw in in_use) or "pytorch"
    env_flags = " ".join(f"HOROVOD_WITH_{fw.upper()}=1" for fw in in_use)
    reinstall = (f"{env_flags + ' ' if env_flags else ''}HOROVOD_GPU_OPERATIONS=NCCL "
                 f"pip install --no-cache-dir --force-reinstall 'horovod[{extras}]'")
    found_problem = False
    if not any(build.controllers.values()):
        found_problem = True
        yield fail(f"Horovod {build.version} has neither the MPI nor the Gloo controller", subject="controllers",
                   evidence=evidence, explanation="horovodrun cannot start any job.",
                   fix=f"HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 {reinstall}")
    for fw in in_use:
        if not build.frameworks.get(fw):
            found_problem = True
            yield fail(f"{fw} is installed but Horovod {build.version} was built without {fw} support",
                       subject=fw, evidence=evidence,
                       explanation=f"`import horovod.{_EXTRAS[fw] if fw != 'PyTorch' else 'torch'}` fails with "
                                   "'Horovod has not been built with ... support'.",
                       fix=f"HOROVOD_WITH_{fw.upper()}=1 {reinstall}")
    if gpus and not build.operations.get("NCCL"):
        found_problem = True
        yield warn(f"{gpus} GPU(s) here but Horovod {build.version} was built without NCCL operations",
                   subject="NCCL", evidence=evidence,
                   explanation="GPU allreduce falls back to MPI or Gloo through host memory: several times slower.",
                   fix=reinstall)
    if not found_problem:
        yield ok(f"Horovod {build.version}: frameworks {', '.join(build.built('frameworks')) or 'none'}; "
                 f"controllers {', '.join(build.built('controllers')) or 'none'}; "
                 f"operations {', '.join(build.built('operations')) or 'none'}", subject="horovod", evidence=evidence)


CHECKS = [mpi_implementation, mpi_cuda_aware, mpi4py_mpi, nccl_libraries, torch_distributed, horovod]
