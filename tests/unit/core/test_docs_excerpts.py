"""The code the contributor docs show is the code as it is: every fenced block in
CONTRIBUTING.md and docs/writing-checks.md whose first line names a file of the repository
(`# distdoctor/facts/host.py`) holds lines found in that file, in that order, each run of lines
between `...` lines verbatim."""

from __future__ import annotations

import os
import re

import pytest

from tests.conftest import REPO

DOCS = ("CONTRIBUTING.md", os.path.join("docs", "writing-checks.md"))
_FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)
_NAMED = re.compile(r"^# ((?:distdoctor|checks|tests|bench|docs)/\S+)$")


def excerpts(doc: str):
    with open(os.path.join(REPO, doc), encoding="utf-8") as fh:
        text = fh.read()
    for block in _FENCE.findall(text):
        first, _, body = block.partition("\n")
        named = _NAMED.match(first)
        if named:
            yield named.group(1), body


def chunks(body: str) -> list[str]:
    """The runs of lines between `...` lines (blank lines at a run's ends dropped)."""
    runs, current = [], []
    for line in body.splitlines():
        if line.strip() == "...":
            runs.append(current)
            current = []
        else:
            current.append(line)
    runs.append(current)
    return ["\n".join(run).strip("\n") for run in runs if "".join(run).strip()]


def missing(source: str, body: str) -> str | None:
    """The first run of the excerpt not found in source after the run before it, or None."""
    at = 0
    for chunk in chunks(body):
        found = source.find(chunk, at)
        if found < 0:
            return chunk
        at = found + len(chunk)
    return None


CASES = [(doc, path, body) for doc in DOCS for path, body in excerpts(doc)]


def test_each_doc_shows_code_for_every_kind_of_addition():
    named = {path for _doc, path, _body in CASES}
    for where in ("distdoctor/commands/", "checks/", "distdoctor/facts/", "distdoctor/parsers/",
                  "distdoctor/logs/signatures.toml", "tests/data/parsers.toml"):
        assert any(p.startswith(where) for p in named), where
    assert {doc for doc, _path, _body in CASES} == set(DOCS)


@pytest.mark.parametrize("doc, path, body", CASES, ids=[f"{d}:{p}" for d, p, _ in CASES])
def test_excerpt_is_in_its_file_in_order(doc, path, body):
    full = os.path.join(REPO, path)
    assert os.path.isfile(full), f"{doc} shows {path}, which does not exist"
    with open(full, encoding="utf-8") as fh:
        source = fh.read()
    gone = missing(source, body)
    assert gone is None, f"{doc}: this part of its {path} excerpt is not in the file (after the part before):\n{gone}"


def test_an_excerpt_out_of_order_or_changed_is_missing():
    source = "def f():\n    a = 1\n    b = 2\n    return a + b\n"
    assert chunks("a\n  b\n...\n\nc\n...\n") == ["a\n  b", "c"]
    assert missing(source, "def f():\n...\n    return a + b") is None
    assert missing(source, "    b = 2\n...\n    a = 1") == "    a = 1"
    assert missing(source, "def f():\n    a = 2") == "def f():\n    a = 2"
