"""`distdoctor compare` as a user runs it: saved report files in, one report out."""

import json
import os
import subprocess

import pytest

from tests.harness.reports import fleet
from tests.conftest import distdoctor_argv, load_report


def _save(tmp_path, reports):
    paths = []
    for name, doc in reports.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def _run(*args, timeout=60):
    return subprocess.run(distdoctor_argv() + list(args), check=False, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, NO_COLOR="1", COLUMNS="120"))


def test_compare_files_names_the_odd_node_as_json(tmp_path):
    paths = _save(tmp_path, fleet(5, gpu004={"nccl.version": "2.18.3"}))
    out = _run("compare", "--format", "json", *paths)
    assert out.returncode == 1, out.stderr
    doc = load_report(out.stdout)
    assert doc["command"] == "compare"
    assert doc["cluster"]["outliers"] == "gpu004"
    (diff,) = doc["cluster"]["differences"]
    assert diff["summary"] == "NCCL version differs: 2.18.3 on gpu004 (the other 4 nodes have 2.21.5)"


def test_compare_a_saved_directory_on_the_console(tmp_path):
    _save(tmp_path, fleet(3, gpu002={"shm.size": 67108864}))
    out = _run("compare", str(tmp_path))
    assert out.returncode == 0, out.stderr  # a /dev/shm difference is a WARN
    assert out.stdout.startswith("3 nodes, 1 outlier (gpu002)")
    assert "ssh gpu002 mount -o remount,size=68719476736 /dev/shm" in out.stdout


def test_compare_expect_from_the_command_line(tmp_path):
    paths = _save(tmp_path, fleet(3))
    out = _run("compare", "--json", "--expect", "gpu.count=4", *paths)
    assert out.returncode == 1
    doc = load_report(out.stdout)
    assert doc["cluster"]["outliers"] == "gpu[001-003]"
    assert [d["basis"] for d in doc["cluster"]["differences"]] == ["expected"]


def test_compare_a_real_check_report_with_itself_renamed(tmp_path):
    """A report `check` really wrote, and a copy claiming another host: both read, and the
    copy's inventory still presents this host's hostname and NCCL host hash: one host to NCCL."""
    real = tmp_path / "real.json"
    done = _run("check", "--format", "json", "--only", "core,net", "-o", str(real), timeout=120)
    assert done.returncode in (0, 1, 2), done.stderr
    doc = json.loads(real.read_text())
    doc["host"] = "other-node"
    (tmp_path / "copy.json").write_text(json.dumps(doc))
    out = _run("compare", "--json", str(real), str(tmp_path / "copy.json"))
    report = load_report(out.stdout)
    assert report["cluster"]["answered"] == 2 and set(report["nodes"]) == {doc["host"], json.loads(real.read_text())["host"]}
    shared = {d["fact"] for d in report["cluster"]["differences"] if d["basis"] == "duplicate"}
    assert "host.name" in shared and out.returncode == 1


def test_compare_bad_files_is_a_clear_error_naming_each_file(tmp_path):
    good = _save(tmp_path, fleet(2))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("srun: error: task 3 launch failed\n")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"name": "not us"}))
    missing = tmp_path / "nope.json"
    out = _run("compare", *good, str(garbage), str(other), str(missing))
    assert out.returncode == 64
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert f"{garbage}: output is not a distdoctor report (not JSON" in out.stderr
    assert f"{other}: output is not a distdoctor report" in out.stderr
    assert f"{missing}: no such file" in out.stderr


def test_compare_bad_expect_is_a_usage_error(tmp_path):
    out = _run("compare", "--expect", "gpu.count", *_save(tmp_path, fleet(2)))
    assert out.returncode == 64 and "write FACT=VALUE" in out.stderr


def test_fail_on_warn_makes_a_warning_difference_fail(tmp_path):
    paths = _save(tmp_path, fleet(3, gpu002={"shm.size": 67108864}))
    assert _run("compare", *paths).returncode == 0
    assert _run("compare", "--fail-on", "warn", *paths).returncode == 1


def test_compare_expect_table_from_the_config_file(tmp_path):
    from distdoctor.config import Config

    if not hasattr(Config(), "expect"):
        pytest.skip("this tree's config has no [expect] table yet")
    paths = _save(tmp_path, fleet(3, gpu003={"gpu.driver": "535.54.03"}))
    cfg = tmp_path / "site.toml"
    cfg.write_text('[expect]\n"gpu.driver" = "535.54.03"\n"gpu.count" = 8\n')
    out = _run("compare", "--json", "--config", str(cfg), *paths)
    doc = load_report(out.stdout)
    (diff,) = doc["cluster"]["differences"]
    assert diff["basis"] == "expected" and diff["outliers"] == "gpu[001-002]" and out.returncode == 1


def test_reports_that_share_a_hostname_get_no_clush_to_their_file_names(tmp_path):
    """Two reports from one host (or from cloned nodes) are named by file: a fix once read
    `clush -w /tmp/r[1-2].json -- ...`, a command that runs nowhere. It is a comment now, with
    the command to run on each of those nodes."""
    from tests.harness.reports import node_report

    docs = {"a": node_report("gpu001"), "b": node_report("gpu001", inventory={"shm.size": 67108864}),
            "c": node_report("gpu001")}
    for doc in docs.values():
        doc["inventory"].update({"host.boot_id": "boot-1", "host.machine_id": "mid-1"})
    paths = _save(tmp_path, docs)
    out = _run("compare", *paths)
    assert out.returncode == 1, out.stderr  # the shared hostname is a FAIL
    fixes = [line.strip()[2:] for line in out.stdout.splitlines() if line.strip().startswith("$ ")]
    assert fixes and not any(line.startswith(("clush", "ssh")) for line in fixes), fixes
    assert not any(tmp_path.name in line and not line.startswith("#") for line in fixes), fixes
    assert "#   mount -o remount,size=68719476736 /dev/shm" in fixes
    # one hostname, one boot id, one machine id: one machine (or its namespaces), not a cloned
    # image, so no node's machine id is renewed; the hostname's finding says the rest
    assert not any("machine-id" in line for line in fixes), fixes
    assert any(line.startswith("# a boot id cannot be changed") for line in fixes), fixes


def test_a_hostile_hostname_in_a_report_never_reaches_a_command(tmp_path):
    """A report is anyone's JSON: a hostname with a `;` or a newline, or a value with shell
    syntax, must not turn a pasted fix into `clush -w gpu3;reboot -- ...` (operators paste as
    root). Those nodes get a comment with the command; the plain-named odd node keeps its ssh."""
    from tests.harness.reports import node_report

    shm = {"shm.size": 67108864}
    docs = {f"r{i}": node_report(f"gpu00{i}") for i in range(1, 5)}
    docs["r5"] = node_report("gpu005", inventory=shm)
    docs["r6"] = node_report("gpu006;reboot", inventory=shm)
    docs["r7"] = node_report("gpu007\nreboot", inventory=shm)
    docs["r8"] = node_report("gpu008", inventory={"torch.version": "2.3.0; reboot"})
    paths = _save(tmp_path, docs)
    for args in ((), ("--json",)):
        out = _run("compare", *args, *paths)
        assert out.returncode == 1, out.stderr
        if args:
            fixes = [line for d in load_report(out.stdout)["cluster"]["differences"] for line in d["fix"].splitlines()]
        else:
            fixes = [line.strip()[2:] for line in out.stdout.splitlines() if line.strip().startswith("$ ")]
        commands = [line for line in fixes if not line.startswith("#")]
        assert "ssh gpu005 mount -o remount,size=68719476736 /dev/shm" in commands, fixes
        assert not any("reboot" in line for line in commands), commands
        assert any("gpu006;reboot" in line and "not host names" in line for line in fixes), fixes
        assert not any(line.strip() == "reboot" or line.startswith("reboot") for line in out.stdout.splitlines())
