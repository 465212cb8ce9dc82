"""Packs that break the run in ways the first rounds did not try: hand-built @check records with
fields of the wrong type, a finding whose status is a string or whose __str__ never returns, a
CHECKS that never ends, a multiprocessing child that would hold the exit. Each is one ERROR
(or TIMEOUT) in an otherwise complete report, within the bound, with strict JSON, the
documented exit code, and nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import pytest

from distdoctor.model import EXIT_ERROR, EXIT_TERMINATED
from tests.conftest import distdoctor_argv
from tests.harness.hostile import MARKER_VAR, QUICK_PACK, _wait_for_environment_gone, dd, strict_json, write_pack

RECORDS = {
    "int-id": 'CheckInfo(5, "an int id", _f)',
    "tags-int": 'CheckInfo("hostile.tags", "tags", _f, tags=5)',
    "tags-of-ints": 'CheckInfo("hostile.tags2", "tags", _f, tags=(1, 2))',
    "params-list": 'CheckInfo("hostile.params", "params", _f, params=[1, 2])',
    "title-none": 'CheckInfo("hostile.title", None, _f)',
    "func-none": 'CheckInfo("hostile.func", "func", None)',
    "id-newline": 'CheckInfo("hostile.a\\nb", "newline", _f)',
    "timeout-str": 'CheckInfo("hostile.timeout", "t", _f, timeout="5")',
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_record_with_a_field_of_the_wrong_type_is_one_error(tmp_path, name):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    write_pack(pack, "bad.py", f"""
        from distdoctor.api import ok
        from distdoctor.model import CheckInfo

        def _f(ctx):
            yield ok("never shown")

        CHECKS = [{RECORDS[name]}]
    """)
    result = dd("check", "--checks-dir", str(pack), "--only", "hostile.quick,core", "--json", "--timeout", "20",
                timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_ERROR, result.stderr
    checks = {c["id"]: c for c in strict_json(result.stdout)["checks"]}
    assert checks["hostile.quick"]["status"] == "ok"
    problems = checks["core.check-packs"]
    assert problems["status"] == "error" and "bad.py" in problems["findings"][0]["summary"]


FINDINGS = {
    "str-status": ('yield Finding("fail", "a string status")', "error", "not a Status"),
    "int-status": ('yield Finding(3, "an int status")', "error", "not a Status"),
    "not-a-finding": ('yield {"status": "fail"}', "error", "not a Finding"),
    "str-raises": ('yield fail(Bad())', "error", "cannot be shown"),
    "evidence-not-a-dict": ('yield Finding(Status.FAIL, "x", evidence=[1, 2])', "fail", ""),
}


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_a_finding_of_the_wrong_shape_is_an_error_of_that_check_only(tmp_path, name):
    body, status, words = FINDINGS[name]
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    write_pack(pack, "bad.py", f"""
        from distdoctor.api import check, fail
        from distdoctor.model import Finding, Status

        class Bad:
            def __str__(self):
                raise RuntimeError("no")

        @check("hostile.shape", title="A finding of the wrong shape")
        def shape(ctx):
            {body}

        CHECKS = [shape]
    """)
    result = dd("check", "--checks-dir", str(pack), "--only", "hostile.*", "--json", "--timeout", "20", timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    checks = {c["id"]: c for c in strict_json(result.stdout)["checks"]}
    assert checks["hostile.quick"]["status"] == "ok"
    assert checks["hostile.shape"]["status"] == status, checks["hostile.shape"]
    assert words in checks["hostile.shape"]["findings"][0]["summary"]


LOOPING_STR = """
    from distdoctor.api import check, fail

    class Forever:
        def __str__(self):
            while True:
                pass

    @check("hostile.loop-str", title="A summary whose __str__ never returns", timeout=3)
    def loop_str(ctx):
        yield fail(Forever())

    CHECKS = [loop_str]
"""


def test_a_summary_whose_str_never_returns_is_a_timeout_within_the_bound(tmp_path):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    write_pack(pack, "loop.py", LOOPING_STR)
    result = dd("check", "--checks-dir", str(pack), "--only", "hostile.*", "--json", "--timeout", "8", timeout=40)
    assert result.elapsed < 25
    assert result.returncode == EXIT_ERROR, result.stderr
    checks = {c["id"]: c for c in strict_json(result.stdout)["checks"]}
    assert checks["hostile.quick"]["status"] == "ok" and checks["hostile.loop-str"]["status"] == "timeout"


def test_sigterm_is_honoured_while_a_str_loops(tmp_path):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    write_pack(pack, "loop.py", LOOPING_STR.replace("timeout=3", "timeout=60"))
    marker = uuid.uuid4().hex
    env = {**os.environ, "XDG_CONFIG_HOME": "/nonexistent-distdoctor-config", MARKER_VAR: marker}
    proc = subprocess.Popen([*distdoctor_argv(), "check", "--checks-dir", str(pack), "--only", "hostile.*", "--json",
                             "--timeout", "100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        time.sleep(4)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = _wait_for_environment_gone(marker)
    assert not left
    assert time.monotonic() - sent < 10
    assert proc.returncode == EXIT_TERMINATED, err.decode(errors="replace")
    checks = {c["id"]: c for c in strict_json(out.decode())["checks"]}
    assert checks["hostile.loop-str"]["status"] == "error"


@pytest.mark.parametrize("checks_value", ["itertools.repeat(0)", "itertools.count()", "(x for x in iter(int, 1))",
                                          "{'a': 1}", "42", "itertools.repeat(quick)"])
def test_a_checks_that_never_ends_or_is_not_a_list_is_one_error(tmp_path, checks_value):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    write_pack(pack, "endless.py", f"""
        import itertools
        from distdoctor.api import check, ok

        @check("hostile.other", title="t")
        def quick(ctx):
            yield ok("fine")

        CHECKS = {checks_value}
    """)
    result = dd("check", "--checks-dir", str(pack), "--only", "hostile.quick,core", "--json", "--timeout", "20",
                timeout=60, memory=1024 ** 3)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_ERROR
    checks = {c["id"]: c for c in strict_json(result.stdout)["checks"]}
    assert checks["hostile.quick"]["status"] == "ok"
    assert checks["core.check-packs"]["status"] == "error"


def test_a_multiprocessing_child_of_a_pack_does_not_hold_the_exit(tmp_path):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    write_pack(pack, "child.py", """
        import multiprocessing, time
        from distdoctor.api import check, ok

        @check("hostile.child", title="Starts a child that never ends")
        def child(ctx):
            multiprocessing.Process(target=time.sleep, args=(3600,)).start()
            yield ok("started")

        CHECKS = [child]
    """)
    result = dd("check", "--checks-dir", str(pack), "--only", "hostile.*", "--json", "--timeout", "20", timeout=40)
    assert result.elapsed < 25
    assert "Traceback" not in result.stderr
    assert {c["id"]: c["status"] for c in strict_json(result.stdout)["checks"]}["hostile.child"] == "ok"
