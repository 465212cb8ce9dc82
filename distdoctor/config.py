"""Configuration from TOML files: /etc/distdoctor/config.toml, then the user's, then --config
(later files win key by key).

    [run]
    timeout = 60            # seconds for the whole run
    jobs = 8                # checks in parallel
    fail_on = "fail"        # or "warn"
    max_drained_share = 0.1 # health: no drain past this share of the partition drained by distdoctor
    disable = ["gpu.health"]

    [checks."gpu.inventory"]
    expected_count = 8      # any parameter the check declares
    timeout = 20            # this check's deadline
    enabled = true

    [expect]                # inventory facts this node must match (docs/inventory.md), NHC-style
    "gpu.count" = 8
    "nccl.version" = ">= 2.18"
    "limits.memlock" = "unlimited"

Syntax errors and values of the wrong type are fatal (ConfigError, the usage exit code);
unknown keys are collected as problems and reported as findings.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from distdoctor import limits

SYSTEM_FILE = "/etc/distdoctor/config.toml"
# A config file larger than this is refused, not read in part: a cut file can change a value
# (`timeout = 30` cut after the 3) and still parse.
MAX_BYTES = 4 * 1024 * 1024

RUN_KEYS: dict[str, type | tuple[type, ...]] = {
    "timeout": (int, float),
    "jobs": int,
    "fail_on": str,
    "disable": list,
    "max_drained_share": (int, float),  # health's circuit breaker
}
CHECK_KEYS = {"timeout": (int, float), "enabled": bool}


class ConfigError(Exception):
    """A config file that cannot be used: one line naming the file, the line and the key."""


@dataclass
class Config:
    run: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Where each check's section came from, to name the file in problems.
    check_sources: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # [expect]: inventory fact name -> wanted value or comparison (">= 2.18"); checked by
    # node.expectations and `distdoctor health`
    expect: dict[str, Any] = field(default_factory=dict)
    expect_sources: dict[str, str] = field(default_factory=dict)

    def params_for(self, check_id: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
        params = dict(defaults)
        for key, value in self.checks.get(check_id, {}).items():
            if key not in CHECK_KEYS:
                params[key] = value
        return params

    def enabled(self, check_id: str) -> bool:
        if check_id in self.run.get("disable", []):
            return False
        return bool(self.checks.get(check_id, {}).get("enabled", True))

    def timeout_for(self, check_id: str, default: float) -> float:
        return float(self.checks.get(check_id, {}).get("timeout", default))

    def validate_against(self, checks: Mapping[str, Any]) -> None:
        """Record sections for checks that do not exist and parameters a check does not take."""
        for check_id, values in self.checks.items():
            source = self.check_sources.get(check_id, "config")
            info = checks.get(check_id)
            if info is None:
                self.problems.append(f"{source}: [checks.\"{check_id}\"] names no known check")
                continue
            for key, value in values.items():
                if key in CHECK_KEYS:
                    continue
                if key not in info.params:
                    known = ", ".join(sorted(info.params)) or "none"
                    self.problems.append(f"{source}: unknown parameter {key!r} for {check_id} (it takes: {known})")
                    continue
                default = info.params[key]
                if default is not None and not _same_kind(default, value):
                    raise ConfigError(f"{source}: checks.\"{check_id}\".{key} must be "
                                      f"{_type_name(type(default))}, not {value!r}")
        for check_id in self.run.get("disable", []):
            if check_id not in checks:
                self.problems.append(f"run.disable names no known check: {check_id!r}")


def _same_kind(default: Any, value: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def toml_value(value: Any) -> str:
    """A parameter's value as it is written in the config file (`true`, `"auto"`, `[]`), so
    that what `explain` and the reference show can be pasted under [checks."<id>"]."""
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string uses JSON's escapes
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    return json.dumps(str(value))


def default_files(env: Mapping[str, str], home: str) -> list[str]:
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return [SYSTEM_FILE, os.path.join(xdg, "distdoctor", "config.toml")]


_KEY = re.compile(r'^[ \t]*(?:"([^"\n]*)"|([^\s="]+))[ \t]*=', re.M)


@functools.lru_cache(maxsize=8)
def _key_lines(text: str) -> dict[str, int]:
    """Each key's first line, found in one pass: looking each key up by scanning the file made
    loading quadratic in its keys (20,000 keys took 100 s)."""
    lines: dict[str, int] = {}
    line, at = 1, 0
    for match in _KEY.finditer(text):
        line += text.count("\n", at, match.start())
        at = match.start()
        lines.setdefault(match.group(1) if match.group(1) is not None else match.group(2), line)
    return lines


def _line_of(text: str, key: str) -> int | None:
    return _key_lines(text).get(key)


def _type_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", bool: "true or false",
             dict: "a table", tuple: "a list"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _check_type(path: str, text: str, where: str, key: str, value: Any, kind) -> None:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
    if not ok:
        line = _line_of(text, key)
        at = f":{line}" if line else ""
        raise ConfigError(f"{path}{at}: {where}{key} must be {_type_name(kind)}, not {value!r}")


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:  # a loop, not recursion: tables may nest as deep as tomllib allowed
        item = stack.pop()
        if limits.non_finite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _check_range(path: str, text: str, where: str, key: str, value: Any) -> None:
    """TOML has nan and inf; no setting means either. Whatever a key is, a non-finite number in
    it (or anywhere inside it) is refused, and so is any `timeout`-like key that is not a positive
    number of seconds, and `jobs` out of 1..MAX_JOBS."""
    line = _line_of(text, key)
    at = f":{line}" if line else ""
    if _has_non_finite(value):
        raise ConfigError(f"{path}{at}: {where}{key} must be a finite number, not {value!r}")
    try:
        if key == "timeout" or key.endswith("_timeout"):
            if isinstance(value, (int, float)):
                limits.seconds(value, f"{where}{key}")
        elif key == "jobs" and where == "run.":
            limits.count(value, f"{where}{key}", 1, limits.MAX_JOBS)
        elif key == "max_drained_share" and where == "run." and not 0 <= value <= 1:
            raise limits.RangeError(f"{where}{key} must be between 0 and 1, not {value!r}")
    except limits.RangeError as exc:
        raise ConfigError(f"{path}{at}: {exc}") from None


def load_file(config: Config, path: str, text: str) -> None:
    # Imported here: most runs have no config file, and the parser costs check ~7 ms to import.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, and int() refusing an integer of 5,000 digits
        raise ConfigError(f"{path}: invalid TOML: {str(exc)[:200]}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    config.files.append(path)
    for section, body in data.items():
        if section == "run":
            if not isinstance(body, dict):
                raise ConfigError(f"{path}:{_line_of(text, 'run') or '?'}: 'run' must be a table")
            for key, value in body.items():
                if key not in RUN_KEYS:
                    line = _line_of(text, key)
                    config.problems.append(f"{path}:{line or '?'}: unknown key run.{key}")
                    continue
                _check_type(path, text, "run.", key, value, RUN_KEYS[key])
                _check_range(path, text, "run.", key, value)
                if key == "fail_on" and value not in ("warn", "fail"):
                    raise ConfigError(f"{path}:{_line_of(text, key) or '?'}: run.fail_on must be \"warn\" or \"fail\", "
                                      f"not {value!r}")
                if key == "disable":
                    if not all(isinstance(v, str) for v in value):
                        raise ConfigError(f"{path}:{_line_of(text, key) or '?'}: run.disable must be a list of check ids")
                config.run[key] = value
        elif section == "checks":
            if not isinstance(body, dict):
                raise ConfigError(f"{path}: 'checks' must be a table of [checks.\"<id>\"] sections")
            for check_id, values in body.items():
                if not isinstance(values, dict):
                    raise ConfigError(f"{path}:{_line_of(text, check_id) or '?'}: checks.{check_id} must be a table")
                for key, value in values.items():
                    if key in CHECK_KEYS:
                        _check_type(path, text, f"checks.\"{check_id}\".", key, value, CHECK_KEYS[key])
                    _check_range(path, text, f"checks.\"{check_id}\".", key, value)
                config.checks.setdefault(check_id, {}).update(values)
                config.check_sources[check_id] = path
        elif section == "expect":
            if not isinstance(body, dict):
                raise ConfigError(f"{path}:{_line_of(text, 'expect') or '?'}: 'expect' must be a table")
            for key, value in body.items():
                if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list))
                                                                                for v in value)):
                    raise ConfigError(f"{path}:{_line_of(text, key) or '?'}: expect.\"{key}\" must be a value "
                                      f"or a comparison such as \">= 2.18\", not {value!r:.80}")
                try:
                    limits.expected_value(value, f'expect."{key}"')
                except limits.RangeError as exc:
                    raise ConfigError(f"{path}:{_line_of(text, key) or '?'}: {exc}") from None
                config.expect[key] = value
                config.expect_sources[key] = f"{path}:{_line_of(text, key) or '?'}"
        else:
            line = _line_of(text, section) or next(
                (n for n, l in enumerate(text.splitlines(), 1) if l.strip().startswith(f"[{section}")), None)
            config.problems.append(f"{path}:{line or '?'}: unknown section [{section}]")


def load(paths: Iterable[tuple[str, str | None]]) -> Config:
    """Load (path, text) pairs in order; text None means the file is absent (skipped)."""
    config = Config()
    for path, text in paths:
        if text is not None:
            load_file(config, path, text)
    return config
