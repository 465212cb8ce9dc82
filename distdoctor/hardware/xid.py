"""NVIDIA's Xid catalogue (xid.toml, next to this module): code -> meaning and action."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from distdoctor.hardware.actions import is_action

CATALOGUE_PATH = os.path.join(os.path.dirname(__file__), "xid.toml")
SOURCE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True)
class XidEntry:
    code: int
    mnemonic: str
    meaning: str
    action: str
    origin: str  # "hardware" or "application"
    nvidia_immediate: str = ""
    nvidia_investigatory: str = ""
    nonfatal_action: str = ""  # the action when the driver calls every occurrence "Nonfatal"
    judge_named_cause: bool = False  # judge the Xid its line names as the cause instead
    judge_recovery_target: bool = False  # the line names the recovery action the GPU needs now (Xid 154)
    state_action: str = ""  # the action the state this event leaves needs until a reset (a WARN, not a drain)

    @property
    def known(self) -> bool:
        return bool(self.mnemonic)


@functools.lru_cache(maxsize=1)
def catalogue() -> dict[int, XidEntry]:
    with open(CATALOGUE_PATH, "rb") as fh:
        data = tomllib.load(fh)
    out: dict[int, XidEntry] = {}
    for key, row in data.get("xid", {}).items():
        code = int(key)
        action = row["action"]
        if not is_action(action):
            raise ValueError(f"xid.toml: Xid {code} has an unknown action {action!r}")
        nonfatal = row.get("nonfatal_action", "")
        state = row.get("state_action", "")
        for field, value in (("nonfatal_action", nonfatal), ("state_action", state)):
            if value and not is_action(value):
                raise ValueError(f"xid.toml: Xid {code} has an unknown {field} {value!r}")
        out[code] = XidEntry(code, row["mnemonic"], row["meaning"], action, row.get("origin", "hardware"),
                             row.get("nvidia_immediate", ""), row.get("nvidia_investigatory", ""), nonfatal,
                             bool(row.get("judge_named_cause", False)), bool(row.get("judge_recovery_target", False)),
                             state)
    return out


@dataclass(frozen=True)
class DriverEvent:
    kind: str  # the kernel-log event kind ("init-failed")
    meaning: str
    action: str


@functools.lru_cache(maxsize=1)
def driver_events() -> dict[str, DriverEvent]:
    """Driver lines that are no Xid but judge a GPU the same way (xid.toml [driver_event.*])."""
    with open(CATALOGUE_PATH, "rb") as fh:
        data = tomllib.load(fh)
    out = {}
    for kind, row in data.get("driver_event", {}).items():
        if not is_action(row["action"]):
            raise ValueError(f"xid.toml: driver event {kind} has an unknown action {row['action']!r}")
        out[kind] = DriverEvent(kind, row["meaning"], row["action"])
    return out


def lookup(code: int) -> XidEntry:
    """The catalogue's entry, or an unknown one (a newer driver's code): reported, never drained
    for, since nothing says what it needs."""
    entry = catalogue().get(code)
    if entry is not None:
        return entry
    return XidEntry(code, "", "not in NVIDIA's Xid catalogue as distdoctor knows it", "none", "hardware")


SXID_PATH = os.path.join(os.path.dirname(__file__), "sxid.toml")
SXID_SOURCE = "NVIDIA Fabric Manager User Guide (DU-09883-001), appendix D"


@dataclass(frozen=True)
class SxidEntry:
    code: int
    name: str
    category: str  # "non-fatal", "fatal", "always-fatal"; "" when not catalogued
    action: str


@functools.lru_cache(maxsize=1)
def sxid_catalogue() -> dict[int, SxidEntry]:
    with open(SXID_PATH, "rb") as fh:
        data = tomllib.load(fh)
    out = {}
    for key, row in data.get("sxid", {}).items():
        if not is_action(row["action"]):
            raise ValueError(f"sxid.toml: SXid {key} has an unknown action {row['action']!r}")
        out[int(key)] = SxidEntry(int(key), row["name"], row["category"], row["action"])
    return out


def sxid_lookup(code: int, fatality: str = "") -> SxidEntry:
    """The catalogue's entry; else one judged by the line's own word (Fatal / Non-fatal)."""
    entry = sxid_catalogue().get(code)
    if entry is not None:
        return entry
    fatal = fatality.lower() == "fatal"
    return SxidEntry(code, "", "fatal" if fatal else "", "reboot" if fatal else "none")
