"""Secret-looking environment values never leave the machine in a report."""

from __future__ import annotations

import re
from typing import Any

_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET.search(name))


def redact(value: Any) -> Any:
    """A JSON-safe copy of value with secret-looking entries replaced: dict keys such as
    HF_TOKEN, and 'NAME=value' strings whose NAME looks secret."""
    if isinstance(value, dict):
        return {str(k): (REDACTED if is_secret_name(str(k)) and v not in (None, "") else redact(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        match = _ASSIGNMENT.match(value)
        if match and is_secret_name(match.group(1)):
            return f"{match.group(1)}={REDACTED}"
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)
