"""checks/manifest.json: the built-in pack's metadata, so that loading the pack imports no check
module. It must be fresh, a check's module must be imported only when the check runs, and a
stale, missing or malformed manifest must never give wrong results or a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

import distdoctor.checks as pack
from distdoctor.checks import host as host_checks
from distdoctor.docgen import manifest
from distdoctor.model import Status
from distdoctor.testing import FakeHost, run_check

from tests.conftest import REPO

MIB = 1024 * 1024
SHM_ID = "host.shm-size"
# /dev/shm too small: a WARN with a fix, so the comparison covers every field of a finding.
SHM_DISK = {"/dev/shm": (64 * MIB, 0, 64 * MIB)}


def _fresh(code: str) -> dict:
    """Run code in a new interpreter (this one has imported every check module already) and
    return the JSON it prints last."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


_CHECK_MODULES = "sorted(m for m in sys.modules if m.startswith('distdoctor.checks.'))"


def _shm_findings_in_fresh(load_pack: str) -> dict:
    return _fresh(f"""
import json, sys
{load_pack}
from distdoctor.testing import FakeHost, run_check
before = {_CHECK_MODULES}
[info] = [c for c in pack.CHECKS if c.id == {SHM_ID!r}]
findings = run_check(info, FakeHost(disk={SHM_DISK!r}))
print(json.dumps({{"before": before, "after": {_CHECK_MODULES}, "count": len(pack.CHECKS),
                  "findings": [f.to_dict() for f in findings],
                  "host_file": sys.modules["distdoctor.checks.host"].__file__}}))
""")


def _real_shm_findings() -> list[dict]:
    return [f.to_dict() for f in run_check(host_checks.shm_size, FakeHost(disk=SHM_DISK))]


def test_committed_manifest_is_fresh():
    with open(os.path.join(REPO, "checks", "manifest.json"), encoding="utf-8") as fh:
        committed = fh.read()
    assert committed == manifest(), f"checks/manifest.json is stale: run `{pack.REGENERATE}`"


def test_loading_the_pack_imports_no_check_module_and_a_check_imports_only_its_own():
    seen = _shm_findings_in_fresh("import distdoctor.checks as pack")
    assert seen["count"] == len(pack._from_modules())
    assert seen["before"] == []
    assert seen["after"] == ["distdoctor.checks.host"]
    assert seen["findings"] == _real_shm_findings()
    assert seen["findings"][0]["status"] == "warn"


def test_the_registry_loads_the_pack_without_importing_check_modules():
    seen = _fresh("""
import json, sys
from distdoctor import registry
loaded = registry.load(env={})
print(json.dumps({"problems": loaded.problems, "count": len(loaded.checks), "modules": %s}))
""" % _CHECK_MODULES)
    assert seen["problems"] == [] and seen["count"] >= len(pack.CHECKS)
    assert seen["modules"] == []


def test_lazy_checks_work_from_the_source_tree_fallback():
    """An uninstalled clone: the registry loads checks/__init__.py under the name
    distdoctor.checks; a check's module must then come from the same checks/ folder."""
    seen = _shm_findings_in_fresh("from distdoctor import registry\npack = registry._source_tree_builtin()")
    assert seen["before"] == [] and seen["after"] == ["distdoctor.checks.host"]
    assert os.path.dirname(seen["host_file"]) == os.path.join(REPO, "checks")
    assert seen["findings"] == _real_shm_findings()


def _write_manifest(tmp_path, change) -> str:
    with open(pack.MANIFEST, encoding="utf-8") as fh:
        doc = json.load(fh)
    change(doc["checks"])
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _entry(checks: list[dict], check_id: str = SHM_ID) -> dict:
    return next(e for e in checks if e["id"] == check_id)


def _only(infos, check_id: str = SHM_ID):
    return next(c for c in infos if c.id == check_id)


def test_a_module_edited_since_the_manifest_was_generated_is_imported_instead(tmp_path, monkeypatch):
    """A check added to an existing module (or a title changed) without regenerating: the
    module's hash differs, so every module is imported and nothing listed is stale or missing."""
    path = _write_manifest(tmp_path, lambda checks: _entry(checks).update(title="An old title"))
    assert _only(pack.load(path)).title == "An old title"  # hashes match: the manifest is trusted
    real = pack.module_hashes()
    monkeypatch.setattr(pack, "module_hashes", lambda: {**real, "host": "0" * 64})
    _falls_back(pack.load(path))
    assert _only(pack.load(path)).title != "An old title"


def test_an_id_the_module_does_not_define_is_an_error_that_says_how_to_regenerate(tmp_path):
    path = _write_manifest(tmp_path, lambda checks: _entry(checks).update(id="host.renamed-away"))
    info = _only(pack.load(path), "host.renamed-away")
    with pytest.raises(pack.StaleManifest, match="distdoctor.checks.host, which does not define it") as caught:
        info.func(None)
    assert pack.REGENERATE in str(caught.value)
    # Through the engine, as in a run: one ERROR finding naming the cause, not a traceback.
    [finding] = run_check(info, FakeHost(disk=SHM_DISK))
    assert finding.status is Status.ERROR and "check manifest" in finding.summary


def test_parallel_first_calls_resolve_once_and_all_run():
    [info] = [c for c in pack.load() if c.id == SHM_ID]
    host = FakeHost(disk=SHM_DISK)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(run_check(info, host))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 8 and all([f.to_dict() for f in r] == _real_shm_findings() for r in results)
    assert info.func._func is host_checks.shm_size.func


def _falls_back(infos) -> None:
    assert sorted(c.id for c in infos) == sorted(c.id for c in pack.CHECKS)
    assert not any(isinstance(c.func, pack._LazyCheck) for c in infos)


@pytest.mark.parametrize("text", ["", "{not json", "[]", '{"checks": [{"id": "host.shm-size"}]}', "\udcff"],
                         ids=["empty", "not-json", "no-checks", "missing-fields", "not-utf8"])
def test_a_malformed_manifest_falls_back_to_importing_every_module(tmp_path, text):
    path = tmp_path / "manifest.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    _falls_back(pack.load(str(path)))


def test_a_missing_manifest_falls_back(tmp_path):
    _falls_back(pack.load(str(tmp_path / "absent.json")))


def test_a_module_missing_from_the_manifest_falls_back(tmp_path):
    """A new module file whose checks the manifest does not list yet: import them all rather
    than leave its checks out."""
    with open(pack.MANIFEST, encoding="utf-8") as fh:
        doc = json.load(fh)
    doc["checks"] = [e for e in doc["checks"] if e["module"] != "node"]
    del doc["modules"]["node"]  # as generated before node.py existed
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(doc))
    _falls_back(pack.load(str(path)))


def test_a_module_field_that_is_not_a_name_falls_back(tmp_path):
    """A list where the module's name belongs once raised TypeError (unhashable) out of load."""
    _falls_back(pack.load(_write_manifest(tmp_path, lambda checks: _entry(checks).__setitem__("module", ["host"]))))
