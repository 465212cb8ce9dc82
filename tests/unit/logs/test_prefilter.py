"""The prefilter that picks the candidate lines of large inputs: `grep -E` (a real grep) must
pick exactly the lines Python's alternation picks, over every real log and paste in tests/data,
with the real catalogue's keywords (some hold regex metacharacters: `*** SIG`, `[127.`)."""

import os

import pytest

from distdoctor.host import Host
from distdoctor.logs import scan as scan_mod
from distdoctor.logs import signatures
from distdoctor.logs.scan import Prefilter, Scanner

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data")


def _real_text() -> bytes:
    chunks = []
    for root, _dirs, files in os.walk(DATA):
        for name in sorted(files):
            if name.endswith((".log", ".txt", ".out")):
                with open(os.path.join(root, name), "rb") as fh:
                    data = fh.read()
                if b"\0" not in data:
                    chunks.append(data if data.endswith(b"\n") else data + b"\n")
    return b"".join(chunks)


def test_grep_picks_the_lines_python_picks_on_every_real_log():
    words = Scanner(signatures.matcher(), use_grep=False).prefilter.regex.pattern
    assert b"\\*\\*\\*\\ SIG" in words or b"\\*\\*\\* SIG" in words  # a metacharacter is among them
    pre = Scanner(signatures.matcher(), host=Host()).prefilter
    data = _real_text()
    want = [raw for _n, raw in pre.lines(data)]
    assert len(want) > 500
    f = pre.start()
    assert f is not None
    f.feed(data)
    rows, code = f.close()
    got = [row.partition(b":")[2].rstrip(b"\n") for row in rows]
    assert code == 0
    assert got == want


@pytest.mark.parametrize("word", ["a.b", "x*y", "[127.", "(pid", "a|b", "^x", "y$", "q+r?", "{1}", "back\\slash"])
def test_every_metacharacter_is_literal(word):
    pre = Prefilter([word, "zzz"], Host())
    f = pre.start()
    text = f"one {word} two\nnot {word[:-1]}\naXb\n".encode()
    f.feed(text)
    rows, _code = f.close()
    assert [r.partition(b":")[2] for r in rows] == [f"one {word} two\n".encode()]


def test_block_tails_kept_past_their_budget_give_the_same_hang(tmp_path, monkeypatch):
    # the oldest kept tails are split at once when they outgrow TAIL_BUDGET: same verdict
    from distdoctor.logs.analysis import analyse

    from .stub_catalogue import STUB

    lines = [f"{r}: [2024-05-01 12:{s // 60:02d}:{s % 60:02d},000] step {s}" for s in range(120)
             for r in range(64) if not (r == 9 and s > 30)]
    path = tmp_path / "hang64.out"
    path.write_text("\n".join(lines) + "\n")
    verdicts = []
    for budget in (scan_mod.TAIL_BUDGET, 1):
        monkeypatch.setattr(scan_mod, "TAIL_BUDGET", budget)
        runs, _ok = analyse([str(path)], matcher=STUB, block=64 * 1024)
        verdicts.append({r.id: r for r in runs}["log.diagnosis"].findings[0].summary)
    assert verdicts[0] == verdicts[1]
    assert verdicts[0].startswith("rank 9 stopped logging first (rank 9 at 12:00:"), verdicts[0]
