"""`python -m torch.utils.collect_env` (torch 1.4 to 2.x, and tools that print a superset):
the `Key: value` fields, the GPU list, and the pip/conda package lines. Tolerates pastes:
indentation, a warning line before the header, values cut short, versions that are not dotted
("2019 Update 2"), "Could not collect" and "N/A" (kept as None)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from distdoctor.parsers import ParseError

_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9 /_.()-]*?):\s?(?P<value>.*)$")
_PKG = re.compile(r"^\[(?P<mgr>pip3?|conda)\]\s+(?P<rest>.*)$")
_GPU = re.compile(r"^GPU \d+: ")
_UNKNOWN = {"could not collect", "n/a", "none", ""}


@dataclass(frozen=True)
class CollectEnv:
    fields: dict[str, str | None] = field(default_factory=dict)
    gpus: tuple[str, ...] = ()
    packages: tuple[tuple[str, str], ...] = ()  # (pip|conda, "name version ...")

    def get(self, key: str) -> str | None:
        return self.fields.get(key)

    @property
    def torch_version(self) -> str | None:
        return self.get("PyTorch version")

    @property
    def torch_cuda(self) -> str | None:
        return self.get("CUDA used to build PyTorch")

    @property
    def torch_hip(self) -> str | None:
        return self.get("ROCM used to build PyTorch") or self.get("HIP runtime version")

    @property
    def driver(self) -> str | None:
        return self.get("Nvidia driver version")


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text.lower() in _UNKNOWN else text


def parse_collect_env(text: str) -> CollectEnv:
    fields: dict[str, str | None] = {}
    gpus: list[str] = []
    packages: list[tuple[str, str]] = []
    in_gpus = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            in_gpus = False
            continue
        if (p := _PKG.match(line)):
            packages.append((p.group("mgr").rstrip("3"), p.group("rest").strip()))
            continue
        if in_gpus and _GPU.match(line):
            gpus.append(line)
            continue
        if (f := _FIELD.match(line)) and not _GPU.match(line):
            key = f.group("key").strip()
            value = _value(f.group("value"))
            fields.setdefault(key, value)
            if key == "GPU models and configuration":
                in_gpus = True
                if value and value.startswith("GPU "):
                    gpus.append(value)
            else:
                in_gpus = False
    if "PyTorch version" not in fields:
        raise ParseError("collect_env", "no 'PyTorch version:' line")
    return CollectEnv(fields, tuple(gpus), tuple(packages))
