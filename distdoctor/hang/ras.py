"""NCCL RAS: NCCL's own view of a running job (NCCL >= 2.24), queried the way its `ncclras`
client does (`CLIENT PROTOCOL`, `TIMEOUT`, `SET FORMAT json`, `STATUS` over TCP), twice,
seconds apart, and only on versions where querying it is known not to harm the job (ras.toml).

RAS counts the collectives each rank has *launched*: it can say all is well while torch times
out (NVIDIA/nccl#1730), and in its text form it lists the minority of a mismatch, which can be
the ranks that are ahead (#1911). So the parse keeps every count, and the verdict names the
group that is behind and whether the counts moved between the two queries.
Parsers are pure; `query` and `collect` go through the host.
"""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PROTOCOL = 2
MAX_REPLY = 16 * 1024 * 1024


class NotRas(ValueError):
    pass


def policy() -> dict[str, Any]:
    return tomllib.loads(resources.files("distdoctor.hang").joinpath("ras.toml").read_text(encoding="utf-8"))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def gate(version: str, rules: dict[str, Any] | None = None) -> tuple[bool, str]:
    """(may it be queried, why not)."""
    rules = rules or policy()
    v = _version(version)
    if not v:
        return False, "the job's NCCL version is not known, and querying RAS is unsafe on some versions"
    if v < _version(rules["minimum"]):
        return False, f"NCCL {version} has no RAS (from {rules['minimum']})"
    for r in rules.get("unsafe", []):
        if _version(r["from"]) <= v < _version(r["before"]):
            return False, f"NCCL {version}: {r['why']}"
    return True, ""


# -- which NCCL a rank loaded ---------------------------------------------------------------

_LIB = re.compile(r"(?<!\S)(\S*/libnccl\.so[.\d]*)\s*$")
_FILE_VERSION = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)")
_DIST = re.compile(r"^nvidia_nccl_cu\d+-(\d+\.\d+\.\d+)[^/]*\.dist-info$")


def nccl_library(maps_text: str) -> str:
    for line in maps_text.splitlines():
        m = _LIB.search(line)
        if m:
            return m.group(1)
    return ""


def nccl_version(host, pid: int) -> tuple[str, str]:
    """(version, the library path) of the NCCL the process loaded; ("", "") when none."""
    try:
        maps = host.read_text(f"/proc/{pid}/maps", max_bytes=8 * 1024 * 1024) or ""
    except OSError:
        return "", ""
    lib = nccl_library(maps)
    if not lib:
        return "", ""
    m = _FILE_VERSION.search(lib)
    if m:
        return m.group(1), lib
    # pip's nvidia-nccl-cuXX: site-packages/nvidia/nccl/lib/libnccl.so.2 beside its dist-info
    site = lib.split("/nvidia/nccl/lib/")[0] if "/nvidia/nccl/lib/" in lib else ""
    for name in host.list_dir(site) or [] if site else []:
        d = _DIST.match(name)
        if d:
            return d.group(1), lib
    return "", lib


# -- parsing ----------------------------------------------------------------------------------

_MISSING_COMMA = re.compile(r'([0-9el"\]}])(\s*\n\s*)(")')


def _repair(text: str) -> str:
    """NCCL 2.28.9 writes missing_ranks entries without the comma before "status" (quoted in
    ray-project/ray#64928): a value ending a line and a key starting the next get one."""
    return _MISSING_COMMA.sub(r"\1,\2\3", text)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def parse_json(text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError:
        try:
            doc = json.loads(_repair(text))
        except ValueError as exc:
            raise NotRas(f"RAS answered JSON that does not parse: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        raise NotRas("RAS answered JSON without a communicators list")
    comms = []
    for c in doc["communicators"]:
        if not isinstance(c, dict):
            continue
        ranks = {}
        for r in c.get("ranks") or []:
            if isinstance(r, dict) and isinstance(r.get("rank"), int):
                st = _dict(r.get("status"))
                counts = _dict(r.get("collective_counts"))
                ranks[str(r["rank"])] = {
                    "host": str(r.get("host", "")), "pid": r.get("pid"), "gpu": r.get("cuda_dev"),
                    "counts": {str(k): int(v) for k, v in counts.items() if isinstance(v, int)},
                    "error": bool(st.get("async_error") or st.get("abort_flag")),
                }
        missing = []
        for r in c.get("missing_ranks") or []:
            if isinstance(r, dict):
                st = _dict(r.get("status"))
                missing.append({"rank": r.get("rank"), "host": str(r.get("host", "")), "pid": r.get("pid"),
                                "gpu": r.get("cuda_dev"), "unresponsive": bool(st.get("unresponsive")),
                                "dead": bool(st.get("considered_dead"))})
        comms.append({"id": str(c.get("hash", "")), "size": c.get("size"), "ranks": ranks, "missing": missing,
                      "mismatch": _mismatch_from_counts(ranks)})
    return {"format": "json", "version": str(doc.get("nccl_version", "")), "comms": comms, "processes_missing": []}


def _mismatch_from_counts(ranks: dict[str, dict]) -> list[dict]:
    out = []
    ops = sorted({op for r in ranks.values() for op in r["counts"]})
    for op in ops:
        groups: dict[int, list[int]] = {}
        for rank, r in ranks.items():
            groups.setdefault(r["counts"].get(op, 0), []).append(int(rank))
        if len(groups) > 1:
            out.append({"op": op, "groups": [{"count": n, "size": len(v), "ranks": sorted(v)}
                                             for n, v in sorted(groups.items())]})
    return out


_BLOCK = re.compile(r"^#(\d+)-(\d+) \((\w+)\) ([A-Z,]+)\s*$")
_RANK_LINE = re.compile(r"^\s*Rank (\d+) -- GPU (\S+) managed by process (\d+) on node (\S+)")
_LAUNCHED = re.compile(r"^\s*(\d+) ranks? ha(?:ve|s) launched up to operation (\d+)")
_OP = re.compile(r"different (\w+) operation counts")
_PROCESS = re.compile(r"^\s*Process (\d+) on node (\S+) managing GPU (\S+)")


def parse_text(text: str) -> dict[str, Any]:
    """ncclras's text report (2.24 onwards): the per-communicator blocks under Errors and
    Warnings; the table above them says no more than the blocks."""
    if "Communicators" not in text and "Job summary" not in text:
        raise NotRas("RAS answered text that is not a RAS status report")
    version = (re.search(r"NCCL version (\d+\.\d+\.\d+)", text) or [None, ""])[1]
    comms: dict[str, dict] = {}
    current: dict | None = None
    processes_missing = []
    for line in text.splitlines():
        b = _BLOCK.match(line)
        if b:
            cid = b.group(3)
            current = comms.setdefault(cid, {"id": cid, "size": None, "ranks": {}, "missing": [], "mismatch": []})
            current["_kind"] = b.group(4)
            continue
        if not line.startswith(" "):
            current = None if line.strip() else current
            continue
        p = _PROCESS.match(line)
        if p and current is None:
            processes_missing.append({"pid": int(p.group(1)), "host": p.group(2), "gpu": p.group(3)})
            continue
        if current is None:
            continue
        op = _OP.search(line)
        if op:
            current["mismatch"].append({"op": op.group(1), "groups": [], "listed": []})
            continue
        launched = _LAUNCHED.match(line)
        if launched and current["mismatch"]:
            current["mismatch"][-1]["groups"].append({"count": int(launched.group(2)), "size": int(launched.group(1)),
                                                      "ranks": []})
            continue
        r = _RANK_LINE.match(line)
        if r:
            entry = {"rank": int(r.group(1)), "host": r.group(4), "pid": int(r.group(3)), "gpu": r.group(2)}
            if "INCOMPLETE" in current.get("_kind", "") and not current["mismatch"]:
                current["missing"].append({**entry, "unresponsive": False, "dead": False})
            elif current["mismatch"]:
                current["mismatch"][-1]["listed"].append(entry)
    for c in comms.values():
        c.pop("_kind", None)
    return {"format": "text", "version": version, "comms": list(comms.values()), "processes_missing": processes_missing}


def parse(text: str) -> dict[str, Any]:
    body = text.lstrip()
    if not body:
        raise NotRas("RAS answered nothing")
    return parse_json(body) if body.startswith("{") else parse_text(body)


# -- querying ---------------------------------------------------------------------------------

def address(env: dict[str, str], default_port: int) -> tuple[str, int]:
    value = env.get("NCCL_RAS_ADDR", "")
    host, _, port = value.rpartition(":") if value else ("", "", "")
    try:
        return (host.strip("[]") or "localhost"), int(port) if port else default_port
    except ValueError:
        return "localhost", default_port


def query(host, where: tuple[str, int], json_format: bool, timeout_s: int, bound: float) -> tuple[dict | None, str]:
    lines = [f"CLIENT PROTOCOL {PROTOCOL}", f"TIMEOUT {timeout_s}"]
    if json_format:
        lines.append("SET FORMAT json")
    lines.append("STATUS")
    replies, error = host.converse(where[0], where[1], lines, timeout=bound, max_bytes=MAX_REPLY)
    if replies and replies[0] and not replies[0].upper().startswith("SERVER PROTOCOL"):
        return None, f"the port answered something that is not NCCL RAS ({replies[0].strip()[:80]!r})"
    if error and len(replies) < len(lines):
        return None, error
    if not replies or not replies[0].upper().startswith("SERVER PROTOCOL"):
        said = (replies[0] if replies else "").strip()[:80]
        return None, f"the port answered something that is not NCCL RAS ({said!r})" if said else \
            "the port closed without answering"
    if any(r.strip().upper() != "OK" for r in replies[1:-1]):
        return None, f"RAS refused a request ({replies[1:-1]!r})"
    try:
        return parse(replies[-1]), error
    except NotRas as exc:
        return None, str(exc)


def collect(host, ranks, env: dict[str, str], budget: float = 10.0) -> dict[str, Any] | None:
    """RAS as one node sees it: None when no rank loaded NCCL; else the gate's answer and,
    when it allows, two queries `interval` seconds apart, all within `budget` seconds (one
    query when there is no time for two)."""
    version, lib = "", ""
    for r in ranks:
        version, lib = nccl_version(host, r.pid)
        if lib:
            break
    if not lib:
        return None
    rules = policy()
    rank_env = ranks[0].env if ranks else {}
    where = address(rank_env, int(rules["default_port"]))
    out: dict[str, Any] = {"version": version, "library": os.path.basename(lib), "address": f"{where[0]}:{where[1]}",
                           "queries": [], "status": "", "detail": ""}
    if rank_env.get("NCCL_RAS_ENABLE", "1").strip() == "0":
        out.update(status="disabled", detail="the job set NCCL_RAS_ENABLE=0")
        return out
    allowed, why = gate(version, rules)
    if not allowed:
        out.update(status="not queried", detail=why)
        return out
    json_format = _version(version) >= _version(rules["json_from"])
    t = int(rules["query_timeout"])
    interval = float(rules["interval"])
    each = min(t + 2.0, (budget - interval) / 2)
    times = 2
    if each < 1.0:
        times, each = 1, max(1.0, budget)
    for i in range(times):
        if i:
            host.sleep(interval)
        parsed, error = query(host, where, json_format, max(1, min(t, int(each) - 1)), each)
        if parsed is None:
            out.update(status="failed", detail=error)
            return out
        out["queries"].append(parsed)
    out["status"] = "ok"
    out["interval"] = interval if times == 2 else 0.0
    return out
