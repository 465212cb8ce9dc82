"""NCCL RAS's two answers (ras.py) to findings: ranks missing from a communicator, the group of
ranks that is behind (not the smallest group, which RAS's text lists and which can be the
ranks that are ahead), and whether the counts moved between the two queries. Pure."""

from __future__ import annotations

from typing import Sequence

from distdoctor.model import CheckRun, Finding, Status
from distdoctor.text import plural, rank_ranges

TITLE = "NCCL RAS: missing and lagging ranks"


def _who(entry: dict) -> str:
    gpu = f", GPU {entry['gpu']}" if entry.get("gpu") not in (None, "") else ""
    return f"rank {entry.get('rank')} (pid {entry.get('pid')} on {entry.get('host')}{gpu})"


def _groups(mismatch: dict) -> list[dict]:
    return sorted(mismatch.get("groups") or [], key=lambda g: g["count"])


def _moved(before: dict | None, after: dict) -> bool | None:
    """Did any rank of the communicator launch a collective between the two queries? None when
    the first answer does not have the communicator."""
    if before is None:
        return None
    if after.get("ranks") and before.get("ranks"):
        total = {r: sum(v["counts"].values()) for r, v in before["ranks"].items()}
        return any(sum(v["counts"].values()) != total.get(r) for r, v in after["ranks"].items())
    counts = [[(m["op"], g["count"], g["size"]) for g in _groups(m)] for m in before.get("mismatch") or []]
    return counts != [[(m["op"], g["count"], g["size"]) for g in _groups(m)] for m in after.get("mismatch") or []]


def _still(before: dict | None, after: dict) -> tuple[list[dict], int]:
    """(the ranks whose counts did not move between the two answers, how many others did)."""
    if before is None or not after.get("ranks") or not before.get("ranks"):
        return [], 0
    still, moved = [], 0
    for r, v in after["ranks"].items():
        old = before["ranks"].get(r)
        if old is None:
            continue
        if old["counts"] == v["counts"]:
            still.append({**v, "rank": int(r)})
        else:
            moved += 1
    return still, moved


def _lag_finding(comm: dict, m: dict, moved: bool | None, interval: float) -> Finding:
    groups = _groups(m)
    low, high = groups[0], groups[-1]
    listed = m.get("listed") or []
    if comm.get("ranks"):
        by_rank = {int(r): {**v, "rank": int(r)} for r, v in comm["ranks"].items()}
        behind = ", ".join(_who(by_rank[r]) for r in low["ranks"][:8] if r in by_rank)
        lagging = behind if low["size"] <= 8 else \
            f"{plural(low['size'], 'rank')} ({rank_ranges(low['ranks'])}; {behind}, ...)"
    else:
        lagging = plural(low["size"], "rank")
        listed_ranks = [e["rank"] for e in listed]
        if listed and len(listed) == low["size"]:
            lagging += f": {', '.join(_who(e) for e in listed[:8])}"
        elif listed:
            lagging += (f" that RAS does not list (it lists the {len(listed)} ahead: ranks "
                        f"{rank_ranges(listed_ranks)})")
    still = {True: "", False: f"; no rank launched a collective in {interval:g} s", None: ""}[moved]
    status = Status.FAIL if moved is False else Status.WARN
    return Finding(status, f"communicator {comm['id']}: {lagging} launched {m['op']} up to #{low['count']}, "
                           f"{plural(high['size'], 'rank')} up to #{high['count']}: the first lag{still}",
                   subject=f"communicator {comm['id']}",
                   explanation=("RAS counts the collectives each rank has launched. The ranks behind have not "
                                "launched the next one: they are where the job waits; the ranks ahead wait for "
                                "them. Their Python frames are under hang.wave."),
                   evidence={"comm": comm["id"], "op": m["op"], "behind": low, "ahead": high, "moved": moved})


def ras_run(snapshots: Sequence[dict]) -> CheckRun | None:
    doc = next((s["ras"] for s in snapshots if s.get("ras")), None)
    if doc is None:
        return None
    where = f"NCCL RAS at {doc.get('address')} (NCCL {doc.get('version') or 'of unknown version'})"
    findings: list[Finding] = []
    status = doc.get("status")
    if status in ("disabled", "not queried"):
        findings.append(Finding(Status.SKIP, f"{where} not queried: {doc.get('detail')}"))
    elif status != "ok":
        findings.append(Finding(Status.WARN, f"{where}: {doc.get('detail')}", explanation=(
            "The job loaded NCCL but its RAS port did not answer as RAS does: RAS disabled (NCCL_RAS_ENABLE=0), "
            "another NCCL_RAS_ADDR, or the process that serves it is gone.")))
    else:
        first, second = doc["queries"][0], doc["queries"][-1]
        before = {c["id"]: c for c in first.get("comms") or []} if len(doc["queries"]) > 1 else {}
        for p in second.get("processes_missing") or []:
            findings.append(Finding(Status.FAIL, f"RAS has no data from process {p['pid']} on {p['host']} "
                                                 f"(GPU {p['gpu']})", subject=f"pid {p['pid']}", evidence=p))
        for comm in second.get("comms") or []:
            for miss in comm.get("missing") or []:
                how = "considered dead" if miss.get("dead") else "unresponsive" if miss.get("unresponsive") else \
                    "no data"
                findings.append(Finding(Status.FAIL, f"communicator {comm['id']}: {_who(miss)} is missing ({how})",
                                        subject=f"rank {miss.get('rank')}", evidence={"comm": comm["id"], **miss}))
            moved = _moved(before.get(comm["id"]), comm)
            still, others = _still(before.get(comm["id"]), comm)
            if still and others:
                findings.append(Finding(
                    Status.WARN, f"communicator {comm['id']}: {', '.join(_who(e) for e in still[:8])}"
                                 f"{' and more' if len(still) > 8 else ''} launched no collective in "
                                 f"{float(doc.get('interval') or 0):g} s while {plural(others, 'other rank')} did",
                    subject=f"communicator {comm['id']}", evidence={"comm": comm["id"], "still": [e["rank"] for e in still]}))
            for m in comm.get("mismatch") or []:
                if len(m.get("groups") or []) > 1:
                    findings.append(_lag_finding(comm, m, moved, float(doc.get("interval") or 0)))
        if not findings:
            comms = second.get("comms") or []
            findings.append(Finding(Status.OK, f"{where}: {plural(len(comms), 'communicator')}, every rank present "
                                               "and at the same collective count", explanation=(
                                                   "RAS counts launched collectives: a job can hang with every count "
                                                   "equal (a kernel that never completes; NVIDIA/nccl#1730).")))
    status_ = max((f.status for f in findings), key=lambda s: s.severity)
    return CheckRun("hang.nccl-ras", TITLE, ("hang", "nccl"), status_, tuple(findings), 0.0, "distdoctor")
