"""`dcgmi diag -r N` (its table and its `-j` JSON) and `dcgmi health -c` (the table of DCGM 2.x-3.x
and the tree of DCGM 4.x): DCGM's own verdicts per test, per GPU and per health system.

DCGM wraps a long message into the table's value column at a fixed width, cutting words
("Enabl" / "e persistence"): diag messages are joined back chunk by chunk, health messages (wrapped
at word boundaries) with a space. A status word this parser does not know is "unknown", never
"pass": a new spelling from a new DCGM must not read as a healthy GPU.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from distdoctor.parsers import ParseError

_DIAG_WIDTH = 45  # DATA_INFO_TAG_LEN in dcgmi's diag renderer
_HEADER = re.compile(r"^[|+]-{3,}\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-+\+")
_BORDER = re.compile(r"^\+[-=+]+\+?\s*$")
_STATUS = re.compile(r"^(?P<status>Pass|Fail|Warn|Warning|Skip|Skipped|Not Run|Incomplete)\b(?:\s*-\s*"
                     r"(?:(?P<all>All)|GPUs?:\s*(?P<gpus>[\d,\s]+)))?\s*$", re.I)
_PER_GPU = re.compile(r"^GPU\s?(?P<gpu>\d+):\s*(?P<status>[A-Za-z ]+?)\s*$")
_MESSAGE_ROWS = {"warning": "warning", "error": "error", "info": "info"}
_META = {"dcgm version": "version", "driver version detected": "driver", "gpu device ids detected": "device_ids"}
_GPU_IN_TEXT = re.compile(r"\bGPU\s?(\d+)\b")
_JSON_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")  # DCGM 2-3, DCGM 4


def status_word(word: str) -> str:
    """pass / fail / warn / skip, else unknown."""
    w = " ".join(str(word).split()).lower()
    if w in ("pass", "passed", "ok"):
        return "pass"
    if w in ("fail", "failed", "failure", "error"):
        return "fail"
    if w in ("warn", "warning"):
        return "warn"
    if w in ("skip", "skipped", "not applicable", "n/a"):
        return "skip"
    return "unknown"


@dataclass(frozen=True)
class DiagMessage:
    level: str          # warning, error, info
    text: str
    gpu: int | None     # the GPU the message names, if any


@dataclass(frozen=True)
class DiagTest:
    category: str       # Deployment, Integration, Hardware, Stress, Custom, ...
    name: str
    status: str         # the worst of its results: fail > warn > unknown > pass > skip
    results: tuple[tuple[int | None, str], ...]  # (GPU or None for all, status)
    messages: tuple[DiagMessage, ...] = ()

    def failed_gpus(self) -> tuple[int | None, ...]:
        return tuple(g for g, s in self.results if s == "fail")


@dataclass(frozen=True)
class DcgmDiag:
    tests: tuple[DiagTest, ...]
    version: str = ""
    driver: str = ""
    device_ids: str = ""
    form: str = "text"  # text or json


_RANK = {"fail": 4, "warn": 3, "unknown": 2, "pass": 1, "skip": 0}


def _worst(statuses) -> str:
    return max(statuses, key=lambda s: _RANK.get(s, 2), default="unknown")


def _cells(line: str) -> tuple[str, str] | None:
    """(name, value) of a `| name | value |` row; the value keeps its spacing."""
    body = line.strip()
    if not body.startswith("|") or _HEADER.match(body):
        return None
    name, sep, value = body[1:].partition("|")
    if not sep:
        return None
    if value.rstrip().endswith("|"):
        value = value.rstrip()[:-1]
    return name.strip(), value


class _Test:
    def __init__(self, category: str, name: str):
        self.category, self.name = category, name
        self.results: list[tuple[int | None, str]] = []
        self.messages: list[list] = []  # [level, chunks]

    def freeze(self) -> DiagTest:
        msgs = []
        for level, chunks in self.messages:
            text = " ".join("".join(chunks).split())
            m = _GPU_IN_TEXT.search(text)
            msgs.append(DiagMessage(level, text, int(m.group(1)) if m else None))
        results = list(self.results)
        if not results:  # an Error/Warning row with no test row above it (a cut paste): the GPUs it names
            status = "fail" if any(lv == "error" for lv, _ in self.messages) else "warn"
            results = [(g, status) for g in dict.fromkeys(m.gpu for m in msgs if m.gpu is not None)] or [(None, status)]
        return DiagTest(self.category, self.name, _worst(s for _, s in results), tuple(results), tuple(msgs))


def _chunk(value: str) -> str:
    text = value[1:] if value.startswith(" ") else value
    return text[:_DIAG_WIDTH] if len(text) > _DIAG_WIDTH else text.rstrip()


def _status_results(value: str) -> list[tuple[int | None, str]] | None:
    m = _STATUS.match(value.strip())
    if m:
        status = status_word(m.group("status"))
        if m.group("gpus"):
            return [(int(g), status) for g in re.findall(r"\d+", m.group("gpus"))]
        return [(None, status)]
    m = _PER_GPU.match(value.strip())
    if m:
        return [(int(m.group("gpu")), status_word(m.group("status")))]
    return None


def parse_diag(text: str) -> DcgmDiag:
    """The table `dcgmi diag -r N` prints (DCGM 2.x to 4.x), or its `-j` JSON."""
    stripped = text.lstrip()
    if stripped.startswith("{") or '"DCGM GPU Diagnostic"' in text[:4096]:
        return parse_diag_json(text)
    meta: dict[str, str] = {}
    tests: list[_Test] = []
    category = ""
    current: _Test | None = None
    message: list | None = None
    seen = False
    for number, line in enumerate(text.splitlines(), 1):
        body = line.strip()
        if not body or _BORDER.match(body):
            continue
        header = _HEADER.match(body)
        if header:
            category = header.group("name").strip()
            current, message = None, None
            seen = True
            continue
        cells = _cells(line)
        if cells is None:
            continue
        name, value = cells
        key = name.lower()
        if key == "diagnostic" and value.strip().lower() == "result":
            seen = True
            continue
        if key in _META:
            meta[_META[key]] = value.strip()
            seen = True
            continue
        if key in _MESSAGE_ROWS:
            if current is None and _MESSAGE_ROWS[key] == "info":
                # an Info row of a test cut off above it (a pasted part of a table): no verdict of its own
                message = ["info", [_chunk(value)]]
                seen = True
                continue
            if current is None:
                current = _Test(category, "")
                tests.append(current)
            message = [_MESSAGE_ROWS[key], [_chunk(value)]]
            current.messages.append(message)
            seen = True
            continue
        if name:
            results = _status_results(value)
            current = _Test(category, name)
            current.results.extend(results if results is not None else [(None, status_word(value))])
            tests.append(current)
            message = None
            seen = True
            continue
        # a row with no name: another GPU's result, or the next chunk of a message
        results = _status_results(value)
        if results is not None and message is None and current is not None:
            if _PER_GPU.match(value.strip()) and len(current.results) == 1 and current.results[0][0] is None:
                current.results = []  # 4.x: the overall word, then one line per GPU
            current.results.extend(results)
        elif message is not None:
            message[1].append(_chunk(value))
        elif current is not None and results is not None:
            current.results.extend(results)
    if not seen or not tests:
        raise ParseError("dcgmi diag", "no `| Diagnostic | Result |` table with a test row", 1 if text else None, text)
    return DcgmDiag(tuple(t.freeze() for t in tests), meta.get("version", ""), meta.get("driver", ""),
                    meta.get("device_ids", ""), "text")


def _texts(items) -> list[str]:
    out = []
    for item in items or ():
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            # newer DCGM: {"warning": "...", "error_id": N} / {"message": ...}
            text = item.get("warning") or item.get("message") or item.get("info") or item.get("error")
            if isinstance(text, str):
                out.append(text)
    return out


def _gpu_ids(value) -> list[int | None]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, str) and value.strip():
        ids: list[int | None] = [int(x) for x in re.findall(r"\d+", value)]
        return [None] if len(ids) != 1 else ids  # a CSV of every GPU: the deployment tests' "all"
    return [None]


def parse_diag_json(text: str) -> DcgmDiag:
    """`dcgmi diag -r N -j`: {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests":
    [{"name", "results": [{"gpu_ids", "status", "warnings", "info"}]}]}], "version"}}; null entries
    between tests (DCGM 3.1) are skipped. DCGM 4.x: the root is "DCGM Diagnostic", each result names
    its entity ("entity_group": "GPU", "entity_id": N), version and driver sit in "metadata".
    Text printed before the document is ignored."""
    start = text.find("{")
    if start < 0:
        raise ParseError("dcgmi diag -j", "no JSON object", 1 if text else None, text)
    try:
        doc, _end = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        raise ParseError("dcgmi diag -j", f"not JSON: {exc}", text[:start].count("\n") + 1, text) from None
    root = None
    if isinstance(doc, dict):
        # DCGM 4.x renamed the root and moved version and driver into a "metadata" object
        root = next((doc[k] for k in _JSON_ROOTS if isinstance(doc.get(k), dict)), doc)
    if not isinstance(root, dict):
        raise ParseError("dcgmi diag -j", "no \"DCGM GPU Diagnostic\" object", 1, text)
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else root
    categories = root.get("test_categories")
    if not isinstance(categories, list):
        # DCGM 4.x: the tests at the top, without categories
        categories = [{"category": "", "tests": root.get("tests") or []}]
    tests: list[DiagTest] = []
    for cat in categories:
        if not isinstance(cat, dict):
            continue
        for test in cat.get("tests") or ():
            if not isinstance(test, dict):
                continue
            results: list[tuple[int | None, str]] = []
            messages: list[DiagMessage] = []
            for r in test.get("results") or ():
                if not isinstance(r, dict):
                    continue
                # DCGM 4.x names each result's entity; only a GPU entity's id is a GPU index
                entity = r.get("entity_id") if str(r.get("entity_group", "GPU")).upper() == "GPU" else None
                gpu_field = r.get("gpu_ids", r.get("gpu_id", entity))
                status = status_word(r.get("status", ""))
                gpus = _gpu_ids(gpu_field)
                results.extend((g, status) for g in gpus)
                for level, key in (("warning", "warnings"), ("info", "info"), ("error", "errors")):
                    for t in _texts(r.get(key)):
                        m = _GPU_IN_TEXT.search(t)
                        gpu = gpus[0] if len(gpus) == 1 and gpus[0] is not None else (int(m.group(1)) if m else None)
                        messages.append(DiagMessage(level, " ".join(t.split()), gpu))
            if not results:
                continue
            tests.append(DiagTest(str(cat.get("category", "")), str(test.get("name", "")),
                                  _worst(s for _, s in results), tuple(results), tuple(messages)))
    if not tests:
        raise ParseError("dcgmi diag -j", "no test results in the document", 1, text)
    return DcgmDiag(tuple(tests), str(meta.get("version", "")), str(meta.get("Driver Version Detected",
                                                                             meta.get("driver_version", ""))),
                    "", "json")


# --- dcgmi health -c ----------------------------------------------------------------------------

@dataclass(frozen=True)
class HealthIncident:
    entity: str         # "GPU 0", "NvSwitch 1", or "" when the report names none
    gpu: int | None
    system: str         # PCIe, Memory, InfoROM, Thermal, Power, NVLink, Driver, NVSwitch, ...
    severity: str       # warn or fail
    message: str


@dataclass(frozen=True)
class DcgmHealth:
    overall: str        # healthy, warn, fail, unknown
    incidents: tuple[HealthIncident, ...] = ()
    watches_enabled: bool = True


_OVERALL_OLD = re.compile(r"Overall Health:\s*(?P<word>\w+)", re.I)
_ENTITY_OLD = re.compile(r"^(?P<kind>GPU|NvSwitch|Switch|CPU|ConnectX)(?: ID)?:\s*(?P<id>\d+)$", re.I)
_INCIDENT_OLD = re.compile(r"^(?P<system>[A-Za-z][\w /-]*?) system:\s*(?P<sev>Warning|Failure|Fail|Error)\s*-\s*"
                           r"(?P<msg>.*)$", re.I)
_ARROW = re.compile(r"^->\s*(?P<what>.+)$")
_SYSTEM_NEW = re.compile(r"^(?P<system>[A-Za-z][\w /-]*?) system$", re.I)
_NOT_ENABLED = re.compile(r"Health watches not enabled|not (?:been )?enabled.*watch", re.I)


def _health_word(word: str) -> str:
    w = word.strip().lower()
    if w.startswith("health"):
        return "healthy"
    if w.startswith("warn"):
        return "warn"
    if w.startswith(("fail", "error")):
        return "fail"
    return "unknown"


def parse_health(text: str) -> DcgmHealth:
    """`dcgmi health -c`: the overall verdict and one incident per (entity, system)."""
    if _NOT_ENABLED.search(text) and "Overall Health" not in text:
        return DcgmHealth("unknown", (), watches_enabled=False)
    overall = ""
    incidents: list[dict] = []
    entity, gpu = "", None
    current: dict | None = None
    kind_of_entity = ""
    for line in text.splitlines():
        body = line.strip()
        if not body or _BORDER.match(body):
            continue
        cells = _cells(line)
        if cells is None:
            m = _OVERALL_OLD.search(body)
            if m:
                overall = _health_word(m.group("word"))
            continue
        name, value = cells
        value = value.strip()
        if "Overall Health:" in name or "Overall Health:" in value:
            m = _OVERALL_OLD.search(name + " " + value)
            if m:
                overall = _health_word(m.group("word"))
            continue
        if name.lower() == "overall health":
            overall = _health_word(value)
            continue
        if name.lower() == "health monitor report":
            continue
        if (m := _ENTITY_OLD.match(name)) is not None:
            entity = f"{'GPU' if m.group('kind').upper() == 'GPU' else m.group('kind')} {m.group('id')}"
            gpu = int(m.group("id")) if m.group("kind").upper() == "GPU" else None
            current = None
            continue
        arrow = _ARROW.match(name)
        if name in ("GPU", "NvSwitch", "NVSWITCH", "CPU", "ConnectX") and not value:
            kind_of_entity = "GPU" if name == "GPU" else name
            continue
        if arrow:
            what = arrow.group("what").strip()
            if what.isdigit():
                entity = f"{kind_of_entity or 'GPU'} {what}"
                gpu = int(what) if (kind_of_entity or "GPU") == "GPU" else None
                current = None
            elif (s := _SYSTEM_NEW.match(what)) is not None:
                current = {"entity": entity, "gpu": gpu, "system": s.group("system"),
                           "severity": _health_word(value), "chunks": []}
                incidents.append(current)
            continue
        if not name and value:
            old = _INCIDENT_OLD.match(value)
            if old:
                current = {"entity": entity, "gpu": gpu, "system": old.group("system"),
                           "severity": _health_word(old.group("sev")), "chunks": [old.group("msg")]}
                incidents.append(current)
            elif current is not None:
                current["chunks"].append(value)
    if not overall:
        raise ParseError("dcgmi health -c", "no 'Overall Health' line", 1 if text else None, text)
    return DcgmHealth(overall, tuple(
        HealthIncident(i["entity"], i["gpu"], i["system"], i["severity"] if i["severity"] != "healthy" else "warn",
                       " ".join(" ".join(i["chunks"]).split())) for i in incidents))
