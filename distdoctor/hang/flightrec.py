"""torch's Flight Recorder: each rank's ring buffer of the collectives it entered, read from the
dump files the job writes (TORCH_FR_DUMP_TEMP_FILE<rank>, by default
~/.cache/torch/comm_lib_trace_rank_<rank>).

A dump is a pickle (torch's `_dump_fr_trace`) or JSON (`_dump_fr_trace_json`). Upstream's
analyser calls pickle.load on it; a pickle can run any code when loaded, and these files sit
in shared, writable places. Here a pickle is read by an unpickler that resolves no global at
all: only the opcodes of plain containers and scalars (dict, list, tuple, str, bytes, int,
float, bool, None) can build anything, so a dump that names a callable fails to load instead
of calling it. Each rank's trace is reduced to what matching needs (frmatch.py), JSON-safe, so
that it crosses srun in a node's snapshot.
"""

from __future__ import annotations

import io
import json
import os
import pickle
from typing import Any

MAX_BYTES = 64 * 1024 * 1024  # a ring of 20,000 entries with stack frames is ~30 MiB
# Per rank, the latest entries: a hang sits at the newest collectives, and 4,096 ranks' worth
# must cross srun and be matched in well under a second (bench/hang_scale.py).
KEEP_ENTRIES = 64
ENABLE_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
PREFIX_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


class NotADump(ValueError):
    pass


class PlainUnpickler(pickle.Unpickler):
    """Resolves no global and no persistent id: what it returns is built from plain containers
    and scalars only, and nothing in the file is ever called."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a Flight Recorder dump holds plain data only")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused a persistent id: a Flight Recorder dump holds plain data only")


def loads(data: bytes) -> dict:
    """A dump's bytes (pickle or JSON) to its dict; NotADump says why not."""
    head = data.lstrip()[:1]
    if head == b"{":
        try:
            doc = json.loads(data.decode("utf-8", "replace"))
        except ValueError as exc:
            raise NotADump(f"JSON that does not parse (truncated?): {exc}") from None
        except RecursionError:
            raise NotADump("JSON nested deeper than Python can read: not a Flight Recorder dump") from None
    elif data[:1] == b"\x80":
        try:
            doc = PlainUnpickler(io.BytesIO(data)).load()
        except pickle.UnpicklingError as exc:
            raise NotADump(f"a pickle that is not plain data: {exc}") from None
        except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, MemoryError,
                RecursionError, OverflowError, UnicodeDecodeError) as exc:
            raise NotADump(f"a pickle that does not load (truncated?): {type(exc).__name__}: {exc}") from None
    elif not data:
        raise NotADump("an empty file")
    else:
        raise NotADump("neither a pickle nor JSON")
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list) or "version" not in doc:
        raise NotADump("not a Flight Recorder dump (no version, or entries is not a list)")
    return doc


def _int(value, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _op(name: str) -> str:
    """`nccl:all_reduce` -> `all_reduce`"""
    return name.split(":", 1)[1] if ":" in name else name


def _word(value: Any, default: str = "") -> str:
    """A scalar of the dump as text; anything else is not one (a pickle can share one list
    between many places, so str() of a small file's object can take forever)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return default
    return str(value)[:200]


def _sizes(value: Any, budget: int = 64, depth: int = 4) -> str:
    """input_sizes as compact JSON, at most `budget` scalars and `depth` levels deep: a shared
    or deeply nested structure is cut, never walked whole."""
    left = [budget]

    def walk(v: Any, d: int) -> str:
        if left[0] <= 0:
            return '"..."'
        left[0] -= 1
        if isinstance(v, (list, tuple)):
            if d >= depth:
                return '"..."'
            return "[" + ",".join(walk(x, d + 1) for x in v[:budget]) + "]"
        word = _word(v, "?")
        return word if isinstance(v, (int, float)) and not isinstance(v, bool) else json.dumps(word)

    return walk(value, 0)[:200]


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def summarise(doc: dict) -> dict[str, Any]:
    """What matching needs, JSON-safe: per process group its last enqueued/completed
    sequence number, and the latest entries as [pg, seq, op, sizes, state, p2p]. Bounded
    whatever the dump holds: only its newest entries are looked at, and only scalars are read."""
    status = {}
    for pg, st in list(_dict(doc.get("pg_status")).items())[:4096]:
        if isinstance(st, dict):
            status[_word(pg, "?")] = {"enqueued": _int(st.get("last_enqueued_collective")),
                                      "started": _int(st.get("last_started_collective")),
                                      "completed": _int(st.get("last_completed_collective"))}
    entries: list[list[Any]] = []
    raw = doc.get("entries")
    for e in reversed(raw if isinstance(raw, list) else []):
        if len(entries) >= KEEP_ENTRIES:
            break
        if not isinstance(e, dict):
            continue
        p2p = e.get("is_p2p") is True
        seq = _int(_word(e.get("p2p_seq_id") if p2p else e.get("collective_seq_id"), "-1"))
        entries.append([_word(e.get("pg_id")), seq, _op(_word(e.get("profiling_name")) or "?"),
                        _sizes(e.get("input_sizes")), _word(e.get("state")), p2p])
    entries.reverse()
    groups = {}
    for name, cfg in list(_dict(doc.get("pg_config")).items())[:4096]:
        if isinstance(cfg, dict):
            ranks = cfg.get("ranks")
            if isinstance(ranks, str):
                try:
                    ranks = json.loads(ranks)
                except (ValueError, RecursionError):
                    ranks = None
            groups[_word(name, "?")] = len(ranks) if isinstance(ranks, list) else None
    return {"version": _word(doc.get("version")), "pg_status": status, "entries": entries,
            "group_sizes": groups}


def enabled(env: dict[str, str]) -> bool:
    return any(_int(env.get(v), 0) > 0 for v in ENABLE_VARS)


def dump_path(env: dict[str, str], rank: int | None, home: str) -> str:
    prefix = next((env[v] for v in PREFIX_VARS if env.get(v)), "")
    if not prefix:
        cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or home, ".cache")
        prefix = os.path.join(cache, "torch", "comm_lib_trace_rank_")
    return f"{prefix}{rank if rank is not None else ''}"


def boot_time(host) -> float | None:
    try:
        text = host.read_text("/proc/stat", max_bytes=1024 * 1024) or ""
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("btime "):
            return float(_int(line.split()[1], 0)) or None
    return None


def read_rank(host, rank, boot: float | None) -> dict[str, Any]:
    """One rank's dump: {"path", "status", "detail", and the summary when status is "ok"}.
    status: disabled, missing, stale (older than the rank), huge, unreadable, bad, foreign, ok."""
    from distdoctor.hang.procstate import CLOCK_TICKS

    env = rank.env
    path = dump_path(env, rank.rank, host.home())
    out: dict[str, Any] = {"path": path, "enabled": enabled(env), "pipe": env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")}
    info = host.file_info(path)
    if info is None:
        out.update(status="missing" if out["enabled"] else "disabled", detail="no dump file")
        return out
    size, mtime = info
    started = boot + rank.start_ticks / CLOCK_TICKS if boot and rank.start_ticks else None
    if started is not None and mtime < started - 1:
        out.update(status="stale", detail=f"written {started - mtime:.0f} s before this rank started: "
                                          "from an earlier job")
        return out
    if size > MAX_BYTES:
        out.update(status="huge", detail=f"{size / 2**20:.0f} MiB, over the {MAX_BYTES // 2**20} MiB read limit")
        return out
    try:
        data = host.read_bytes(path, MAX_BYTES + 1)
    except OSError as exc:
        out.update(status="unreadable", detail=exc.strerror or str(exc))
        return out
    if data is None:
        out.update(status="missing", detail="no dump file")
        return out
    try:
        doc = loads(data)
    except NotADump as exc:
        out.update(status="bad", detail=str(exc))
        return out
    summary = summarise(doc)
    sizes = [n for n in summary["group_sizes"].values() if n]
    if rank.world_size and sizes and max(sizes) != rank.world_size:
        out.update(status="foreign", detail=f"its largest process group has {max(sizes)} ranks, this job "
                                            f"{rank.world_size}: from another job")
        return out
    out.update(status="ok", detail="", format="json" if data.lstrip()[:1] == b"{" else "pickle", **summary)
    return out


def collect(host, ranks) -> dict[str, Any]:
    """Every rank's dump on this node, keyed by pid (JSON object keys are strings)."""
    boot = boot_time(host)
    return {str(r.pid): read_rank(host, r, boot) for r in ranks}
