"""/etc/os-release (os-release(5)): shell-style KEY=value lines, values optionally quoted."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OsRelease:
    name: str | None        # NAME: "Ubuntu", "Debian GNU/Linux"
    version_id: str | None  # VERSION_ID: "22.04", "12"
    pretty_name: str | None  # PRETTY_NAME: as the distribution names itself


def parse_os_release(text: str) -> OsRelease:
    """Lines that are not assignments (comments, blanks) are skipped: the file is read by
    shells, which ignore them too; a missing key is None."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            values[key.strip()] = value.strip().strip('"').strip("'")
    return OsRelease(values.get("NAME"), values.get("VERSION_ID"), values.get("PRETTY_NAME"))
