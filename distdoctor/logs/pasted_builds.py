"""Builds judged from a paste: torch's collect_env (gpu.cuda-compat over the torch build and the
driver it shows) and ompi_info (build.mpi-cuda-aware where the paste shows GPUs). pasted.py finds
the sections and calls in here."""

from __future__ import annotations

from distdoctor.logs import pasted_driver, pasted_tools
from distdoctor.model import CheckRun, Finding, Status


def _note(source: str, status: Status, message: str, evidence: dict | None = None) -> CheckRun:
    return CheckRun("log.pasted-output", "Tool output pasted into the log", ("log", "pasted"), status,
                    (Finding(status, message, subject=source, evidence=evidence or {}),), 0.0, "log")


def _run_checks(ids, host) -> list[CheckRun]:
    return pasted_tools.run_checks(ids, host)


def ompi_info_run(info, text: str, where: str, gpus: int) -> list[CheckRun]:
    """build.mpi-cuda-aware over a pasted ompi_info. Whether CUDA support matters depends on the
    node having GPUs: the check runs when some pasted section shows them (nvidia-smi, its topology,
    collect_env); otherwise a build without CUDA support is stated, not judged."""
    from distdoctor.testing import FakeHost

    label = f"Open MPI {info.version}" if info.version else "Open MPI"
    if not gpus and info.cuda_support is False:
        return [_note(where, Status.OK, f"pasted ompi_info at {where}: {label} is built without CUDA support (the "
                                        f"paste does not show whether the node has GPUs; on a GPU node "
                                        f"build.mpi-cuda-aware warns)", {"cuda_flags": dict(info.cuda_keys)})]
    host = FakeHost(commands={"ompi_info": text}, hostname="pasted",
                    dirs={"/proc/driver/nvidia/gpus": [f"0000:{k:02x}:00.0" for k in range(gpus)]} if gpus else None)
    return [CheckRun(r.id, f"{r.title} (pasted ompi_info at {where})", r.tags + ("pasted",), r.status, r.findings,
                     r.duration, f"pasted ompi_info at {where}" + (f"; {gpus} GPU(s) from the paste" if gpus else ""))
            for r in _run_checks(("build.mpi-cuda-aware",), host)]


def collect_env_run(env, where: str, smi=None) -> list[CheckRun]:
    """gpu.cuda-compat over the torch build and driver the paste shows. collect_env prints the
    driver version but not the CUDA it supports: that comes from a pasted nvidia-smi's header
    when there is one, else from NVIDIA's release-notes table (Linux drivers; a WSL2 paste
    shows the Windows driver's number, which the table does not cover, so no verdict there)."""
    from distdoctor.facts.gpu import cuda_for_driver
    from distdoctor.host import Distribution
    from distdoctor.testing import FakeHost

    # under the inventory's names (inventory.COLLECT_ENV maps collect_env's labels to them)
    facts = {k: v for k, v in (("torch.version", env.torch_version), ("torch.cuda", env.torch_cuda),
                                 ("gpu.driver", env.driver), ("gpu.count", len(env.gpus)),
                                 ("os.pretty", env.get("OS")), ("python.platform", env.get("Python platform"))) if v}
    available = (env.get("Is CUDA available") or "").strip()
    # collect_env lists GPUs only when nvidia-smi answered it; CUDA available with no list is "not shown"
    models = (env.get("GPU models and configuration") or "").strip()
    gpus = (f"{len(env.gpus)} GPU(s)" if env.gpus else
            f"GPU {models}" if models and models != "Could not collect" else
            "GPUs not listed (CUDA available)" if available == "True" else f"no GPU (CUDA available: {available or '?'})")
    summary = Finding(Status.OK, f"collect_env: torch {env.torch_version or '?'} (CUDA {env.torch_cuda or 'none'}), "
                                 f"driver {env.driver or 'unknown'}, {gpus}", evidence=facts)
    title = f"torch's collect_env (pasted at {where})"
    runs_ = [CheckRun("log.pasted-collect-env", title, ("log", "pasted"), Status.OK, (summary,), 0.0,
                      f"pasted collect_env at {where}")] + pasted_driver.collect_env_runs(env, where)
    wsl = any("microsoft" in (env.get(k) or "").lower() or "wsl" in (env.get(k) or "").lower()
              for k in ("OS", "Python platform", "Platform"))
    cuda = cuda_for_driver(env.driver) if env.driver and not wsl else None
    origin = "NVIDIA's release-notes table"
    driver = env.driver
    if smi is not None and smi.cuda_version:
        cuda, driver, origin = smi.cuda_version, smi.driver_version, "the pasted nvidia-smi header"
    if not env.torch_version or not cuda:
        return runs_
    major, _dot, minor = cuda.partition(".")
    site = "/pasted/site-packages"
    version_py = (f"__version__ = {env.torch_version!r}\ncuda = {env.torch_cuda!r}\n"
                  f"hip = {None if env.torch_cuda else env.torch_hip!r}\n")
    host = FakeHost(distributions={"torch": Distribution("torch", env.torch_version, site, ("torch/version.py",))},
                    files={f"{site}/torch/version.py": version_py}, hostname="pasted",
                    nvml={"status": "ok", "driver_version": driver,
                          "cuda_version": int(major) * 1000 + int(minor or 0) * 10})
    for r in _run_checks(("gpu.cuda-compat",), host):
        runs_.append(CheckRun(r.id, f"{r.title} (pasted collect_env at {where})", r.tags + ("pasted",), r.status,
                              r.findings, r.duration, f"pasted collect_env at {where}; the driver's CUDA {cuda} "
                              f"from {origin}"))
    return runs_
