"""What an mlx5 adapter's kernel line says and needs (mlx5.toml, next to this module)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from distdoctor.hardware.actions import is_action

PATH = os.path.join(os.path.dirname(__file__), "mlx5.toml")


@dataclass(frozen=True)
class Mlx5Rule:
    name: str
    match: str
    meaning: str
    action: str
    drain: bool


def _rule(name: str, row: dict, match: str = "") -> Mlx5Rule:
    if not is_action(row["action"]):
        raise ValueError(f"mlx5.toml: {name} has an unknown action {row['action']!r}")
    return Mlx5Rule(name, match, row["meaning"], row["action"], bool(row.get("drain", False)))


@functools.lru_cache(maxsize=1)
def _load() -> tuple[tuple[Mlx5Rule, ...], Mlx5Rule]:
    with open(PATH, "rb") as fh:
        data = tomllib.load(fh)
    rules = tuple(_rule(name, row, row["match"]) for name, row in data.get("rule", {}).items())
    return rules, _rule("pcie-width", data["pcie_width"])


def classify(message: str, width: str = "") -> Mlx5Rule | None:
    """The rule for one mlx5 kernel line (its parsed PCIe width shortfall, "x8<x16", if any), or
    None for the lines that say nothing about the adapter's health."""
    rules, pcie = _load()
    if width:
        return pcie
    for rule in rules:
        if rule.match in message:
            return rule
    return None
