"""Hostile check packs (--checks-dir): whatever a pack does at import or in a check, the run
ends within its bound, the other checks still run, the pack or check becomes an ERROR or
TIMEOUT finding, and stdout carries only the report."""

from __future__ import annotations

import pytest

from distdoctor.model import EXIT_ERROR, EXIT_OK
from tests.harness.hostile import QUICK_PACK, dd, strict_json, write_pack


TIMEOUT = 20  # --timeout of each run; pack loading may take half of it

AT_IMPORT = {
    "loops": "while True:\n    pass\n",
    "sleeps": "import time\ntime.sleep(3600)\n",
    "exits": "import sys\nsys.exit(3)\n",
    "interrupts": "raise KeyboardInterrupt\n",
    "system-exit": "raise SystemExit('bye')\n",
    "base-exception": "class Odd(BaseException):\n    pass\nraise Odd('odd')\n",
    "detaches-a-daemon": "import subprocess\nsubprocess.Popen(['sh', '-c', '(setsid sleep 3600 &)'])\nCHECKS = []\n",
    "prints": "import os, sys\nprint('garbage from print')\nos.write(1, b'garbage from fd 1')\nsys.stdout.flush()\n"
              "CHECKS = []\n",
    "child-prints": "import subprocess\nsubprocess.run(['echo', 'garbage from a child'], check=False)\nCHECKS = []\n",
}


def run_with(tmp_path, name, body, *extra):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    (pack / f"hostile_{name.replace('-', '_')}.py").write_text(body)
    result = dd("check", "--checks-dir", str(pack), "--only", "hostile.*", "--format", "json",
                "--timeout", str(TIMEOUT), *extra, timeout=TIMEOUT + 30)
    assert result.elapsed < TIMEOUT + 10, f"{name}: the run took {result.elapsed:.1f} s"
    doc = strict_json(result.stdout)  # nothing but the report on stdout
    return result, doc


def by_id(doc):
    return {c["id"]: c for c in doc["checks"]}


@pytest.mark.parametrize("name", sorted(AT_IMPORT))
def test_a_pack_misbehaving_at_import_costs_only_itself(tmp_path, name):
    result, doc = run_with(tmp_path, name, AT_IMPORT[name])
    checks = by_id(doc)
    assert checks["hostile.quick"]["status"] == "ok"
    if name in ("prints", "child-prints", "detaches-a-daemon"):
        assert result.returncode == EXIT_OK, result.stderr
        assert name == "detaches-a-daemon" or "garbage" in result.stderr  # kept for the operator, on stderr
    else:
        assert result.returncode == EXIT_ERROR, result.stderr
        problems = " ".join(f["summary"] for f in checks["core.check-packs"]["findings"])
        assert f"hostile_{name.replace('-', '_')}.py" in problems
    assert "Traceback" not in result.stderr


IN_CHECK = {
    "loops": ("while True:\n        pass", "timeout"),
    "sleeps": ("import time\n    time.sleep(3600)", "timeout"),
    "exits": ("import sys\n    sys.exit(3)", "error"),
    "interrupts": ("raise KeyboardInterrupt", "error"),
    "writes-fd1": ("import os\n    os.write(1, b'garbage to fd 1')\n    yield ok('wrote')", "ok"),
    "prints": ("print('garbage from print')\n    yield ok('printed')", "error"),
    "child-prints": (("import subprocess\n    subprocess.run(['echo', 'garbage from a child'], check=False)\n"
                      "    yield ok('child printed')"), "ok"),
    # not through ctx.host: only the process-wide token can catch these
    "detaches-a-daemon": (("import subprocess\n    subprocess.Popen(['sh', '-c', '(setsid sleep 3600 &)'], "
                           "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n    yield ok('detached')"), "ok"),
    "prints-then-hangs": ("import os, time\n    os.write(1, b'{\"garbage\": ')\n    time.sleep(3600)", "timeout"),
}


@pytest.mark.parametrize("name", sorted(IN_CHECK))
def test_a_check_misbehaving_costs_only_itself(tmp_path, name):
    body, status = IN_CHECK[name]
    pack = (f"from distdoctor.api import check, ok\n\n"
            f"@check('hostile.bad', title='A hostile check', timeout=3)\n"
            f"def bad(ctx):\n    {body}\n\nCHECKS = [bad]\n")
    result, doc = run_with(tmp_path, name, pack)
    checks = by_id(doc)
    assert checks["hostile.quick"]["status"] == "ok"
    assert checks["hostile.bad"]["status"] == status
    assert result.returncode == {"ok": EXIT_OK, "error": EXIT_ERROR, "timeout": EXIT_ERROR}[status]
    assert "Traceback" not in result.stderr
