"""DCGM's verdicts judged the way distdoctor judges its own: each failed `dcgmi diag` test and each
`dcgmi health -c` incident becomes one finding with an action (dcgm.toml, next to this module).
The live check (gpu.dcgm-health) and a paste in `log` call the same functions, so a paste and the
node give the same findings and actions.
"""

from __future__ import annotations

import functools
import os
import re

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from distdoctor.api import fail, ok, warn
from distdoctor.hardware.actions import is_action, strongest
from distdoctor.model import Finding
from distdoctor.parsers.dcgmi import DcgmDiag, DcgmHealth, DiagTest
from distdoctor.text import plural

PATH = os.path.join(os.path.dirname(__file__), "dcgm.toml")
SOURCE = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/feature-overview.html"


@functools.lru_cache(maxsize=1)
def rules() -> dict:
    with open(PATH, "rb") as fh:
        data = tomllib.load(fh)
    compiled = []
    for row in data.get("message", []):
        if not is_action(row["action"]):
            raise ValueError(f"dcgm.toml: unknown action {row['action']!r}")
        compiled.append((re.compile(row["match"], re.I), row["action"], row.get("why", ""), row.get("fix", ""),
                         row.get("relayed", "")))
    for table in (data["diag"]["category"], data["health"]["system"]):
        for key, action in table.items():
            if not is_action(action):
                raise ValueError(f"dcgm.toml: {key!r} has an unknown action {action!r}")
    # DCGM 4's health tree says "NVLINK system" where DCGM 3's table says "NVLink system"
    system = {k.lower(): v for k, v in data["health"]["system"].items()}
    return {"message": compiled, "category": data["diag"]["category"], "system": system}


def _by_message(texts) -> tuple[str, str, str, str, re.Pattern[str]] | None:
    """(action, why, fix, relayed, pattern) of the first message rule any text matches."""
    for pattern, action, why, fix, relayed in rules()["message"]:
        for text in texts:
            if pattern.search(text[:4096]):
                return action, why, fix, relayed, pattern
    return None


def _relayed(rule, texts):
    """(the check that judges this fault first-hand, the rule to apply): the check where every text
    is of a relayed rule; else the rule the other texts give (a relayed rule never sets the action of
    a failure that has more to it)."""
    if rule is None or not rule[3]:
        return "", rule
    rest = [t for t in texts if not rule[4].search(t[:4096])]
    return ("", _by_message(rest)) if rest else (rule[3], rule)


def _system_action(system: str) -> str:
    table = rules()["system"]
    return table.get(system.lower(), table[""])


def _gpus(gpus) -> str:
    named = sorted(g for g in gpus if g is not None)
    if None in gpus or not named:
        return "all GPUs"
    return ("GPU" if len(named) == 1 else "GPUs ") + ",".join(map(str, named))


def _subject(gpus) -> str:
    named = sorted(g for g in gpus if g is not None)
    return "GPUs" if None in gpus or not named else ",".join(f"GPU{g}" for g in named)


def _fix(action: str, gpus, given: str) -> str:
    if given:
        return given
    one = [g for g in gpus if g is not None]
    index = str(one[0]) if len(one) == 1 else "INDEX"
    return {"reset-gpu": f"nvidia-smi -r -i {index}   # with no process on the GPU; then: dcgmi diag -r 2",
            "reboot": "# drain the node, then reboot it; then: dcgmi diag -r 2",
            "replace-hardware": f"dcgmi diag -r 3 -i {index}   # confirm with the node drained; then open a hardware "
                                "case with nvidia-bug-report.sh",
            "fix-config": "dcgmi diag -r 1   # after fixing what DCGM names above",
            }.get(action, "# informational; nothing to do")


def _diag_test(test: DiagTest, where: str) -> Finding | None:
    texts = [m.text for m in test.messages]
    gpus = test.failed_gpus() if test.status == "fail" else tuple(g for g, _ in test.results)
    if test.status == "fail" and not gpus:
        gpus = tuple(m.gpu for m in test.messages if m.gpu is not None) or (None,)
    named = test.name or f"{test.category or 'a'} check"
    rule = _by_message(texts)
    message = next((m.text for m in test.messages if m.level in ("error", "warning")), "")
    evidence = {"category": test.category, "test": test.name, "status": test.status,
                "results": [[g, s] for g, s in test.results][:64],
                "messages": [[m.level, m.gpu, m.text[:400]] for m in test.messages][:16], "source": SOURCE}
    said = f": {message[:200]}" if message else ""
    relayed, rule = _relayed(rule, [m.text for m in test.messages if m.level in ("error", "warning")])
    if test.status == "fail" and relayed:
        return warn(f"dcgmi diag: {named} failed on {_gpus(gpus)}{said}", subject=_subject(gpus), action="none",
                    evidence={**evidence, "judged_by": relayed}, explanation=rule[1] + ".",
                    fix=rule[2] or f"distdoctor check --only {relayed}")
    if test.status == "fail":
        action = rule[0] if rule else rules()["category"].get(test.category, rules()["category"][""])
        why = rule[1] if rule else (f"DCGM's {test.category or 'diagnostic'} test failed: "
                                    + ("a software or configuration check" if test.category == "Deployment"
                                       else "the GPU could not do what the test asks of it"))
        return fail(f"dcgmi diag: {named} failed on {_gpus(gpus)}{said}", subject=_subject(gpus),
                    action=action, evidence=evidence, explanation=why + f" (pasted at {where})" if where else why,
                    fix=_fix(action, gpus, rule[2] if rule else ""))
    if test.status in ("warn", "unknown"):
        what = "warned" if test.status == "warn" else "gave a result distdoctor does not know"
        return warn(f"dcgmi diag: {named} {what} on {_gpus(gpus)}{said}", subject=_subject(gpus),
                    action="none", evidence=evidence,
                    explanation="A warning (or an unknown result) is not a failure: the node is not drained for it.",
                    fix="dcgmi diag -r 2   # rerun; a recurring warning on one GPU is worth a hardware look")
    return None


def judge_diag(diag: DcgmDiag, where: str = "") -> list[Finding]:
    """One finding per failed (or warned) test, else one OK naming what passed."""
    out = [f for t in diag.tests if (f := _diag_test(t, where)) is not None]
    if out:
        return out
    ran = [t for t in diag.tests if t.status == "pass"]
    skipped = [t for t in diag.tests if t.status == "skip"]
    return [ok(f"dcgmi diag{' ' + diag.version if diag.version else ''}: {plural(len(ran), 'test')} passed"
               + (f", {len(skipped)} skipped" if skipped else ""),
               evidence={"passed": [t.name for t in ran], "skipped": [t.name for t in skipped]})]


def judge_health(health: DcgmHealth) -> list[Finding]:
    """One finding per incident: Failure → FAIL with its action, Warning → WARN (never drains)."""
    if not health.watches_enabled:
        return []
    out = []
    for inc in health.incidents:
        rule = _by_message([inc.message])
        system_action = _system_action(inc.system)
        action = rule[0] if rule else system_action
        relayed, rule = _relayed(rule, [inc.message])
        who = inc.entity or "the node"
        evidence = {"entity": inc.entity, "gpu": inc.gpu, "system": inc.system, "severity": inc.severity,
                    "message": inc.message[:400], "source": SOURCE}
        summary = f"dcgmi health: {who}: {inc.system} {'failure' if inc.severity == 'fail' else 'warning'}: " \
                  f"{inc.message[:200]}"
        gpus = (inc.gpu,)
        why = (rule[1] if rule else f"DCGM's {inc.system} health watch reported it") + "."
        if inc.severity == "fail" and relayed and rule is not None:
            out.append(warn(summary, subject=who.replace(" ", ""), action="none",
                            evidence={**evidence, "judged_by": relayed, "action_if_failure": system_action},
                            explanation=why, fix=rule[2] or f"distdoctor check --only {relayed}"))
        elif inc.severity == "fail":
            out.append(fail(summary, subject=who.replace(" ", ""), action=action, evidence=evidence,
                            explanation=why, fix=_fix(action, gpus, rule[2] if rule else "")))
        else:
            out.append(warn(summary, subject=who.replace(" ", ""), action=action if rule else "none",
                            evidence={**evidence, "action_if_failure": system_action},
                            explanation=why.rstrip(".") + "; a warning does not take the node out of service.",
                            fix=_fix(action, gpus, rule[2] if rule else "") if rule else
                            "dcgmi health -c   # again later; a warning that stays or turns to Failure needs action"))
    if not out and health.overall in ("warn", "fail"):
        out.append(warn(f"dcgmi health: overall {health.overall}, but no incident could be read from the report",
                        action="none", fix="dcgmi health -c -j"))
    elif not out:
        out.append(ok(f"dcgmi health: overall {health.overall}"))
    return out


def strongest_action(findings) -> str:
    return strongest(f.action for f in findings)
