"""torch/version.py, the file torch's build writes: `__version__`, `cuda`, `hip`, `rocm`, ...

Read as text and parsed with `ast` (never executed, never imported): `distdoctor check` must
not import torch, which takes seconds and may initialise CUDA.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from distdoctor.parsers import ParseError

TOOL = "torch/version.py"


@dataclass(frozen=True)
class TorchVersionFile:
    version: str
    cuda: str | None  # '12.4'; None in CPU-only and ROCm builds
    hip: str | None
    rocm: str | None
    git_version: str | None
    debug: bool | None = None  # torch.version.debug: a debug build (collect_env's 'Is debug build')


def parse_version_py(text: str) -> TorchVersionFile:
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise ParseError(TOOL, f"not valid Python: {exc.msg}", exc.lineno, "") from None
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    version = values.get("__version__")
    if not isinstance(version, str):
        raise ParseError(TOOL, "no __version__ = '...' assignment")

    def text_or_none(name: str) -> str | None:
        value = values.get(name)
        return value if isinstance(value, str) and value else None

    return TorchVersionFile(version, text_or_none("cuda"), text_or_none("hip"), text_or_none("rocm"),
                            text_or_none("git_version"),
                            values["debug"] if isinstance(values.get("debug"), bool) else None)
