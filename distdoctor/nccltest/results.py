"""What the collectives' results say: per check, the ranks that failed (grouped by what they
saw), the ranks that went quiet and where, and the bench sweep. Pure functions of what the
ranks published; rank 0 gathers, this judges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from distdoctor.api import fail, ok, warn
from distdoctor.model import Finding
from distdoctor.nccltest import bench as bench_mod
from distdoctor.nccltest import collectives, compare

# The check a phase reports under: a rank that goes quiet in a phase is named under its check.
PHASE_CHECK = {"start": "nccl-test.launch", "import torch": "nccl-test.launch", "launch": "nccl-test.launch",
               "compare": "nccl-test.cross-rank", "rendezvous": "nccl-test.rendezvous", "mesh": "nccl-test.mesh",
               "init": "nccl-test.init",
               "all-reduce": "nccl-test.all-reduce", "broadcast": "nccl-test.broadcast",
               "all-gather": "nccl-test.all-gather", "bench": "nccl-test.bench", "results": "nccl-test.init",
               "localise": "nccl-test.localise"}


def check_names(bench: bool) -> list[str]:
    return ["init"] + [n for n, _ in collectives.OPS] + (["bench"] if bench else [])


def silent_by_check(silent: Sequence[int], states: Mapping[int, tuple[str, str]],
                    names: Sequence[str]) -> dict[str, list[int]]:
    """Each silent rank under the check of the step it was in when it went quiet."""
    out: dict[str, list[int]] = {}
    for r in silent:
        check_id = PHASE_CHECK.get(states[r][0], "nccl-test.init")
        out.setdefault(check_id if check_id[len("nccl-test."):] in names else "nccl-test.init", []).append(r)
    return out


def explanation(name: str, silent: Sequence[int]) -> str:
    if name == "init":
        return ("the ranks met at the rendezvous but could not connect to each other: gloo/NCCL use other "
                "ports and the interface they bind to (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)")
    return "the collective failed or gave a wrong answer" + (" because a peer stopped responding" if silent else "")


def fix_for(name: str) -> str:
    if name == "init":
        return "NCCL_DEBUG=INFO distdoctor nccl-test -v   # shows the interface and the peer that fails"
    return "distdoctor nccl-test -v --bench   # repeat with every rank's log"


def judge(names: Sequence[str], results: Mapping[int, Mapping[str, Any]], silent: Sequence[int],
          states: Mapping[int, tuple[str, str]], notes: Sequence[Finding],
          backend: str) -> list[tuple[str, list[Finding], float]]:
    """(check id, findings, duration) for each collective that ran or was expected. A bench that
    ran everywhere without error is left to bench_finding."""
    silent_at = silent_by_check(silent, states, names)
    out = []
    for name in names:
        check_id = f"nccl-test.{name}"
        per_rank = {r: next((op for op in res["ops"] if op["name"] == name), None) for r, res in results.items()}
        findings = list(notes) if name == "init" else []
        failed = {r: op for r, op in per_rank.items() if op is not None and not op["ok"]}
        ran = {r: op for r, op in per_rank.items() if op is not None}
        for detail, ranks in _group_details(failed).items():
            findings.append(fail(f"rank{'s' if len(ranks) > 1 else ''} {compare.rank_ranges(ranks)}: {detail}",
                                 subject=compare.rank_ranges(ranks), explanation=explanation(name, silent),
                                 fix=fix_for(name)))
        quiet = silent_at.get(check_id, [])
        if quiet:
            findings.append(fail(f"no result from rank{'s' if len(quiet) > 1 else ''} "
                                 f"{compare.rank_ranges(quiet)}: " + "; ".join(states[r][1] for r in quiet),
                                 subject=compare.rank_ranges(quiet),
                                 explanation="a rank that stops responding in the middle of a job hangs every "
                                 "collective of the others until their timeout"))
        if not ran and not quiet:
            continue
        if name == "bench" and not findings:
            continue
        if not findings:
            slowest = max(op["seconds"] for op in ran.values())
            detail = ran[0]["detail"] if 0 in ran else ""
            findings.append(ok(f"{backend}: {detail or 'ok on every rank'} (slowest rank {slowest * 1000:.1f} ms)"))
        out.append((check_id, findings, max((op["seconds"] for op in ran.values()), default=0.0)))
    return out


def bench_finding(rows: Sequence[Mapping[str, Any]],
                  results: Mapping[int, Mapping[str, Any]]) -> tuple[Finding, float] | None:
    """The sweep as rank 0 measured it, failed if any rank saw a wrong sum."""
    if not rows:
        return None
    wrong = sorted(r for r, res in results.items() for row in res.get("bench") or [] if row.get("ok") is False)
    evidence = {"table": bench_mod.bench_table(list(rows))}
    done = [r for r in rows if "skipped" not in r]
    if wrong:
        finding = fail(f"wrong all_reduce results on rank{'s' if len(set(wrong)) > 1 else ''} "
                       f"{compare.rank_ranges(wrong)}", evidence=evidence)
    elif not done:
        finding = warn("no size was measured before the deadline", evidence=evidence)
    elif len(results) <= 1:
        # busbw is algbw x 2(n-1)/n: zero for one rank, whose all_reduce moves nothing between ranks
        finding = ok(f"{len(done)} sizes, all correct; one rank, so no bandwidth between ranks to measure "
                     f"(largest {bench_mod.human_size(done[-1]['bytes'])} in {done[-1].get('time_us', 0):.1f} us)",
                     evidence=evidence)
    else:
        peak = max(done, key=lambda r: r["busbw_gbs"])
        finding = ok(f"{len(done)} sizes, all correct; peak busbw {peak['busbw_gbs']:.3f} GB/s at "
                     f"{bench_mod.human_size(peak['bytes'])}", evidence=evidence)
    return finding, sum(r.get("time_us", 0) for r in done) / 1e6


def _group_details(failed: Mapping[int, Mapping[str, Any]]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for rank, op in sorted(failed.items()):
        groups.setdefault(op["detail"], []).append(rank)
    return groups
