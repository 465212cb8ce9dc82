"""`fleet --save DIR` in a directory where someone planted symlinks: at the temporary name the
old code used (`<node>.json.tmp<pid>`) and at the final name. The victim files keep their
content; each report is written whole under its own name."""

from __future__ import annotations

import json
import os

from distdoctor.crosscheck import fleet


def test_save_never_writes_through_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    out = tmp_path / "reports"
    out.mkdir()
    for pid in range(os.getpid() - 2, os.getpid() + 3):
        (out / f"node1.json.tmp{pid}").symlink_to(victim)
    (out / "node2.json").symlink_to(victim)
    fleet.save(str(out), {"node1": {"host": "node1"}, "node2": {"host": "node2"}, "../escape": {"host": "x"}})
    assert victim.read_text() == "root's file\n"
    assert json.loads((out / "node1.json").read_text()) == {"host": "node1"}
    assert not (out / "node2.json").is_symlink()
    assert json.loads((out / "node2.json").read_text()) == {"host": "node2"}
    assert not (tmp_path / "escape.json").exists()
    assert not [n for n in os.listdir(out) if n.startswith(".distdoctor-")]  # no temp file left
