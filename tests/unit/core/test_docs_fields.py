"""Every JSON field the docs name exists: in the published schema, or as a key the code writes.
(docs once named `fingerprint.nccl_prediction`, a function, as a field of the report.)"""

from __future__ import annotations

import ast
import glob
import json
import os
import re

from tests.conftest import REPO

# Names that begin a path into a JSON report: its objects and arrays (singular too).
CONTAINERS = {"context", "summary", "tool", "checks", "check", "findings", "finding", "evidence", "nccl_test",
              "fingerprints", "fingerprint", "rendezvous", "mesh", "inventory", "cluster", "bench"}


def _schema_keys() -> set[str]:
    with open(os.path.join(REPO, "docs", "report.schema.json")) as fh:
        schema = json.load(fh)
    keys: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            keys.update(node.get("properties", {}))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(schema)
    return keys


def _code_keys() -> set[str]:
    """String constants in the code that could be keys (docstrings are prose, not keys)."""
    keys: set[str] = set()
    files = glob.glob(os.path.join(REPO, "distdoctor", "**", "*.py"), recursive=True)
    files += glob.glob(os.path.join(REPO, "checks", "*.py"))
    for path in files:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                keys.update(re.findall(r"[a-z_][a-z0-9_]*", node.value))
    return keys


def _docs() -> dict[str, str]:
    paths = glob.glob(os.path.join(REPO, "docs", "*.md")) + [os.path.join(REPO, "README.md")]
    return {os.path.relpath(p, REPO): open(p, encoding="utf-8").read() for p in paths}


def test_json_paths_named_in_the_docs_exist():
    known = _schema_keys() | _code_keys()
    wrong = []
    for name, text in _docs().items():
        for path in re.findall(r"`([a-z][a-z0-9_]*(?:\[\])?(?:\.[a-z_][a-z0-9_]*(?:\[\])?)+)`", text):
            parts = [p.removesuffix("[]") for p in path.split(".")]
            if parts[0] not in CONTAINERS:
                continue
            missing = [p for p in parts[1:] if p not in known]
            if missing:
                wrong.append(f"{name}: `{path}` names {', '.join(missing)}, which no report has")
    assert not wrong, "\n".join(wrong)


def test_keys_in_the_docs_json_examples_exist():
    known = _schema_keys() | _code_keys()
    wrong = []
    for name, text in _docs().items():
        for block in re.findall(r"```json\n(.*?)```", text, re.S):
            values = set(re.findall(r':\s*"([^"]*)"', block))
            for key in re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"\s*:', block):
                # a key the example also shows as a value is data (a node's name), not a field
                if key not in known and key not in values:
                    wrong.append(f"{name}: JSON example has a key {key!r} that no report has")
    assert not wrong, "\n".join(wrong)


def test_the_checker_catches_the_field_that_was_invented():
    assert "nccl_prediction" not in _schema_keys() | _code_keys()


def test_readme_has_two_commands_and_ci_runs_the_second():
    readme = _docs()["README.md"]
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```console\n(.*?)\n```", quick_start, re.S)
    assert len(commands) == 2, commands
    # A stock Debian 12 / Ubuntu 24.04 Python refuses `pip install` outside a venv (PEP 668).
    assert commands[0] == "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/distdoctor check"
    assert commands[1].startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' ")
    # From PyPI alone, torch==2.13.0 on Linux is the CUDA build (several GB): the CPU index's
    # 2.13.0+cpu sorts above it and is what pip picks.
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in commands[1]
    import tomllib

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        extra = tomllib.load(fh)["project"]["optional-dependencies"]["test"]
    # An exact public version: the CPU index's local "+cpu" build satisfies it, a range would let
    # pip take a newer CUDA build from PyPI.
    assert [dep for dep in extra if dep.startswith("torch")] == ["torch==2.13.0"]
    with open(os.path.join(REPO, ".ci", "run")) as fh:
        ci = [line for line in fh.read().splitlines()
              if line and not line.startswith(("#", "set ", "cd ", "export PIP_", " "))]
    # The README's command, read from the README and run verbatim up to the suite, which CI starts
    # itself (it also prints the slowest tests) after a collection that writes the bytecode
    # caches; beside the suite what is not a test of behaviour: the type hints and fresh-venv installs.
    import importlib.util

    spec = importlib.util.spec_from_file_location("quickstart", os.path.join(REPO, ".ci", "quickstart.py"))
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    assert quickstart.commands() == commands
    assert quickstart.test_head(commands[1]) + " && .venv/bin/pytest" == commands[1]
    [run_head] = [i for i, line in enumerate(ci) if "$(python3 .ci/quickstart.py test-head)" in line]
    assert ci[run_head].startswith('PATH="$PWD/.ci/bin:$PATH" ')
    assert ci[run_head].endswith(' bash -c "$(python3 .ci/quickstart.py test-head)"')
    collect = ci.index(".venv/bin/pytest --collect-only -q -p no:cacheprovider -n0 > /dev/null")
    assert run_head < collect < ci.index(".venv/bin/pytest --durations=25 || rc=$?")
    assert ".venv/bin/pytest --durations=25 || rc=$?" in ci
    beside = ci[:ci.index(".venv/bin/pytest --durations=25 || rc=$?")]
    assert any(line.startswith("nice -n 19 .venv/bin/mypy ") and line.endswith("& mypy=$!") for line in beside), ci
    assert any(".ci/test_layouts.py" in line and line.endswith("& layouts=$!") for line in beside), ci
    assert "ruff check" in commands[1].split("pytest")[0]  # lint runs before the tests


def test_docs_show_the_schema_version_the_code_writes():
    """README and report-format.md once showed "1.0" after the inventory made reports 1.1."""
    from distdoctor.render.json import SCHEMA_VERSION

    for name, text in _docs().items():
        for shown in re.findall(r'"schema_version": "([0-9.]+)"', text):
            assert shown == SCHEMA_VERSION, (name, shown)
        for shown in re.findall(r'now `"([0-9.]+)"`', text):
            assert shown == SCHEMA_VERSION, (name, shown)
