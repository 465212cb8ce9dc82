"""Every file the package reads at run time is shipped: a wheel holds only the data files that
pyproject.toml's package-data names, and an editable install hides a missing one (found on a GPU
machine: `distdoctor log` from a wheel died on logs/exits.toml). .ci/test_layouts.py runs the
commands from a built wheel; this holds the patterns to the tree in the quick subset."""

from __future__ import annotations

import fnmatch
import os

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CODE = (".py", ".pyc")


def _data_files(top: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(os.path.join(REPO, top)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [os.path.relpath(os.path.join(root, f), os.path.join(REPO, top)) for f in files if not f.endswith(CODE)]
    return sorted(found)


def test_every_data_file_of_the_package_is_named_by_package_data():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        patterns = tomllib.load(fh)["tool"]["setuptools"]["package-data"]["distdoctor"]
    data = _data_files("distdoctor")
    assert "logs/exits.toml" in data and "logs/signatures.toml" in data  # the walk sees the tree
    missing = [f for f in data if not any(fnmatch.fnmatch(f, p) for p in patterns)]
    assert missing == [], f"add these to [tool.setuptools.package-data] in pyproject.toml: {missing}"


def test_the_check_pack_holds_no_data_file_that_would_be_left_behind():
    assert _data_files("checks") == []
