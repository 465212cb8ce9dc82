"""What to do about a finding, as data every renderer and `health` read the same way.

After leptonai/gpud's typed remediation (pkg/common/action.go): one word per finding, ordered from
weakest to strongest so that several findings about one node reduce to the strongest. Only the
last three take the node out of service, which is what `health` drains for.
"""

from __future__ import annotations

# weakest first
ACTIONS = ("none", "fix-config", "restart-app", "app-error", "reset-gpu", "reboot", "replace-hardware")

DESCRIPTIONS = {
    "none": "nothing to do",
    "fix-config": "fix the configuration",
    "restart-app": "restart the application",
    "app-error": "the application's own error: fix the program, not the node",
    "reset-gpu": "reset the GPU (no jobs on it)",
    "reboot": "reboot the node",
    "replace-hardware": "inspect or replace the hardware",
}

# Actions that need the node out of service while they are carried out.
OUT_OF_SERVICE = frozenset({"reset-gpu", "reboot", "replace-hardware"})


def is_action(word: str) -> bool:
    return word in ACTIONS


def strength(word: str) -> int:
    return ACTIONS.index(word) if word in ACTIONS else -1


def strongest(words) -> str:
    """The strongest of the actions given ('' when none is)."""
    best = ""
    for word in words:
        if word and strength(word) > strength(best):
            best = word
    return best


def needs_drain(word: str) -> bool:
    return word in OUT_OF_SERVICE
