"""Facts about the installed torch, read from its files without importing it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from distdoctor.facts import fact
from distdoctor.parsers import ParseError
from distdoctor.parsers.torch_version import parse_version_py


@dataclass(frozen=True)
class TorchInstall:
    """The one shared answer to "which torch, built for which CUDA". Field names are stable:
    other areas (build flags) read them."""

    installed: bool
    version: str | None = None  # '2.5.1+cu124', from torch/version.py (the distribution's if unreadable)
    cuda: str | None = None  # torch.version.cuda: '12.4'; None for CPU-only and ROCm builds
    hip: str | None = None  # torch.version.hip for ROCm builds
    location: str | None = None  # the torch package folder
    error: str = ""  # why the version file could not be read; '' when it was
    debug: bool | None = None  # torch.version.debug
    git_version: str | None = None

    @property
    def build(self) -> str:
        """'cuda', 'rocm', 'cpu' or 'unknown'."""
        if self.cuda:
            return "cuda"
        if self.hip:
            return "rocm"
        return "cpu" if self.installed and not self.error else "unknown"


@fact
def torch_distribution(facts) -> tuple[str, str, str] | None:
    """(version, site folder, METADATA text) of the installed torch, looked up once for the gpu
    and build areas; None when torch is not installed."""
    return facts.host.distribution_metadata("torch")


@fact
def torch_install(facts) -> TorchInstall:
    host = facts.host
    found = facts.torch_distribution
    if found is None:
        return TorchInstall(False)
    dist_version, site, _metadata = found
    package = os.path.join(site, "torch")
    path = os.path.join(package, "version.py")
    try:
        text = host.read_text(path)
    except OSError as exc:
        return TorchInstall(True, dist_version, location=package, error=f"{path}: {exc.strerror or exc}")
    if text is None:
        return TorchInstall(True, dist_version, location=package,
                            error=f"{path} is missing: the torch installation is incomplete or broken")
    try:
        parsed = parse_version_py(text)
    except ParseError as exc:
        return TorchInstall(True, dist_version, location=package, error=f"{path}: {exc}")
    return TorchInstall(True, parsed.version, parsed.cuda, parsed.hip, package, debug=parsed.debug,
                        git_version=parsed.git_version)
