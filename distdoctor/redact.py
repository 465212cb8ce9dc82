"""Secret-looking environment values never leave the machine in a report."""

from __future__ import annotations

import re
from typing import Any

_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET.search(name))


MAX_DEPTH = 32  # evidence nested deeper (or a structure that contains itself) is cut here
TOO_DEEP = "<nested too deeply>"


def redact(value: Any, _depth: int = 0) -> Any:
    """A JSON-safe copy of value with secret-looking entries replaced: dict keys such as
    HF_TOKEN, and 'NAME=value' strings whose NAME looks secret."""
    if isinstance(value, (dict, list, tuple)) and _depth >= MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {str(k): (REDACTED if is_secret_name(str(k)) and v not in (None, "") else redact(v, _depth + 1))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, _depth + 1) for v in value]
    if isinstance(value, str):
        match = _ASSIGNMENT.match(value)
        if match and is_secret_name(match.group(1)):
            return f"{match.group(1)}={REDACTED}"
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    try:
        return str(value)
    except RecursionError:  # a set or object whose text nests without end
        return TOO_DEEP


_INLINE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S+)")
_URL_PASSWORD = re.compile(r"(?<!\w)(\w+://[^\s:/@]+:)[^\s@/]+@")


def redact_text(text: str) -> str:
    """A line of free text (a log line) with secret-looking NAME=value pairs and passwords in
    URLs replaced."""
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    if "=" not in text:
        return text
    return _INLINE.sub(lambda m: f"{m.group(1)}={REDACTED}" if is_secret_name(m.group(1)) else m.group(0), text)
