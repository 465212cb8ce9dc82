"""Pasted `nvidia-smi topo -m` matrices that are not whole: one cut off inside a row (the rows
before it are read and judged, the rest said not shown), and rows quoted without the header
(which column is which device is then not shown: the rows are stated, nothing is judged).
pasted.py finds the sections and calls in here."""

from __future__ import annotations

import re

from distdoctor.model import CheckRun, Finding, Status

KINDS = ("topo_fragment",)

_CELL = r"(?:X|NV\d+|SYS|NODE|PHB|PXB|PIX|SOC|PHB|PCIe|NVL?)"
_ROW = re.compile(rf"^(?P<label>(?:GPU|NIC)\d+)(?:\s+{_CELL}){{2,}}\b")
_HEADER = re.compile(r"\bGPU0\s+(?:GPU1|NIC0|mlx\w*|CPU Affinity)\b")


def detect(lines: list[str], i: int) -> tuple[str, int] | None:
    """Two or more matrix rows with no header line: a fragment."""
    if not _ROW.match(lines[i].strip()) or i + 1 >= len(lines) or not _ROW.match(lines[i + 1].strip()):
        return None
    if any(_HEADER.search(lines[k]) for k in range(max(0, i - 40), i)):
        return None
    end = i
    while end < len(lines) and end - i < 400 and _ROW.match(lines[end].strip()):
        end += 1
    return "topo_fragment", end


def complete_rows(text: str) -> tuple[str, str]:
    """The matrix without a last row cut off mid-line (an excerpt or a post that ends inside it),
    and that row's label ("" when the matrix is whole or fails for another reason)."""
    from distdoctor.parsers import ParseError
    from distdoctor.parsers.nvidia_smi import parse_topo_matrix

    try:
        parse_topo_matrix(text)
        return text, ""
    except ParseError as exc:
        lines = text.splitlines()
        if "stops before the rows of" in str(exc):
            # cut at a row's end: the rows shown are whole, the GPUs after them are not shown
            shown = [line.split()[0] for line in lines if _ROW.match(line.strip())]
            if not shown:
                return text, ""
            trimmed = _without_missing(lines)
            try:
                parse_topo_matrix(trimmed)
            except ParseError:
                return text, ""
            return trimmed, f"after {shown[-1]}"
        if exc.line is None or "link cells" not in str(exc):
            return text, ""
        after = lines[exc.line:]
        if any(_ROW.match(line.strip()) for line in after):
            return text, ""  # a ragged row in the middle: not a cut, a shape the parser refuses
        trimmed = _without_missing(lines[:exc.line - 1]) + "\n".join(after) + "\n"
        try:
            parse_topo_matrix(trimmed)
        except ParseError:
            return text, ""
        return trimmed, lines[exc.line - 1].split()[0]


def _without_missing(lines: list[str]) -> str:
    """The matrix of the GPUs whose rows are shown: the columns of those whose rows are cut off
    are taken out of the header and of every row, so what is judged is what the paste shows."""
    head = next((k for k, line in enumerate(lines) if _HEADER.search(line)), None)
    if head is None:
        return "\n".join(lines) + "\n"
    words = lines[head].split()
    labels = [w for w in words if re.fullmatch(r"GPU\d+|NIC\d+|mlx\S+", w)]
    shown = {line.split()[0] for line in lines[head + 1:] if line.split()}
    missing = {k for k, label in enumerate(labels) if label.startswith("GPU") and label not in shown}
    out = lines[:head] + [" ".join(w for k, w in enumerate(words) if k not in missing)]
    for line in lines[head + 1:]:
        tokens = line.split()
        if tokens and tokens[0] in shown and _ROW.match(line.strip()):
            line = " ".join([tokens[0]] + [t for k, t in enumerate(tokens[1:]) if k not in missing])
        out.append(line)
    return "\n".join(out) + "\n"


def cut_note(label: str, where: str) -> CheckRun:
    at = f"{label}'s row" if not label.startswith("after ") else f"the row {label[6:]}"
    rest = "that row and the ones after it are" if not label.startswith("after ") else "the rows after it are"
    summary = (f"pasted `nvidia-smi topo -m` is cut off {'in' if not label.startswith('after ') else 'after'} "
               f"{at.replace('the row ', '')}: {rest} not shown (unknown); the rows before it are judged")
    return CheckRun("log.pasted-output", f"GPU topology (pasted at {where})", ("log", "pasted", "gpu"), Status.OK,
                    (Finding(Status.OK, summary, subject=where, evidence={"cut_in": label}),), 0.0,
                    f"pasted at {where}")


def runs(_kind: str, text: str, where: str, _env: dict[str, str]) -> list[CheckRun]:
    rows = [m for line in text.splitlines() if (m := _ROW.match(line.strip()))]
    labels = [m.group("label") for m in rows]
    cells = sorted({cell for line in text.splitlines() if _ROW.match(line.strip())
                    for cell in line.split()[1:] if re.fullmatch(r"NV\d+|SYS|NODE|PHB|PXB|PIX|SOC", cell)})
    summary = (f"pasted `nvidia-smi topo -m`, a fragment without its header: rows {', '.join(labels[:24])}; "
               f"links shown: {', '.join(cells) or 'none'}. The header and the rows before {labels[0]} are "
               "not shown, so which column is which GPU or NIC cannot be told: nothing is judged")
    return [CheckRun("log.pasted-output", f"GPU topology (pasted at {where})", ("log", "pasted", "gpu"), Status.OK,
                     (Finding(Status.OK, summary, subject=where, evidence={"rows": labels[:64]}),), 0.0,
                     f"pasted at {where}")]
