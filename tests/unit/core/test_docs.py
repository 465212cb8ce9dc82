"""The docs stay true: the check reference is regenerated, the worked example really works."""

import os
import re
import subprocess

from distdoctor.docgen import reference
from distdoctor.model import Status
from distdoctor.testing import FakeHost, run_check

from tests.conftest import load_report, REPO, distdoctor_argv


def test_check_reference_is_fresh():
    committed = open(os.path.join(REPO, "docs", "checks.md")).read()
    assert committed == reference(), "docs/checks.md is stale: run `python -m distdoctor.docgen > docs/checks.md`"


def _worked_example(tmp_path):
    text = open(os.path.join(REPO, "docs", "writing-checks.md")).read()
    code = re.search(r"## The worked example.*?```python\n(.*?)```", text, re.S).group(1)
    pack = tmp_path / "checks.d"
    pack.mkdir()
    (pack / "scratch.py").write_text(code)
    return pack


def test_worked_example_loads_and_runs_as_a_drop_in(tmp_path):
    pack = _worked_example(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[checks."site.scratch-free"]\npath = "{tmp_path}"\nmin_free_gib = 0\n')
    proc = subprocess.run([*distdoctor_argv(), "check", "--checks-dir", str(pack), "--only", "site", "--json",
                           "--config", str(cfg)], capture_output=True, text=True, timeout=60)
    doc = load_report(proc.stdout)
    [run] = doc["checks"]
    assert run["id"] == "site.scratch-free" and run["status"] == "ok", run
    assert run["source"] == str(pack / "scratch.py")


def test_worked_example_test_snippet(tmp_path):
    pack = _worked_example(tmp_path)
    namespace = {}
    exec(compile((pack / "scratch.py").read_text(), "scratch.py", "exec"), namespace)
    host = FakeHost(disk={"/scratch": (10 * 2**40, 10 * 2**40 - 2**30, 2**30)})
    [finding] = run_check(namespace["scratch_free"], host)
    assert finding.status is Status.FAIL and "only 1 GiB free" in finding.summary
