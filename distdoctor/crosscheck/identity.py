"""What a shared hostname, boot id or machine id means across nodes, said once per cause.

NCCL's host hash is the hostname plus the boot id (or NCCL_HOSTID): two nodes that share both
are one host to NCCL. A boot id cannot be changed: the kernel draws it at each boot, so nodes
that share one run on one kernel (containers or namespaces on one machine) or are VMs resumed
from one memory snapshot. While their hostnames differ that is harmless to NCCL and is said as
such (an OK line naming the nodes); when the hostname is shared too, the hostname's finding
carries the whole cause, and the boot id's and host hash's findings for the same nodes, which
would repeat it, are folded into it. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from distdoctor import remote
from distdoctor.crosscheck import engine
from distdoctor.model import Finding
from distdoctor.remote import Fix
from distdoctor.text import fold

BOOT_ID_FIXED = ("a boot id cannot be changed: the kernel draws it at each boot. Nodes that share one run on one "
                 "kernel (containers or namespaces on one machine) or are VMs resumed from one memory snapshot "
                 "(rebooting one draws it a new id)")

_FOLDED_INTO_HOSTNAME = ("host.boot_id", "nccl.host_hash")


def _short(value: Any) -> str:
    text = str(value)
    return text[:8] + "…" if len(text) > 12 else text


def one_kernel(shared: Sequence[engine.Difference]) -> str:
    """The OK line for nodes that share a boot id but not a hostname ("" when none do)."""
    groups = [g for d in shared if d.key == "host.boot_id" for g in d.groups]
    if not groups:
        return ""
    said = "; ".join(f"{fold(g.members)} share one kernel (boot id {_short(g.value)})" for g in groups)
    return (f"{said}: containers or namespaces on one machine, or VMs resumed from one snapshot; their hostnames "
            "differ, so NCCL tells them apart")


def fold_into_hostname(diffs: list[engine.Difference], findings: list[Finding]
                       ) -> tuple[list[engine.Difference], list[Finding]]:
    """Drop the boot id and host hash differences whose nodes are exactly nodes that share a
    hostname (one cause: the hostname's finding says it, with the boot id's meaning and what to
    do about it); the rest is returned as it was."""
    named = next((i for i, d in enumerate(diffs) if d.key == "host.name" and d.basis == "duplicate"), None)
    if named is None:
        return diffs, findings
    hostname_groups = {frozenset(g.members) for g in diffs[named].groups}
    folded = [i for i, d in enumerate(diffs) if d.key in _FOLDED_INTO_HOSTNAME and d.basis == "duplicate"
              and all(frozenset(g.members) in hostname_groups for g in d.groups)]
    if not folded:
        return diffs, findings
    boot = next((diffs[i] for i in folded if diffs[i].key == "host.boot_id"), None)
    if boot is not None:
        # one kernel explains one /etc/machine-id too (namespaces, containers sharing the host's
        # /etc): not a cloned image, and no node's machine id to renew
        kernels = {frozenset(g.members) for g in boot.groups}
        folded += [i for i, d in enumerate(diffs) if d.key == "host.machine_id" and d.basis == "duplicate"
                   and all(frozenset(g.members) in kernels for g in d.groups)]
    base = findings[named]
    summary, explanation, remedy = base.summary, base.explanation, base.remedy
    if boot is not None:
        summary += " and " + "; ".join(f"one kernel (boot id {_short(g.value)})" for g in boot.groups)
        explanation = (f"{explanation}. NCCL's host hash is hostname + boot id, so NCCL takes them for one host and "
                       f"tries shared memory and P2P between them; {BOOT_ID_FIXED}. With their own hostnames NCCL "
                       "tells them apart")
        remedy = (*remedy, Fix(comment=BOOT_ID_FIXED + "; give each its own hostname (above), or export a distinct "
                                       "NCCL_HOSTID on each"))
    worst_status = max((findings[i].status for i in (named, *folded)), key=lambda s: s.severity)
    findings = list(findings)
    findings[named] = dataclasses.replace(base, status=worst_status, summary=summary, explanation=explanation,
                                          fix="", remedy=remedy,
                                          evidence={**base.evidence, "folded": [diffs[i].key for i in folded]})
    keep = [i for i in range(len(diffs)) if i not in folded]
    return [diffs[i] for i in keep], [findings[i] for i in keep]


def machine_id_fix(diff: engine.Difference) -> list[Fix]:
    """A cloned /etc/machine-id: a new one on every node of each group but the first, which keeps its own."""
    out = []
    for group in diff.groups:
        keep, change = group.members[0], group.members[1:]
        if change:
            out.append(Fix(("rm -f /etc/machine-id && systemd-machine-id-setup",), tuple(change),
                           f"a new machine id for each of them; {keep} keeps its own (a clone of one image)"))
    return out


def boot_id_fix(diff: engine.Difference) -> Fix:
    return Fix(comment=f"{remote.shown(diff.outliers)}: {BOOT_ID_FIXED}; give each its own hostname, or export a "
                       "distinct NCCL_HOSTID on each")
