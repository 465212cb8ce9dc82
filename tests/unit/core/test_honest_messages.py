"""Messages say what really happened: the bound that ran out, parameters as the TOML a user
writes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from distdoctor import registry
from distdoctor.cli import build_parser
from distdoctor.commands.explain import run as cmd_explain
from distdoctor.config import toml_value
from tests.conftest import distdoctor_argv, load_report

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.mark.parametrize("value, text", [(True, "true"), (False, "false"), (3.0, "3.0"), (0, "0"), ("auto", '"auto"'),
                                         ([], "[]"), (["-p", "22"], '["-p", "22"]'), ('say "hi"', '"say \\"hi\\""'),
                                         ({"a": 1}, "{ a = 1 }")])
def test_toml_value(value, text):
    assert toml_value(value) == text
    assert tomllib.loads(f"x = {text}")["x"] == value


class _Stdout:
    """The reserved stdout cmd_explain writes to, here pytest's captured sys.stdout."""

    def text(self):
        return sys.stdout


def test_explain_prints_parameters_the_config_file_accepts(capsys):
    with_params = [c for c in registry.load(env={}).sorted() if c.params]
    assert with_params
    for info in with_params:
        # cmd_explain, not main: main ends the process (os._exit) while daemon threads of
        # other tests' abandoned checks are alive.
        assert cmd_explain(build_parser().parse_args(["explain", info.id]), _Stdout()) == 0
        out = capsys.readouterr().out
        lines = out.split("in the config file):\n", 1)[1].split("\n\n", 1)[0].splitlines()
        table = tomllib.loads("\n".join(line.strip() for line in lines))
        assert table == {k: list(v) if isinstance(v, tuple) else v for k, v in info.params.items()}, info.id
        assert "True" not in out.split("parameters", 1)[1].split("\n\n", 1)[0]


def test_a_short_run_bound_is_named_not_each_checks_own_deadline():
    proc = subprocess.run([*distdoctor_argv(), "check", "--timeout", "0.01", "--json"], capture_output=True,
                          text=True, timeout=60)
    doc = load_report(proc.stdout)
    # What the bound cuts is the packs' loading (when that alone takes longer) or the checks.
    timed_out = [f["summary"] for c in doc["checks"] if c["status"] == "timeout" or c["id"] == "core.check-packs"
                 for f in c["findings"]]
    assert timed_out, "nothing hit a 0.01 s bound?"
    for summary in timed_out:
        assert "0.01 s bound (--timeout)" in summary, summary
        assert " s deadline" not in summary, summary
