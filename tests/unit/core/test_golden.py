"""The golden runner: every capture tests/data/parsers.toml names, parsed by the parser named
beside it, equals the expected parse kept beside the capture (<capture>.parsed.json). Adding a
capture needs no test code: see tests/harness/golden.py."""

from __future__ import annotations

import os

import pytest

from tests.harness import golden

CAPTURES = golden.captures()


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda c: c.name)
def test_capture_parses_as_expected(capture):
    assert os.path.exists(capture.expected_path), \
        f"no expected parse: python -m tests.harness.golden write {os.path.relpath(capture.path)}"
    assert golden.parse(capture) == golden.expected(capture)


def test_every_expected_parse_has_its_capture():
    """A renamed or removed capture does not leave an expected parse that nothing compares."""
    wanted = {c.expected_path for c in CAPTURES}
    orphans = []
    for dirpath, _dirs, files in os.walk(golden.DATA):
        orphans += [os.path.relpath(os.path.join(dirpath, f), golden.DATA) for f in files
                    if f.endswith(golden.SUFFIX) and os.path.join(dirpath, f) not in wanted]
    assert orphans == []


def test_every_folder_of_the_table_has_captures():
    """A pattern that matches nothing (a typo, a moved folder) is not a silent pass."""
    names = {c.name for c in CAPTURES}
    import fnmatch

    for folder, patterns in golden.table().items():
        for pattern in patterns:
            prefix = "" if folder == "." else folder + "/"
            assert fnmatch.filter(names, prefix + pattern), (folder, pattern)


def test_a_parse_that_differs_fails(tmp_path):
    """The comparison is not vacuous: one changed value in an expected parse is a difference."""
    capture = next(c for c in CAPTURES if c.name.startswith("slurm/scontrol_show_node_drained"))
    want = golden.expected(capture)
    assert golden.parse(capture) == want
    assert golden.parse(capture) != {**want, "state": "IDLE"}


def test_jsonable_names_what_it_cannot_write():
    with pytest.raises(TypeError, match="golden.py"):
        golden.jsonable(object())
    assert golden.jsonable({("GPU0", "GPU1"): (1, 2.5, float("nan"))}) == {"('GPU0', 'GPU1')": [1, 2.5, "nan"]}
