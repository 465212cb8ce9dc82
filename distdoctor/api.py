"""Everything a check author imports.

    from distdoctor.api import check, Context, ok, warn, fail, skip

    @check("site.scratch-mounted", title="Scratch is mounted", tags=("site",), timeout=5)
    def scratch_mounted(ctx: Context):
        if ctx.host.exists("/scratch"):
            yield ok("/scratch is mounted")
        else:
            yield fail("/scratch is missing", fix="mount /scratch")
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence, Union

from distdoctor.model import CheckInfo, Finding, RunContext, Status, remedy_of
from distdoctor.remote import Fix

__all__ = ["check", "Context", "Finding", "Fix", "Status", "ok", "warn", "fail", "skip", "CheckInfo", "ProbeTimeout"]

# What a check may give as fix: its own text (printed as it is), a Fix record, or several.
FixLike = Union[str, Fix, Sequence[Union[str, Fix]]]

_ID = re.compile(r"^[a-z][a-z0-9]*\.[a-z0-9]+(-[a-z0-9]+)*$")


def check(id: str, *, title: str, tags: tuple[str, ...] = (), timeout: float = 10.0,
          params: Mapping[str, Any] | None = None) -> Callable[[Callable], CheckInfo]:
    """Turn a function of a Context into a CheckInfo record. Registers nothing: a pack lists
    its checks in CHECKS. `params` are the check's parameters with their defaults; a config
    file may override them under [checks."<id>"]."""
    if not _ID.match(id):
        raise ValueError(f"check id {id!r} must look like '<area>.<kebab-name>'")

    def wrap(func: Callable) -> CheckInfo:
        return CheckInfo(
            id=id, title=title, func=func, tags=tuple(tags), timeout=float(timeout),
            params=dict(params or {}), description=inspect.cleandoc(func.__doc__ or ""),
        )

    return wrap


@dataclass
class Context:
    """What a check sees: parsed facts, the environment, its parameters, and the host for
    active probes (connecting to a port) that are not facts."""

    facts: Any
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def run_context(self) -> RunContext:
        return self.facts.run_context

    @property
    def host(self):
        return self.facts.host

    @property
    def env(self) -> Mapping[str, str]:
        return self.facts.host.env


def _finding(status: Status, summary: str, subject: str = "", explanation: str = "",
             fix: FixLike = "", evidence: Mapping[str, Any] | None = None, action: str = "") -> Finding:
    text, records = remedy_of(fix)
    return Finding(status, summary, subject, explanation, text, dict(evidence or {}), action, remedy=records)


def ok(summary: str, **kw) -> Finding:
    return _finding(Status.OK, summary, **kw)


def warn(summary: str, **kw) -> Finding:
    return _finding(Status.WARN, summary, **kw)


def fail(summary: str, **kw) -> Finding:
    return _finding(Status.FAIL, summary, **kw)


def skip(summary: str, **kw) -> Finding:
    return _finding(Status.SKIP, summary, **kw)


class ProbeTimeout(Exception):
    """Raise from a check when something it depends on hung (a command killed at its timeout):
    the engine reports the check TIMEOUT with this summary, explanation and fix, before the
    check's own deadline. Only the engine assigns TIMEOUT; this is how a check asks for it."""

    def __init__(self, summary: str, *, subject: str = "", explanation: str = "", fix: FixLike = "",
                 evidence: Mapping[str, Any] | None = None):
        super().__init__(summary)
        text, records = remedy_of(fix)
        self.finding = Finding(Status.TIMEOUT, summary, subject, explanation, text, dict(evidence or {}), remedy=records)


CheckResult = Iterator[Finding]
