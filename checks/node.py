"""The node against the site's expectations: the `[expect]` table of the config file, keyed by
inventory fact names (docs/inventory.md), as LBNL NHC's config pins a node's hardware and
software. `distdoctor inventory --snapshot` writes such a table from a known-good node."""

from __future__ import annotations

import re
import shlex
from typing import Any

from distdoctor import fixes, inventory, remote
from distdoctor.text import one_line
from distdoctor.api import Context, check, fail, ok, skip, warn

# Fixes for facts whose remedy is known; {node} is this node. Other facts get the generic
# "make it X on node" comment: a version pin is a site decision distdoctor cannot guess.
FIXES: dict[str, str] = {
    "gpu.count": "nvidia-smi -L   # on {node}: a GPU missing from the list fell off the bus; drain the node and "
                 "reseat or replace it (nvidia-smi -q | grep -i -A3 'retired\\|xid')",
    "gpu.driver": "# on {node}: install NVIDIA driver {reference} (the same package as the other nodes), then reboot",
    "nccl.version": "pip install {nccl_requirement}   # on {node}, in the job's environment",
    "torch.version": "pip install {torch_requirement}   # on {node}, in the job's environment",
    "kernel": "# on {node}: boot kernel {reference} (the same as the other nodes)",
}
# Facts whose fix is a named remedy (distdoctor/fixes.py), for this node and the expected value.
# A node judged by its expectations is a Slurm node (health runs there): slurmd's limit.
REMEDIES = {
    "limits.memlock": lambda node, reference: fixes.memlock(slurm=True, here=node),
    "shm.size": lambda node, reference: fixes.shm_size(reference, here=node),
}


def _bare(wanted: Any) -> str:
    """The value of an expectation without its operator: '>= 1073741824' -> '1073741824'."""
    return re.sub(r"^\s*(>=|<=|==|!=|>|<)\s*", "", str(wanted))


def _pip_spec(wanted: Any) -> str:
    text = str(wanted).strip()
    return text.replace(" ", "") if text[:1] in "<>=!" else f"=={text}"


def family(key: str) -> str:
    """The part of the inventory a fact belongs to, so that one cause is one finding: torch.* and
    pip.torch* are "torch", gpu.* is "gpu", pip.nvidia_nccl_cu12 is "nvidia"."""
    if key.startswith("pip."):
        return re.split(r"[_.-]", key[4:], maxsplit=1)[0]
    return key.split(".", 1)[0]


def _finding(compare, diff, facts, node, sources, incomplete):
    key = diff.key
    finding = compare.to_finding(diff, noun="node")
    value = facts.get(key, compare.ABSENT)
    template = FIXES.get(key)
    # The node's name and the expected value (the config file's) go into comments as one line
    # and into commands as one shell word each: a newline or a quote in them runs nothing.
    spec = _pip_spec(diff.reference)
    fix: object = template.format(node=one_line(str(node)), reference=one_line(_bare(diff.reference)),
                                  nccl_requirement=shlex.quote(f"nvidia-nccl-cu12{spec}"),
                                  torch_requirement=shlex.quote(f"torch{spec}")) if template else finding.fix
    if key in REMEDIES:
        fix = REMEDIES[key](node, _bare(diff.reference))
    absent = key not in facts
    why = (f"this node's inventory has no {key}" + (" (its collection did not finish: "
           f"{', '.join(incomplete)})" if incomplete else "")) if absent else ""
    return fail(f"{key} = {compare.show(value) if not absent else '(absent)'}, expected "
                f"{compare.show(diff.reference)}", subject=key,
                evidence={**finding.evidence, "value": facts.get(key), "source": sources.get(key, "")},
                explanation=why or f"Set in {sources.get(key, 'the config file')}.", fix=fix)


@check("node.expectations", title="This node matches the [expect] table of the config file",
       tags=("node", "expect", "health"), timeout=30)
def expectations(ctx: Context):
    """Compares this node's inventory with the config file's `[expect]` table: each key an
    inventory fact name, each value what it must be (`8`, `"550.127.05"`, `"unlimited"`) or a
    comparison (`">= 2.18"`; dotted versions compare part by part). Every fact that does not
    match is a FAIL naming it, its value and the expected one, with a fix where one is known.
    A name that is not an inventory fact is a WARN (a typo must not pass silently)."""
    config = ctx.facts.config
    expect: dict[str, Any] = dict(getattr(config, "expect", None) or {})
    if not expect:
        yield skip("no [expect] table in the config file",
                   fix="distdoctor inventory --snapshot >> ~/.config/distdoctor/config.toml   "
                       "# on a known-good node; edit, then copy to /etc/distdoctor/config.toml on every node")
        return
    from distdoctor.crosscheck import engine as compare  # only with an [expect] table: most runs have none

    sources = getattr(config, "expect_sources", {}) or {}
    unknown = [k for k in expect if inventory.field_for(k) is None]
    for key in unknown:
        yield warn(f"[expect] names {key!r}, which is not an inventory fact", subject=key,
                   evidence={"source": sources.get(key, "")},
                   explanation="Names are listed in docs/inventory.md and by `distdoctor inventory`.",
                   fix=remote.comment(f"fix or remove {key!r} in "
                                      f"{sources.get(key, 'the config file').rsplit(':', 1)[0]}"))
    # `health` judges a node by its Slurm name (--node, SLURMD_NODENAME): the fixes are for that node.
    node = ctx.facts.options.get("node") or ctx.facts.hostname
    facts = ctx.facts.inventory
    wanted = {k: v for k, v in expect.items() if k not in unknown}
    incomplete = facts.get("inventory.incomplete") or []
    diffs = compare.compare({node: facts}, rules=(), expect=wanted)
    failed = set()
    groups: dict[str, list] = {}
    for diff in diffs:
        failed.add(diff.key)
        groups.setdefault(family(diff.key), []).append(diff)
    for name, members in groups.items():
        findings = [_finding(compare, diff, facts, node, sources, incomplete) for diff in members]
        if len(findings) == 1:
            yield findings[0]
            continue
        # One cause, one finding: a missing or different torch is torch.version, torch.build,
        # pip.torch ... all at once; the first fact with a known fix leads.
        lead = next((f for d, f in zip(members, findings) if d.key in FIXES or d.key in REMEDIES), findings[0])
        absent = [d.key for d in members if d.key not in facts]
        what = (f"{name}: {len(absent)} expected facts absent" if len(absent) == len(members)
                else f"{name}: {len(members)} expected facts differ")
        yield fail(f"{what} ({lead.summary}" + (f"; and {len(members) - 1} more)" if len(members) > 1 else ")"),
                   subject=name, evidence={"facts": {f.subject: f.evidence for f in findings}},
                   explanation=lead.explanation + " The other facts of the same family: "
                               + ", ".join(f.summary for f in findings if f is not lead) + ".",
                   fix=lead.remedy or lead.fix)
    matched = [k for k in wanted if k not in failed]
    if matched and not failed:
        yield ok(f"all {len(matched)} expected facts match", evidence={k: facts.get(k) for k in matched})
    elif matched:
        yield ok(f"{len(matched)} other expected facts match", evidence={k: facts.get(k) for k in matched})


CHECKS = [expectations]

