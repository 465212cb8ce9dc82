"""NCCL's effective settings: the environment over the user's conf file over /etc/nccl.conf."""

from __future__ import annotations

import os
from dataclasses import dataclass

from distdoctor.facts import fact
from distdoctor.parsers.nccl_conf import parse_nccl_conf


@dataclass(frozen=True)
class Setting:
    value: str
    source: str  # "environment" or the conf file's path


@dataclass(frozen=True)
class NcclSettings:
    values: dict[str, Setting]
    problems: tuple[str, ...] = ()  # conf files that exist but could not be read

    def get(self, name: str, default: str | None = None) -> str | None:
        setting = self.values.get(name)
        return setting.value if setting else default


@fact
def nccl_settings(facts) -> NcclSettings:
    # NCCL loads the user file ($NCCL_CONF_FILE, else ~/.nccl.conf) and then /etc/nccl.conf,
    # each with setenv(overwrite=0): the environment wins, then the user file, then /etc.
    host = facts.host
    env = host.env
    user_file = env.get("NCCL_CONF_FILE") or os.path.join(host.home(), ".nccl.conf")
    values: dict[str, Setting] = {}
    problems: list[str] = []
    for path in ("/etc/nccl.conf", user_file):
        try:
            text = host.read_text(path)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
            continue
        if text is None:
            if path == env.get("NCCL_CONF_FILE"):
                problems.append(f"{path}: NCCL_CONF_FILE names a file that does not exist")
            continue
        for key, value in parse_nccl_conf(text).items():
            values[key] = Setting(value, path)
    for key, value in env.items():
        if key.startswith("NCCL_"):
            values[key] = Setting(value, "environment")
    return NcclSettings(values, tuple(problems))
