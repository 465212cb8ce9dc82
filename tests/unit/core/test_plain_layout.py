"""The console view laid out without rich (render/layout.py, used whenever there are no escape
codes) is the same text that rich draws, character for character, for every kind of line the
view prints: long words, URLs, tabs, newlines, glyphs, tables that fit and tables that do not,
text rich must draw itself (wide characters), at widths from 20 to 160. A plain run imports no
rich at all, and no control character from a finding reaches the output."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distdoctor.crosscheck import nodes as cluster
from distdoctor.model import CheckRun, Finding, Report, RunContext, Status
from distdoctor.render import console, layout
from tests.harness.reports import fleet

WIDTHS = (20, 37, 80, 100, 160)

LONG = "x" * 130
TEXTS = [
    "no problems found",
    "NCCL would advertise veth12ab34 (a veth pair end): the other nodes cannot reach 10.244.3.7 over it",
    f"a word longer than any line: {LONG} and after it",
    "https://github.com/NVIDIA/nccl/issues/1234#issuecomment-1876543210-and-a-very-long-anchor-text-here",
    "  leading spaces, trailing spaces   ",
    "tabs\tin\tthe\ttext and\ta      run of spaces",
    "first line\nsecond line that is a good deal longer than the first one, long enough to wrap at 37\n\nafter a blank",
    "glyphs ✓ ✗ ⏱ · — → × é and ascii",
    "wide 漢字 characters and emoji 🚀 are drawn by rich itself",
    "",
]


def _report(texts=TEXTS, table=None) -> Report:
    runs = []
    statuses = [Status.OK, Status.WARN, Status.FAIL, Status.SKIP, Status.ERROR, Status.TIMEOUT]
    for i, text in enumerate(texts):
        status = statuses[i % len(statuses)]
        findings = [Finding(status, text, subject=f"s{i}", explanation=texts[(i + 1) % len(texts)],
                            fix=f"export NCCL_SOCKET_IFNAME=eth{i}   # {text[:60]}" if status is not Status.OK else "",
                            evidence={"table": table} if table and i == 1 else {}),
                    Finding(Status.OK, f"second finding of {i}: {text[:40]}")]
        runs.append(CheckRun(f"area{i % 3}.check-{i}", f"Title {i}: {text[:50]}", (), status, tuple(findings), 0.01))
    runs += [CheckRun(f"slurm.c{i}", f"skipped {i}", (), Status.SKIP, (Finding(Status.SKIP, "not inside a Slurm job"),), 0)
             for i in range(3)]
    context = RunContext("slurm", "Slurm job 42, step 0", rank=1, world_size=16, local_rank=1)
    return Report("0.1.0", "gpu-node-0042", context, "2026-11-24T00:00:00.000Z", 1.25, tuple(runs))


def _both(subject, width, verbose=False, draw=None):
    plain = console.to_text(subject, width, False, verbose, draw)
    drawn = console.to_text(subject, width, False, verbose, draw, use_rich=True)
    return plain, drawn


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("verbose", [False, True])
def test_a_report_is_the_same_text_with_and_without_rich(width, verbose):
    table = {"columns": ["GPU", "name", "bus id"], "rows": [["0", "NVIDIA H100 80GB HBM3", "00000000:18:00.0"],
                                                          ["1", "NVIDIA H100 80GB HBM3", "00000000:2A:00.0"]]}
    plain, drawn = _both(_report(table=table), width, verbose)
    assert plain == drawn
    assert "How to fix" in plain and "rank 1 of 16" in plain


@pytest.mark.parametrize("width", WIDTHS)
def test_tables_that_do_not_fit_or_hold_odd_cells_are_still_the_same(width):
    for table in ({"columns": ["a", "b"], "rows": [["x" * 90, "y" * 40]]},
                  {"columns": ["GPU", "[bold]markup[/bold]"], "rows": [["0", "[red]not markup"]]},
                  {"columns": ["one"], "rows": [["two\nlines"], ["漢字"]]},
                  {"columns": ["GPU", "state"], "rows": []}):
        plain, drawn = _both(_report(TEXTS[:3], table=table), width, verbose=True)
        assert plain == drawn
    assert "[red]not markup" in console.to_text(_report(TEXTS[:3], table={"columns": ["c"], "rows": [["[red]not markup"]]}),
                                                200, False, True)


@pytest.mark.parametrize("width", (40, 100))
def test_a_cluster_view_is_the_same_text_with_and_without_rich(width):
    view = cluster.build(fleet(12, gpu007={"net.if.eth0.mtu": 1500}, gpu011={"gpu.count": 7}))
    plain, drawn = _both(view, width, True, console.render_cluster)
    assert plain == drawn and "gpu007" in plain


_ALPHABET = st.sampled_from(list("abcdefghij ABC0123-_/.:,=") + [" ", "  ", "\t", "\n", "✓", "·", "é", "x" * 25, "漢"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(_ALPHABET, max_size=30).map("".join), st.sampled_from(["", "bold", "dim"])),
                min_size=1, max_size=4),
       st.integers(min_value=20, max_value=120), st.integers(min_value=0, max_value=6), st.booleans())
def test_any_line_is_laid_out_as_rich_lays_it_out(spans, width, indent, wrap):
    outputs = []
    for use_rich in (False, True):
        buf = io.StringIO()
        console.Page(buf, width, False, use_rich).line(spans, indent=indent, wrap=wrap)
        outputs.append(console._TRAILING.sub(r"\1", buf.getvalue()))
    assert outputs[0] == outputs[1]


def test_no_control_character_reaches_the_output_with_or_without_colour():
    hostile = "host \x1b]0;owned\x07name \x1b[31mred\x1b[0m carriage\rreturn bell\x07 nul\x00 del\x7f c1\x9b"
    report = _report([hostile], table={"columns": ["\x1b[2J"], "rows": [["\x1b[H"]]})
    assert "\x1b" not in console.to_text(report, 100, False, True)
    for color in (False, True):
        text = console.to_text(report, 100, color, True)
        assert "\x1b]" not in text and "\x00" not in text and "\x07" not in text
        assert "\r" not in text and "\x7f" not in text and "\x9b" not in text
        assert "\x1b[31mred" not in text and "\x1b[2J" not in text and "\x1b[H" not in text
    assert "host ]0;ownedname [31mred[0m carriagereturn bell nul del c1" in console.to_text(report, 200, False, True)


def test_layout_declines_what_it_cannot_measure():
    assert layout.plain_ok("eth0 ✓ · é") and not layout.plain_ok("漢字") and not layout.plain_ok("🚀")
    assert layout.table(["a", "b"], [["x" * 50, "y"]], 40) is None
    assert layout.table(["a", "b"], [["xx", "y"]], 40) == ["a   b", "xx  y"]
    assert layout.wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"] and layout.wrap("aaa bbb ccc", 6) == ["aaa ", "bbb ", "ccc"]
    assert layout.wrap("x" * 10, 4) == ["xxxx", "xxxx", "xx"]


def test_a_plain_report_does_not_import_rich():
    code = ("import sys, io\n"
            "from tests.unit.core.test_plain_layout import _report\n"
            "from distdoctor.render import console\n"
            "text = console.to_text(_report(), 100, False, True)\n"
            "assert 'How to fix' in text\n"
            "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # The wide characters in the corpus are drawn by rich: without them, no rich at all.
    code_ascii = code.replace("_report()", "_report([t for t in __import__('tests.unit.core.test_plain_layout', "
                                           "fromlist=['TEXTS']).TEXTS if console.layout.plain_ok(t)])")
    out = subprocess.run([sys.executable, "-c", code_ascii], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_an_odd_nodes_long_list_wraps_under_its_node():
    odd = {f"env.NCCL_VARIABLE_NUMBER_{i}": "x" for i in range(8)}
    view = cluster.build(fleet(4, gpu004=odd))
    text = console.to_text(view, 60, False, True, console.render_cluster)
    section = text.split("Odd nodes", 1)[1].splitlines()[1:]
    assert section[0].startswith("  gpu004: ") and len(section) > 1
    assert all(line.startswith("  ") for line in section if line), section
