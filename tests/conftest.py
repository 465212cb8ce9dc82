import os
import shutil
import sys
import tempfile

import pytest

DATA = os.path.join(os.path.dirname(__file__), "data")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def data_path(*parts: str) -> str:
    return os.path.join(DATA, *parts)


def distdoctor_argv() -> list[str]:
    """How to run the installed console script: the one beside this interpreter if there is
    one, else `python -m distdoctor`."""
    exe = os.path.join(os.path.dirname(sys.executable), "distdoctor")
    if os.path.exists(exe):
        return [exe]
    found = shutil.which("distdoctor")
    return [found] if found else [sys.executable, "-m", "distdoctor"]


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir():
    """Tools the tests start leave files in $TMPDIR (torchrun's agent writes torchelastic_* log
    folders and never removes them): the session gets its own, removed at the end, so a run
    leaves nothing behind in /tmp. World-readable like /tmp, since daemons the tests start
    (munge, sshd) check the permissions of their paths."""
    path = tempfile.mkdtemp(prefix="distdoctor-tests-")
    os.chmod(path, 0o755)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = path
    tempfile.tempdir = None
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def data():
    return data_path


_SCHEMA = None


def load_report(text: str) -> dict:
    """Parse a JSON report printed by distdoctor and validate it against the published schema:
    every report the suite produces is checked, not only the ones in the schema's own tests."""
    import json

    import jsonschema

    global _SCHEMA
    if _SCHEMA is None:
        with open(os.path.join(REPO, "docs", "report.schema.json")) as fh:
            _SCHEMA = json.load(fh)
    doc = json.loads(text)
    jsonschema.validate(doc, _SCHEMA)
    return doc
