"""docs/guarantees.md (and the exit-code tables in README and getting-started, and `--help`)
list exactly the exit codes distdoctor/model.py defines."""

from __future__ import annotations

import os
import re

import pytest

from distdoctor import model
from tests.conftest import REPO

ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(.+?)\s*\|\s*$")


def table_codes(path: str, heading: str) -> dict[int, str]:
    """The `| code | meaning |` table under the first heading that starts with `heading`."""
    with open(os.path.join(REPO, path)) as fh:
        lines = fh.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and heading in line)
    codes: dict[int, str] = {}
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        match = ROW.match(line)
        if match:
            codes[int(match.group(1))] = match.group(2)
    return codes


MODEL_CODES = {value for name, value in vars(model).items() if name.startswith("EXIT_") and isinstance(value, int)}


def test_the_model_defines_the_codes_the_guarantees_promise():
    assert {model.EXIT_OK, model.EXIT_FAIL, model.EXIT_ERROR, model.EXIT_USAGE, model.EXIT_OUTPUT,
            model.EXIT_HANGUP, model.EXIT_INTERRUPTED, model.EXIT_TERMINATED} == MODEL_CODES


@pytest.mark.parametrize("path,heading", [("docs/guarantees.md", "Exit codes"), ("README.md", "Exit codes"),
                                          ("docs/getting-started.md", "Exit codes")])
def test_every_exit_code_table_matches_the_model(path, heading):
    assert set(table_codes(path, heading)) == MODEL_CODES


def test_the_help_epilog_lists_every_code():
    listed = {int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\s", model.EXIT_CODES_HELP, re.MULTILINE)}
    assert listed == MODEL_CODES


def test_the_parser_sees_a_missing_row(tmp_path, monkeypatch):
    """The check above can fail: a table without 143 is seen as one."""
    doc = tmp_path / "doc.md"
    doc.write_text("## Exit codes\n\n| code | meaning |\n|---|---|\n| 0 | ok |\n| 130 | interrupted |\n\n## Next\n| 143 | x |\n")
    monkeypatch.setattr("tests.unit.hostile.test_guarantees_doc.REPO", str(tmp_path))
    assert set(table_codes("doc.md", "Exit codes")) == {0, 130}
