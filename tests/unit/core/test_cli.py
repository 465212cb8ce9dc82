"""`distdoctor check` end to end, as a user runs it: a real subprocess, real files."""

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, distdoctor_argv

SCHEMA = json.load(open(os.path.join(REPO, "docs", "report.schema.json")))
ANSI = re.compile(r"\x1b\[")


def dd(*args, env=None, timeout=60, cwd=None):
    full_env = dict(os.environ)
    full_env.pop("DISTDOCTOR_CHECKS_PATH", None)
    full_env["XDG_CONFIG_HOME"] = "/nonexistent-distdoctor-config"
    full_env.update(env or {})
    return subprocess.run([*distdoctor_argv(), *args], capture_output=True, text=True, timeout=timeout,
                          env=full_env, cwd=cwd)


def validate(doc):
    jsonschema.validate(doc, SCHEMA)
    return doc


def write_pack(directory, name, body):
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(textwrap.dedent(body))
    return directory


BAD_CHECKS = """
    import time
    from distdoctor.api import check, ok, fail

    @check("bad.raises", title="raises", timeout=5)
    def raises(ctx):
        raise ValueError("broken probe")

    @check("bad.hangs", title="hangs forever", timeout=1)
    def hangs(ctx):
        while True:
            time.sleep(1)

    @check("bad.junk", title="yields junk")
    def junk(ctx):
        yield 42

    @check("bad.prints", title="prints")
    def prints(ctx):
        print("{not json")
        yield ok("printed first")

    @check("bad.fails", title="fails", timeout=5)
    def fails(ctx):
        yield fail("the thing is broken", fix="fix-the-thing --now")

    CHECKS = [raises, hangs, junk, prints, fails]
"""


def test_console_report_reads_well(tmp_path):
    proc = dd("check", "--only", "host")
    assert proc.returncode in (0, 1), proc.stderr
    out = proc.stdout
    assert out.startswith("distdoctor ")
    assert "host" in out and "host.shm-size" in out
    assert re.search(r"\d+ checks: \d+ ok", out)
    assert not ANSI.search(out), "escape codes when piped"
    # fixes ("   $ ...") are never wrapped, so that they paste as one command
    assert max(len(line) for line in out.splitlines() if not line.startswith("   $ ")) <= 80


def test_json_validates_and_redacts(tmp_path):
    pack = write_pack(tmp_path / "packs", "secrets.py", """
        from distdoctor.api import check, ok

        @check("site.env-echo", title="echo env")
        def echo(ctx):
            yield ok("env seen", evidence={"env": {"HF_TOKEN": ctx.env.get("HF_TOKEN", ""), "RANK": "0"}})

        CHECKS = [echo]
    """)
    proc = dd("check", "--format", "json", "--checks-dir", str(pack), env={"HF_TOKEN": "hf_supersecret"})
    assert proc.returncode == 0, proc.stderr
    doc = validate(json.loads(proc.stdout))
    assert "hf_supersecret" not in proc.stdout
    [run] = [c for c in doc["checks"] if c["id"] == "site.env-echo"]
    assert run["findings"][0]["evidence"]["env"] == {"HF_TOKEN": "<redacted>", "RANK": "0"}
    assert doc["summary"]["ok"] == sum(1 for c in doc["checks"] if c["status"] == "ok")


def test_prometheus_parses_and_is_written_atomically(tmp_path):
    out = tmp_path / "distdoctor.prom"
    proc = dd("check", "--only", "host", "--format", "prometheus", "-o", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stdout == ""
    families = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    statuses = [s for s in families["distdoctor_check_status"].samples if s.value == 1]
    assert {s.labels["check"] for s in statuses} >= {"host.shm-size", "host.memlock-limit", "host.nccl-env"}
    assert families["distdoctor_run_duration_seconds"].samples[0].value > 0
    assert list(tmp_path.iterdir()) == [out], "temp file left behind"


def test_fault_pack_is_contained_and_run_ends_on_time(tmp_path):
    pack = write_pack(tmp_path / "packs", "bad.py", BAD_CHECKS)
    start = time.monotonic()
    proc = dd("check", "--checks-dir", str(pack), "--only", "bad", "--json", "--timeout", "20")
    elapsed = time.monotonic() - start
    assert elapsed < 15, f"run took {elapsed:.1f} s with a 1 s check deadline"
    doc = validate(json.loads(proc.stdout))  # the printing check did not corrupt stdout
    status = {c["id"]: c["status"] for c in doc["checks"]}
    assert status == {"bad.raises": "error", "bad.hangs": "timeout", "bad.junk": "error",
                      "bad.prints": "error", "bad.fails": "fail"}
    runs = {c["id"]: c for c in doc["checks"]}
    assert "ValueError: broken probe" in runs["bad.raises"]["findings"][0]["summary"]
    assert "{not json" in runs["bad.prints"]["findings"][-1]["evidence"]["printed"]
    assert proc.returncode == 1  # a FAIL outranks the errors for gating
    assert "Traceback" not in proc.stderr


def test_exit_codes(tmp_path):
    pack = write_pack(tmp_path / "packs", "codes.py", """
        import os
        from distdoctor.api import check, ok, warn

        @check("codes.one", title="one")
        def one(ctx):
            kind = ctx.env.get("DD_KIND")
            if kind == "warn":
                yield warn("meh")
            elif kind == "error":
                raise RuntimeError("x")
            else:
                yield ok("fine")

        CHECKS = [one]
    """)
    base = ("check", "--checks-dir", str(pack), "--only", "codes")
    assert dd(*base, env={"DD_KIND": "ok"}).returncode == 0
    assert dd(*base, env={"DD_KIND": "warn"}).returncode == 0
    assert dd(*base, "--fail-on", "warn", env={"DD_KIND": "warn"}).returncode == 1
    assert dd(*base, env={"DD_KIND": "error"}).returncode == 2
    assert dd("check", "--format", "yaml").returncode == 64
    assert dd("check", "--only", "no-such-check").returncode == 64


def test_broken_pack_is_one_error_and_the_rest_runs(tmp_path):
    pack = write_pack(tmp_path / "packs", "broken.py", "import no_such_module_anywhere\nCHECKS = []\n")
    proc = dd("check", "--checks-dir", str(pack), "--json")
    doc = validate(json.loads(proc.stdout))
    [packs] = [c for c in doc["checks"] if c["id"] == "core.check-packs"]
    assert packs["status"] == "error" and len(packs["findings"]) == 1
    assert "broken.py failed to load" in packs["findings"][0]["summary"]
    assert "no_such_module_anywhere" in packs["findings"][0]["summary"]
    assert any(c["id"] == "host.shm-size" for c in doc["checks"])
    assert proc.returncode == 2


def test_duplicate_id_names_both_sources(tmp_path):
    one = write_pack(tmp_path / "one", "a.py", """
        from distdoctor.api import check, ok
        @check("host.shm-size", title="impostor")
        def impostor(ctx):
            yield ok("x")
        CHECKS = [impostor]
    """)
    proc = dd("check", "--json", "--only", "host.shm-size", env={"DISTDOCTOR_CHECKS_PATH": str(one)})
    doc = validate(json.loads(proc.stdout))
    [packs] = [c for c in doc["checks"] if c["id"] == "core.check-packs"]
    message = packs["findings"][0]["summary"]
    assert "defined twice" in message and "entry point builtin" in message and str(one / "a.py") in message
    [shm] = [c for c in doc["checks"] if c["id"] == "host.shm-size"]
    assert shm["title"] != "impostor"


def test_site_pack_through_entry_points(tmp_path):
    """A pip-installed pack is found the same way as the built-in one: by its entry point."""
    site = tmp_path / "site"
    (site / "sitepack").mkdir(parents=True)
    (site / "sitepack" / "__init__.py").write_text(textwrap.dedent("""
        from distdoctor.api import check, ok
        @check("site.lustre-mounted", title="Lustre is mounted")
        def lustre(ctx):
            yield ok("mounted")
        CHECKS = [lustre]
    """))
    info = site / "sitepack-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sitepack\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[distdoctor.checks]\nsite = sitepack\n")
    # Beside, not instead of, the PYTHONPATH that made distdoctor importable (a --target install).
    proc = dd("list", "--json", env={"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))})
    assert proc.returncode == 0, proc.stderr
    rows = {r["id"]: r for r in json.loads(proc.stdout)}
    assert rows["site.lustre-mounted"]["source"] == "entry point site (sitepack)"
    assert rows["host.shm-size"]["source"] == "entry point builtin (distdoctor.checks)"


def test_malformed_config_is_one_line_with_file_line_key(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[run]\njobs = 4\ntimeout = "soon"\n')
    proc = dd("check", "--config", str(cfg))
    assert proc.returncode == 64
    assert proc.stderr.strip() == f"distdoctor: {cfg}:3: run.timeout must be an integer or a number, not 'soon'"
    cfg.write_text("[run\njobs = 4\n")
    proc = dd("check", "--config", str(cfg))
    assert proc.returncode == 64 and str(cfg) in proc.stderr and "line 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_params_unknown_keys_and_disable(tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text(textwrap.dedent("""
        [run]
        disable = ["host.nccl-env"]
        colour = "blue"

        [checks."host.shm-size"]
        min_bytes = 1099511627776000

        [checks."host.memlock-limit"]
        wibble = 1
    """))
    proc = dd("check", "--only", "host", "--json", "--config", str(cfg))
    doc = validate(json.loads(proc.stdout))
    ids = {c["id"]: c for c in doc["checks"]}
    assert "host.nccl-env" not in ids
    assert ids["host.shm-size"]["status"] == "warn"  # the parameter reached the check
    problems = [f["summary"] for f in ids["core.config"]["findings"]]
    assert any("unknown key run.colour" in p and f"{cfg}:4" in p for p in problems)
    assert any("unknown parameter 'wibble' for host.memlock-limit" in p for p in problems)


def test_unwritable_output_is_a_clear_error_and_no_file(tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "report.json"
    proc = dd("check", "--only", "host", "--json", "-o", str(missing))
    assert proc.returncode == 74
    assert "cannot write the report" in proc.stderr and "Traceback" not in proc.stderr
    assert not missing.parent.exists()
    locked = tmp_path / "ro"
    locked.mkdir()
    target = locked / "report.json"
    target.write_text("previous good report\n")
    locked.chmod(0o555)
    try:
        if os.geteuid() == 0:
            # root ignores directory permissions; a path through a regular file fails for root too
            bad = tmp_path / "file-not-dir"
            bad.write_text("x")
            proc = dd("check", "--only", "host", "--json", "-o", str(bad / "report.json"))
            assert proc.returncode == 74 and "cannot write the report" in proc.stderr
        else:
            proc = dd("check", "--only", "host", "--json", "-o", str(target))
            assert proc.returncode == 74
        assert target.read_text() == "previous good report\n"
    finally:
        locked.chmod(0o755)


def test_check_never_imports_torch(tmp_path):
    out = tmp_path / "r.json"
    code = ("import sys; from distdoctor.cli import main; "
            f"rc = main(['check', '--format', 'json', '-o', {str(out)!r}]); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().endswith("NO-TORCH"), proc.stdout + proc.stderr
    validate(json.loads(out.read_text()))


def test_list_explain_version():
    proc = dd("list")
    assert proc.returncode == 0 and "host.shm-size" in proc.stdout
    proc = dd("explain", "host.shm-size")
    assert proc.returncode == 0 and "min_bytes = 1073741824" in proc.stdout and "posix_fallocate" in proc.stdout
    assert dd("explain", "host.nope").returncode == 64
    proc = dd("--version")
    assert re.fullmatch(r"distdoctor \d+\.\d+\.\d+\n", proc.stdout)


def test_help_documents_exit_codes():
    proc = dd("check", "--help")
    assert "exit codes:" in proc.stdout and "64" in proc.stdout and "74" in proc.stdout


@pytest.mark.parametrize("env", [{"NO_COLOR": "1", "FORCE_COLOR": ""}, {}])
def test_no_escape_codes_without_a_terminal(env):
    proc = dd("check", "--only", "host", env=env)
    assert not ANSI.search(proc.stdout)


def test_a_parser_built_for_one_command_gives_that_command_every_option():
    import argparse

    from distdoctor.cli import build_parser

    def commands(parser):
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return sub.choices

    full = commands(build_parser())
    assert {"check", "nccl-test", "log", "fleet", "compare"} <= set(full)
    for name in list(full) + ["chek"]:
        one = commands(build_parser(name))
        assert tuple(one) == tuple(full)
        if name not in full:
            continue
        assert [a.option_strings or a.dest for a in one[name]._actions] == \
            [a.option_strings or a.dest for a in full[name]._actions], name
        assert one[name].format_help() == full[name].format_help()


def test_a_mistyped_command_is_refused_with_the_list_of_commands():
    proc = dd("chek")
    assert proc.returncode == 64 and "invalid choice: 'chek'" in proc.stderr and "nccl-test" in proc.stderr
    assert "Traceback" not in proc.stderr
