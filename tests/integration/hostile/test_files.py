"""Files that are not what their names say, and bounds that are too small to load anything:
`compare DIR` with a FIFO named *.json ends at once, and `--timeout 0.001 --only host` says the
packs did not load instead of calling a real check id a typo."""

from __future__ import annotations

import os

from distdoctor.model import EXIT_ERROR, EXIT_USAGE
from tests.harness.hostile import dd, strict_json


def test_compare_skips_a_fifo_named_json_in_a_directory(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    os.mkfifo(reports / "node9.json")
    result = dd("compare", str(reports), "--json", timeout=30)
    assert result.elapsed < 20
    assert "Traceback" not in result.stderr
    assert "node9.json: not a regular file" in result.stderr
    assert result.returncode == EXIT_USAGE  # no report left to compare


def test_compare_refuses_a_fifo_given_by_name(tmp_path):
    fifo = tmp_path / "node9.json"
    os.mkfifo(fifo)
    result = dd("compare", str(fifo), timeout=30)
    assert result.elapsed < 20 and result.returncode == EXIT_USAGE
    assert "not a regular file" in result.stderr


def test_a_bound_too_short_to_load_the_packs_is_not_a_typo():
    result = dd("check", "--timeout", "0.001", "--only", "host", "--json", timeout=30)
    assert "Traceback" not in result.stderr
    assert result.returncode == EXIT_ERROR, result.stderr
    assert "no check, area or tag matches" not in result.stderr
    checks = {c["id"]: c for c in strict_json(result.stdout)["checks"]}
    assert checks["core.check-packs"]["status"] == "error"


def test_a_real_typo_is_still_a_usage_error():
    result = dd("check", "--only", "hots", timeout=60)
    assert result.returncode == EXIT_USAGE and "did you mean host" in result.stderr
