"""Oversized and non-finite inputs from every source (command line, config file, environment):
each ends in the documented exit code or a finding naming the input, within a bound on time
and under an address-space limit, and JSON on stdout stays strict."""

from __future__ import annotations

import json

import pytest

from distdoctor import hostlist, limits
from distdoctor.model import EXIT_USAGE
from distdoctor.parsers import ParseError
from distdoctor.parsers.slurm import parse_counts
from tests.harness.hostile import QUICK_PACK, dd, strict_json, write_pack


NO_SLURM_ENV = {"SLURM_JOB_ID": "", "SLURM_JOB_NODELIST": "", "SLURM_TASKS_PER_NODE": ""}


def findings(doc, check_id):
    return [f for c in doc["checks"] if c["id"] == check_id for f in c["findings"]]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e400", "86401", "abc", "0x10"])
def test_timeout_on_the_command_line_must_be_a_positive_finite_number(tmp_path, value):
    result = dd("check", f"--timeout={value}", "--format", "json", timeout=30)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "--timeout" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("value", ["0", "-3", "100000", "nan"])
def test_jobs_on_the_command_line_is_range_checked(value):
    result = dd("check", f"--jobs={value}", timeout=30)
    assert result.returncode == EXIT_USAGE and "--jobs" in result.stderr


@pytest.mark.parametrize("command", [["nccl-test", "--timeout", "nan"], ["nccl-test", "--timeout", "-1"],
                                     ["nccl-test", "--local", "100000"], ["nccl-test", "--iters", "0"]])
def test_nccl_test_numbers_are_range_checked_before_anything_starts(command):
    result = dd(*command, timeout=30)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("toml,named", [
    ("[run]\ntimeout = nan\n", "run.timeout"),
    ("[run]\ntimeout = inf\n", "run.timeout"),
    ("[run]\ntimeout = -1\n", "run.timeout"),
    ("[run]\njobs = 0\n", "run.jobs"),
    ('[checks."reach.hosts"]\ntimeout = -1\n', 'checks."reach.hosts".timeout'),
    ('[checks."reach.hosts"]\ntimeout = 0\n', 'checks."reach.hosts".timeout'),
    ('[checks."reach.hosts"]\nprobe_timeout = nan\n', 'checks."reach.hosts".probe_timeout'),
    ('[checks."reach.master-port"]\nprobe_timeout = -inf\n', 'checks."reach.master-port".probe_timeout'),
    ('[checks."gpu.inventory"]\nexpected_count = inf\n', 'checks."gpu.inventory".expected_count'),
    ('[checks."reach.hosts"]\nports = [22, nan]\n', 'checks."reach.hosts".ports'),
])
def test_config_numbers_must_be_finite_and_in_range(tmp_path, toml, named):
    config = tmp_path / "config.toml"
    config.write_text(toml)
    result = dd("check", "--config", str(config), "--format", "json", timeout=30)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert named in result.stderr and str(config) in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("depth", [5000, 100000])
def test_deeply_nested_toml_is_a_usage_error_not_a_recursion_error(tmp_path, depth):
    config = tmp_path / "config.toml"
    config.write_text("x = " + "[" * depth + "]" * depth + "\n")
    result = dd("check", "--config", str(config), timeout=30)
    assert result.returncode == EXIT_USAGE, result.stderr[-500:]
    assert "RecursionError" not in result.stderr and "Traceback" not in result.stderr


def test_a_nan_timeout_in_a_pack_is_refused_and_the_run_stays_bounded(tmp_path):
    pack = write_pack(tmp_path / "pack", "nan.py", """
        from distdoctor.api import check, ok

        @check("hostile.nan-timeout", title="A check whose deadline is not a number", timeout=float("nan"))
        def nan_timeout(ctx):
            yield ok("never run")

        CHECKS = [nan_timeout]
    """)
    write_pack(pack, "quick.py", QUICK_PACK)
    result = dd("check", "--checks-dir", str(pack), "--only", "hostile.*", "--format", "json", timeout=30)
    doc = strict_json(result.stdout)
    packs = " ".join(f["summary"] for f in findings(doc, "core.check-packs"))
    assert "hostile.nan-timeout" in packs and "timeout" in packs
    assert [c["id"] for c in doc["checks"] if c["id"].startswith("hostile.")] == ["hostile.quick"]


def test_non_finite_evidence_from_a_check_is_strict_json(tmp_path):
    pack = write_pack(tmp_path / "pack", "nan.py", """
        from distdoctor.api import check, warn

        @check("hostile.nan-evidence", title="A check with non-finite and odd evidence")
        def nan_evidence(ctx):
            yield warn("odd numbers", evidence={"nan": float("nan"), "inf": [float("inf"), -float("inf")],
                                                "object": object(), "deep": [[[[1.5]]]]})
            nested = []
            for _ in range(100000):
                nested = [nested]
            itself = {}
            itself["itself"] = itself
            yield warn("deep evidence", evidence={"nested": nested, "itself": itself})

        CHECKS = [nan_evidence]
    """)
    result = dd("check", "--checks-dir", str(pack), "--only", "hostile.*", "--format", "json", timeout=30)
    doc = strict_json(result.stdout)
    first, deep = [f["evidence"] for f in findings(doc, "hostile.nan-evidence")]
    assert first["nan"] == "nan" and first["inf"] == ["inf", "-inf"] and first["deep"] == [[[[1.5]]]]
    assert "<nested too deeply>" in json.dumps(deep["nested"]) and "<nested too deeply>" in json.dumps(deep["itself"])


SLURM_ATTACKS = [
    ("SLURM_TASKS_PER_NODE", "2(x100000000)"),
    ("SLURM_TASKS_PER_NODE", "1(x9)," * 10000 + "1"),  # 90,001 nodes in 60 KB
    ("SLURM_TASKS_PER_NODE", "99999999999999999999(x2)"),
    ("SLURM_JOB_NODELIST", "n[0-999999999]"),
    ("SLURM_JOB_NODELIST", "a[0-999]b[0-999]c[0-999]"),
    # 100 KB: one environment string may not exceed 128 KB (MAX_ARG_STRLEN)
    ("SLURM_JOB_NODELIST", "n[" + "9" * 100000 + "]"),
    ("SLURM_NTASKS", "9" * 100000),
    ("SLURM_NTASKS", "4294967296000"),
    ("SLURM_NTASKS", "²"),
]


@pytest.mark.parametrize("name,value", SLURM_ATTACKS, ids=[f"{n}={v[:24]}" for n, v in SLURM_ATTACKS])
def test_oversized_slurm_variables_are_findings_naming_the_variable(name, value):
    env = {**NO_SLURM_ENV, "SLURM_JOB_ID": "77", name: value}
    result = dd("check", "--only", "slurm", "--format", "json", "--timeout", "30", env=env, timeout=40,
                memory=1024 ** 3)
    assert result.elapsed < 40
    doc = strict_json(result.stdout)
    summaries = [f["summary"] for f in findings(doc, "slurm.environment") if f["status"] == "fail"]
    assert any(s.startswith(f"{name}=") for s in summaries), summaries
    assert all(len(s) < 1000 for c in doc["checks"] for s in [f["summary"] for f in c["findings"]])
    assert len(result.stdout) < 1024 ** 2


@pytest.mark.parametrize("hosts", ["a[0-999]b[0-999]c[0-999]", "n[0-999999999]", "n[0-40000],m[0-40000]"])
def test_oversized_host_lists_on_the_command_line_are_findings(hosts):
    result = dd("check", "--only", "reach.hosts", "--hosts", hosts, "--format", "json", "--timeout", "30",
                timeout=40, memory=1024 ** 3)
    doc = strict_json(result.stdout)
    summaries = " ".join(f["summary"] for f in findings(doc, "reach.hosts"))
    assert "--hosts" in summaries and str(limits.MAX_HOSTS) in summaries


# The logic of the caps, without a process: cheap enough for every change.

@pytest.mark.parametrize("expr,first,last,count", [
    ("n[01-100]", "n01", "n100", 100),      # scontrol show hostlist prints these
    ("n[1-010]", "n1", "n10", 10),          # width of the lower bound, as hostlist.c
    ("n[001-10]", "n001", "n010", 10),
    ("n[0-65535]", "n0", "n65535", 65536),  # the largest range Slurm accepts
    ("r[1-2]n[08-11]", "r1n08", "r2n11", 8),
])
def test_hostlist_widths_and_the_largest_valid_range(expr, first, last, count):
    hosts = hostlist.expand(expr)
    assert (hosts[0], hosts[-1], len(hosts)) == (first, last, count)


@pytest.mark.parametrize("expr", ["n[0-65536]", "n[0-999999999]", "a[0-999]b[0-999]c[0-999]",
                                  "x[0-300]y[0-300]", ",".join(["h"] * 70000), "n[" + "1," * 70000 + "1]"])
def test_hostlist_caps_refuse_before_building(expr):
    with pytest.raises(hostlist.HostlistError, match=str(limits.MAX_HOSTS)):
        hostlist.expand(expr)


@pytest.mark.parametrize("value", ["2(x100000000)", "2(x65537)", "1(x40000),1(x40000)", "4294967294"])
def test_task_counts_are_capped(value):
    with pytest.raises(ParseError):
        parse_counts(value)


def test_task_counts_at_the_cap_are_valid():
    assert len(parse_counts("2(x65536)")) == limits.MAX_COUNT_ELEMENTS


@pytest.mark.parametrize("args,named", [
    (["--only", ","], "--only"),
    (["--only", " , ,"], "--only"),
    (["--skip", ","], "--skip"),
    (["--only", "gpu.invntory"], "gpu.inventory"),     # a typo: the close match is named
    (["--only", "slurm.environment,nosuch.check"], "nosuch.check"),
    (["--skip", "reach.hsots"], "reach.hosts"),
    (["--only", "zzz.*"], "zzz.*"),
])
def test_selections_that_name_nothing_are_usage_errors(args, named):
    result = dd("check", *args, "--format", "json", timeout=30)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert named in result.stderr and result.stdout == ""


@pytest.mark.parametrize("only", ["net.*", "slurm", "gpu.inventory,gpu.cuda-compat"])
def test_globs_areas_and_ids_select(only):
    result = dd("check", "--only", only, "--format", "json", timeout=60)
    doc = strict_json(result.stdout)
    assert doc["checks"] and "Traceback" not in result.stderr


@pytest.mark.parametrize("value,says", [("nan", "not an integer"), ("1e400", "not an integer"),
                                        ("9" * 5000, "not an integer"), ("-inf", "not an integer"),
                                        ("1", "InfiniBand/RoCE is off"), ("0x1", "InfiniBand/RoCE is off")])
def test_nccl_numeric_variables_are_read_as_nccl_reads_them(value, says):
    result = dd("check", "--only", "host.nccl-env", "--format", "json", env={"NCCL_IB_DISABLE": value}, timeout=30)
    doc = strict_json(result.stdout)
    summaries = [f["summary"] for f in findings(doc, "host.nccl-env") if f["subject"] == "NCCL_IB_DISABLE"]
    # Read as on, the variable is either in force or, with no InfiniBand device here, a note that
    # it has no effect (since 5ad0323); read as off it would be neither.
    on = says == "InfiniBand/RoCE is off" and "has no effect here" in (summaries or [""])[0]
    assert len(summaries) == 1 and (says in summaries[0] or on) and len(summaries[0]) < 300


def test_every_numeric_option_of_every_command_is_range_checked():
    """A bare int or float type lets nan, inf, 0 or -1 through (`--timeout nan` spun forever):
    every number an option takes goes through distdoctor.limits, in every command."""
    import argparse

    from distdoctor.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    bare = [f"{name} {action.option_strings[0]}" for name, command in sub.choices.items()
            for action in command._actions if action.type in (int, float)]
    assert not bare, bare
