"""The driver's GPU Recovery Action (recovery.toml, next to this module): word -> action."""

from __future__ import annotations

import functools
import os
import re

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from distdoctor.hardware.actions import is_action

PATH = os.path.join(os.path.dirname(__file__), "recovery.toml")
SOURCE = "NVIDIA GPU Memory Error Management (Recovery action flag); NVML nvmlDeviceGpuRecoveryAction_t"


@functools.lru_cache(maxsize=1)
def _table() -> tuple[dict[str, str], dict[int, str]]:
    with open(PATH, "rb") as fh:
        data = tomllib.load(fh)
    words = dict(data.get("word", {}))
    for word, action in words.items():
        if not is_action(action):
            raise ValueError(f"recovery.toml: {word} has an unknown action {action!r}")
    return words, {int(k): v for k, v in data.get("code", {}).items()}


def key(word: str) -> str:
    return re.sub(r"[^a-z0-9]", "", word.lower())


def action(word: str) -> str | None:
    """The action for a printed recovery action; None for a word recovery.toml does not know."""
    return _table()[0].get(key(word))


def word_for_code(code: int) -> str:
    """NVML's number as nvidia-smi prints it ("3" for a number not in the table)."""
    return _table()[1].get(code, str(code))
