"""NCCL's configuration files (/etc/nccl.conf, ~/.nccl.conf, $NCCL_CONF_FILE): KEY=VALUE lines."""

from __future__ import annotations


def parse_nccl_conf(text: str) -> dict[str, str]:
    """Settings in file order. NCCL skips comment lines and lines without '='; so do we,
    rather than refusing a file NCCL itself accepts."""
    settings: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip()
        if key:
            settings[key] = value.strip()
    return settings
