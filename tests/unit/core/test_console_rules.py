"""One console rule for every command and destination: width ($COLUMNS, else the terminal's,
else 100), escape codes only on a terminal that is not a launched rank and has no NO_COLOR
(FORCE_COLOR wins), no trailing spaces, one "How to fix" item per distinct fix, and counts that
read as English."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from distdoctor.model import CheckRun, Finding, Report, RunContext, Status
from distdoctor.render.console import DEFAULT_WIDTH, choose, fix_items, to_text
from tests.conftest import distdoctor_argv
from tests.unit.core.test_tty import run_in_pty

ESCAPE = re.compile(r"\x1b\[")


@pytest.mark.parametrize("is_tty, term, env, expected", [
    (False, None, {}, (DEFAULT_WIDTH, False)),
    (True, 132, {}, (132, True)),
    (False, None, {"COLUMNS": "120"}, (120, False)),
    (True, 132, {"COLUMNS": "90"}, (90, True)),
    (True, 132, {"NO_COLOR": "1"}, (132, False)),
    (True, 80, {"OMPI_COMM_WORLD_RANK": "0"}, (80, False)),
    (True, 80, {"SLURM_PROCID": "3"}, (80, False)),
    (True, 80, {"PMI_RANK": "1"}, (80, False)),
    (True, 80, {"LOCAL_RANK": "0"}, (80, False)),
    (False, None, {"FORCE_COLOR": "1", "NO_COLOR": "1"}, (DEFAULT_WIDTH, True)),
    (False, None, {"COLUMNS": "junk"}, (DEFAULT_WIDTH, False)),
])
def test_the_rule(is_tty, term, env, expected):
    assert choose(is_tty, term, env) == expected


def _report(runs):
    return Report("0.1.0", "node7", RunContext("login", "login node"), "2026-11-21T00:00:00.000Z", 0.2, tuple(runs))


def _run(check_id, findings):
    return CheckRun(check_id, f"title of {check_id}", (), Status.WARN, tuple(findings), 0.01)


def test_thirty_identical_fixes_are_one_item_with_the_subjects_folded():
    fix = "ssh {node} true"
    same = [Finding(Status.WARN, f"memlock on node{i:02d} is 64 KiB", subject=f"node{i:02d}", fix="ulimit -l")
            for i in range(1, 31)]
    other = Finding(Status.WARN, "another problem", subject="x", fix=fix)
    report = _report([_run("host.memlock-limit", same), _run("host.other", [other])])
    assert [len(item) for item in fix_items(report)] == [30, 1]
    text = to_text(report, 100, False)
    fixes = text.split("How to fix", 1)[1]
    assert fixes.count("$ ulimit -l") == 1
    assert "the same fix for 30 findings: node[01-30]" in fixes
    assert "2. " in fixes and "3. " not in fixes


def test_skipped_after_a_failure_reads_after_the_step_that_failed():
    skipped = [CheckRun(f"nccl-test.{n}", f"title of {n}", (), Status.SKIP,
                        (Finding(Status.SKIP, "not run: an earlier step failed"),), 0.0) for n in ("a", "b")]
    failed = CheckRun("nccl-test.rendezvous", "Rendezvous", (), Status.FAIL, (Finding(Status.FAIL, "rank 1 never arrived"),),
                      0.0)
    text = to_text(_report([*skipped, failed]), 100, False)
    assert text.index("Rendezvous") < text.index("2 checks skipped: not run: an earlier step failed")


def test_at_80_columns_ids_stay_with_their_title_headings_hang_and_comments_wrap_at_words():
    comment = "# " + " ".join(["let the cluster network in on the rank zero node"] * 3)
    run = CheckRun("net.gloo-socket-interface", "Gloo will bind to an address the other nodes can reach", (),
                   Status.WARN, (Finding(Status.WARN, "hostname 'vm' resolves to 127.0.0.1 and gloo would advertise "
                                         "it to every other rank of the job", fix=comment + "\nexport X=1"),), 0.0)
    for use_rich in (False, True):
        lines = to_text(_report([run]), 80, False, use_rich=use_rich).splitlines()
        assert all(len(line) <= 80 for line in lines), lines
        # The id never on a line of its own, and a wrapped heading never back at column 0.
        assert not any(line.strip().startswith("[net.gloo-socket-interface]") for line in lines), lines
        heading = lines.index(next(line for line in lines if line.startswith("1. ")))
        assert lines[heading + 1].startswith("   ") and "[net.gloo-socket-interface]" in lines[heading + 1], lines
        fix = [line for line in lines if line.startswith("   $ ")]
        assert all(line.startswith("   $ # ") for line in fix[:-1]) and fix[-1] == "   $ export X=1", fix
        words = " ".join(line[len("   $ # "):] for line in fix[:-1]).split()
        assert words == comment[2:].split()  # wrapped at spaces: no word cut in two


def test_fixes_are_listed_worst_first_whatever_the_area():
    runs = [_run("gpu.a", [Finding(Status.WARN, "warn in gpu", fix="nvidia-smi")]),
            _run("host.b", [Finding(Status.WARN, "warn in host", fix="ulimit -l")]),
            CheckRun("net.c", "title of net.c", (), Status.FAIL, (Finding(Status.FAIL, "fail in net", fix="ip -br link"),),
                     0.01)]
    fixes = to_text(_report(runs), 100, False).split("How to fix", 1)[1]
    order = [fixes.index(word) for word in ("fail in net", "warn in gpu", "warn in host")]
    assert order == sorted(order) and "1. ✗ fail in net" in fixes


def test_plain_text_has_no_codes_and_no_trailing_spaces_and_colour_has_codes():
    report = _report([_run("host.a", [Finding(Status.WARN, "w" * 150, fix="unset X")])])
    plain = to_text(report, 100, False)
    assert not ESCAPE.search(plain)
    assert not [line for line in plain.splitlines() if line != line.rstrip()]
    assert max(len(line) for line in plain.splitlines()) <= 100
    coloured = to_text(report, 100, True)
    assert ESCAPE.search(coloured)
    assert not [line for line in coloured.splitlines() if re.search(r" (\x1b\[[0-9;]*m)*$", line)]


def test_one_check_is_one_check():
    text = to_text(_report([CheckRun("host.a", "A", (), Status.OK, (Finding(Status.OK, "fine"),), 0.01)]), 100, False)
    assert "\n1 check: 1 ok" in text and "1 checks" not in text


def _without_timing(text: str) -> str:
    return re.sub(r" in \d+\.\d\d s", "", text)


PACK = """
from distdoctor.api import check, warn

@check("site.long-lines", title="A check whose findings are longer than any width")
def long_lines(ctx):
    for i in range(3):
        yield warn(f"finding {i}: " + "word " * 40, subject=f"node{i}", fix="unset SOME_VARIABLE")
    yield warn("another " * 30, fix="# " + "a comment that is longer than the width " * 4)

CHECKS = [long_lines]
"""


def test_piped_stdout_and_o_file_are_the_same_text(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "NO_COLOR")}
    (tmp_path / "pack").mkdir()
    (tmp_path / "pack" / "site.py").write_text(PACK)
    argv = [*distdoctor_argv(), "check", "--checks-dir", str(tmp_path / "pack"), "--only", "site"]
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    out = tmp_path / "report.txt"
    subprocess.run([*argv, "-o", str(out)], capture_output=True, text=True, timeout=60, env=env)
    written = out.read_text()
    assert _without_timing(piped.stdout) == _without_timing(written)
    assert not ESCAPE.search(piped.stdout)
    assert not [line for line in piped.stdout.splitlines() if line != line.rstrip()]
    wrapped = [line for line in piped.stdout.splitlines() if not line.lstrip().startswith("$")]
    assert max(len(line) for line in wrapped) in range(DEFAULT_WIDTH - 10, DEFAULT_WIDTH + 1)
    assert piped.stdout.count("$ unset SOME_VARIABLE") == 1
    forced = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(env, FORCE_COLOR="1"))
    assert ESCAPE.search(forced.stdout)


def test_no_escape_codes_at_all_under_a_launcher_or_no_color_even_on_a_pty():
    assert ESCAPE.search(run_in_pty({}))  # a pty alone gets colour: the test can fail
    for env in ({"NO_COLOR": "1"}, {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}, {"SLURM_PROCID": "0"}):
        out = run_in_pty(env)
        assert "host.shm-size" in out, out
        assert not ESCAPE.search(out), (env, out[:300])


def test_every_report_command_has_the_same_output_options():
    import argparse

    from distdoctor.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        options = {o: a for a in command._actions for o in a.option_strings}
        if name in ("list", "explain"):
            continue  # not reports
        assert "-o" in options and "--output" in options, name
        if name in ("inventory", "health"):
            continue  # named facts, or a node's verdict for slurmd's log: not a report
        assert {"console", "json", "prometheus"} <= set(options["--format"].choices), name
        assert options["--json"].const == "json", name


def test_a_command_two_items_share_is_printed_once():
    from distdoctor.model import CheckRun, Finding, Report, RunContext, Status
    from distdoctor.render.console import to_text

    shared = "ssh gpu002 distdoctor check --only net.nccl-socket-interface"
    runs = (CheckRun("log.a", "a", (), Status.FAIL, (Finding(Status.FAIL, "first cause", fix=f"# why\n{shared}"),), 0),
            CheckRun("log.b", "b", (), Status.WARN, (Finding(Status.WARN, "second cause", fix=f"ip -br addr\n{shared}"),), 0))
    text = to_text(Report("0.1.0", "vm", RunContext("none", "none"), "2026-11-24T00:00:00.000Z", 0.1, runs), 100, False)
    assert text.count(f"$ {shared}") == 1
    assert f"$ # as in 1. above: {shared}" in text and "$ ip -br addr" in text
