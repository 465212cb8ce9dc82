"""`distdoctor health` against a fake `scontrol` that records every call and answers with the
states real Slurm prints: health touches exactly one node, only when it read that node's state,
never one an operator or Slurm took out of service, and resumes only its own drain after the
check that drained it ran and passed. Each run is a real distdoctor process under the hostile
harness (time bound, memory bound, nothing left behind)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from distdoctor.model import EXIT_FAIL, EXIT_OK, EXIT_OUTPUT, EXIT_USAGE
from tests.harness.hostile import dd, write_pack

FAKE_SCONTROL = """\
#!{python}
# A stand-in for scontrol (and sinfo): `show node NAME` prints the record(s) in STATE_FILE the way
# `scontrol show node` does; `update` is appended to CALLS_FILE and applied as Slurm would.
import json, os, sys
state_file, calls_file = os.environ["FAKE_SCONTROL_STATE"], os.environ["FAKE_SCONTROL_CALLS"]
with open(calls_file, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
with open(state_file) as fh:
    nodes = json.load(fh)
args = sys.argv[1:]
if os.path.basename(sys.argv[0]) == "sinfo":  # the circuit breaker's view: one partition, these nodes
    for n in nodes:
        print(f"{{n['name']}}|debug*|{{n['state'].lower()}}|{{n['reason'] or 'none'}}")
    sys.exit(0)
if args[:2] == ["show", "node"]:
    name = args[2]
    shown = [n for n in nodes if n["name"] == name or n.get("alias") == name]
    if not shown:
        print(f"Node {{name}} not found", file=sys.stderr)
        sys.exit(1)
    for n in shown:
        print(f"NodeName={{n['name']}} Arch=x86_64 CoresPerSocket=1\\n   State={{n['state']}} ThreadsPerCore=1\\n"
              f"   Reason={{n['reason'] or '(null)'}} [root@2026-11-26T07:00:00]\\n")
    sys.exit(0)
if args[:1] == ["update"]:
    fields = dict(a.split("=", 1) for a in args[1:])
    for n in nodes:
        if n["name"] == fields["nodename"]:
            if fields["state"] == "drain":
                n["state"] = n["state"].split("+")[0] + "+DRAIN"
                n["reason"] = fields["reason"]
            elif fields["state"] == "resume":
                n["state"], n["reason"] = "IDLE", ""
    with open(state_file, "w") as fh:
        json.dump(nodes, fh)
    sys.exit(0)
sys.exit(2)
"""

GATE_PACK = """
    from distdoctor.api import check, fail, ok

    @check("hostile.gate", title="Fails when HOSTILE_GATE says so")
    def gate(ctx):
        if ctx.env.get("HOSTILE_GATE") == "fail":
            yield fail("GPU 3 fell off the bus")
        else:
            yield ok("all GPUs present")

    @check("hostile.other", title="Always passes")
    def other(ctx):
        yield ok("fine")

    CHECKS = [gate, other]
"""

OURS = "distdoctor: hostile.gate: GPU 3 fell off the bus"


class Slurm:
    def __init__(self, tmp_path):
        self.dir = tmp_path / "bin"
        self.dir.mkdir()
        exe = self.dir / "scontrol"
        exe.write_text(FAKE_SCONTROL.format(python=sys.executable))
        exe.chmod(0o755)
        (self.dir / "sinfo").symlink_to(exe)
        self.state = tmp_path / "nodes.json"
        self.calls_file = tmp_path / "calls.jsonl"
        self.pack = write_pack(tmp_path / "pack", "gate.py", GATE_PACK)

    def nodes(self, *nodes: dict) -> None:
        self.state.write_text(json.dumps(list(nodes)))

    def calls(self) -> list[list[str]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]

    def updates(self) -> list[list[str]]:
        return [c for c in self.calls() if c[:1] == ["update"]]

    def current(self) -> list[dict]:
        return json.loads(self.state.read_text())

    def health(self, *args: str, gate: str = "fail", env: dict | None = None):
        full_env = {"PATH": f"{self.dir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "FAKE_SCONTROL_STATE": str(self.state), "FAKE_SCONTROL_CALLS": str(self.calls_file),
                    "HOSTILE_GATE": gate, "SLURMD_NODENAME": "n1", **(env or {})}
        result = dd("health", "--checks-dir", str(self.pack), "--timeout", "20", *args, env=full_env, timeout=40)
        assert "Traceback" not in result.stderr, result.stderr
        assert result.elapsed < 30
        return result


@pytest.fixture
def slurm(tmp_path):
    return Slurm(tmp_path)


def test_control_a_node_in_service_is_drained_and_its_own_drain_resumed(slurm):
    """The guards below can fail: the same fake Slurm does see a drain and a resume."""
    slurm.nodes({"name": "n1", "state": "IDLE", "reason": ""})
    result = slurm.health("--only", "hostile.gate")
    assert result.returncode == EXIT_FAIL, result.stdout + result.stderr
    assert slurm.updates() == [["update", "nodename=n1", "state=drain", f"reason={OURS}"]]
    result = slurm.health("--only", "hostile.gate", gate="ok")
    assert result.returncode == EXIT_OK, result.stdout
    assert slurm.updates()[-1] == ["update", "nodename=n1", "state=resume"]
    assert slurm.current() == [{"name": "n1", "state": "IDLE", "reason": ""}]


# States an operator or Slurm set, as `scontrol show node` prints them.
NOT_OURS = [
    ("DOWN", "maint: PSU replacement"),
    ("DOWN+NOT_RESPONDING", "Not responding"),
    ("IDLE+FAIL", "bad DIMM"),
    ("ALLOCATED+FAIL", "failing"),
    ("IDLE+MAINT+RESERVED", "maint window"),
    ("IDLE+REBOOT_REQUESTED", "Reboot ASAP"),
    ("DOWN+REBOOT_ISSUED", "reboot issued"),
    ("IDLE+POWERED_DOWN", ""),
    ("IDLE*", ""),
    ("FUTURE", ""),
    ("IDLE+DRAIN", "maint: firmware"),
    ("MIXED+DRAIN", "hw: GPU 5 ECC"),
    ("IDLE+INVALID_REG", "gres/gpu count reported lower than configured (7 < 8)"),
    ("UNKNOWN", ""),
]


@pytest.mark.parametrize("state,reason", NOT_OURS)
def test_a_failure_never_touches_a_node_someone_else_took(slurm, state, reason):
    slurm.nodes({"name": "n1", "state": state, "reason": reason})
    result = slurm.health("--only", "hostile.gate")
    assert slurm.updates() == [], result.stdout
    assert slurm.current()[0]["reason"] == reason and slurm.current()[0]["state"] == state
    assert result.returncode == EXIT_FAIL
    assert "left as it is" in result.stdout


@pytest.mark.parametrize("state", ["DOWN+DRAIN", "IDLE+DRAIN+MAINT", "DOWN+DRAIN+NOT_RESPONDING",
                                   "IDLE+DRAIN+REBOOT_REQUESTED", "IDLE+DRAIN+FAIL"])
def test_its_own_drain_is_not_resumed_once_slurm_or_an_operator_took_the_node_further(slurm, state):
    """Slurm's resume clears DOWN: a node Slurm marked down while drained by distdoctor stays."""
    slurm.nodes({"name": "n1", "state": state, "reason": OURS})
    result = slurm.health("--only", "hostile.gate", gate="ok")
    assert slurm.updates() == [], result.stdout
    assert result.returncode == EXIT_OK


@pytest.mark.parametrize("args", [("--skip", "*"), ("--only", "hostile.other"), ("--only", "hostile", "--skip", "hostile.gate")])
def test_a_drain_is_resumed_only_after_the_check_that_drained_it_ran_and_passed(slurm, args):
    slurm.nodes({"name": "n1", "state": "IDLE+DRAIN", "reason": OURS})
    result = slurm.health(*args, gate="ok")
    assert slurm.updates() == [], result.stdout
    assert slurm.current()[0]["reason"] == OURS
    assert "stays drained" in result.stdout


def test_a_drain_that_counts_other_checks_needs_a_full_run(slurm):
    reason = OURS + " (+2)"
    slurm.nodes({"name": "n1", "state": "IDLE+DRAIN", "reason": reason})
    result = slurm.health("--only", "hostile.gate", gate="ok")
    assert slurm.updates() == [] and "only a run of every check" in result.stdout


@pytest.mark.parametrize("node", ["n[1-100]", "n1,n2", "ALL", "n1 n2", "n1\nn2", "", "-n1", "n[1-2]x", "nodename=n2"])
def test_node_option_naming_more_than_one_node_is_a_usage_error(slurm, node):
    slurm.nodes({"name": "n1", "state": "IDLE", "reason": ""})
    result = slurm.health("--only", "hostile.gate", f"--node={node}")
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert slurm.calls() == []


@pytest.mark.parametrize("name", ["n[1-100]", "n1,n2", "all"])
def test_a_node_name_from_the_environment_that_is_a_host_list_is_never_acted_on(slurm, name):
    slurm.nodes({"name": "n1", "state": "IDLE", "reason": "", "alias": name})
    result = slurm.health("--only", "hostile.gate", env={"SLURMD_NODENAME": name})
    assert slurm.updates() == [], result.stdout
    assert result.returncode == EXIT_FAIL
    assert "not one Slurm node name" in result.stdout or "every node" in result.stdout


def test_a_state_that_describes_other_or_several_nodes_is_not_acted_on(slurm):
    slurm.nodes({"name": "n1", "state": "IDLE", "reason": ""}, {"name": "n2", "state": "IDLE", "reason": "", "alias": "n1"})
    result = slurm.health("--only", "hostile.gate")
    assert slurm.updates() == [] and result.returncode == EXIT_FAIL
    assert "describes 2 nodes" in result.stdout
    slurm.nodes({"name": "n7", "state": "IDLE", "reason": "", "alias": "n1"})
    result = slurm.health("--only", "hostile.gate")
    assert slurm.updates() == [] and "describes node 'n7'" in result.stdout


def test_an_unreadable_state_is_never_drained(slurm):
    slurm.nodes()  # scontrol: Node n1 not found
    result = slurm.health("--only", "hostile.gate")
    assert slurm.updates() == [] and result.returncode == EXIT_FAIL
    assert "its state cannot be read" in result.stdout


@pytest.mark.parametrize("expect", ['"gpu.count" = nan', '"gpu.count" = -inf', '"gpu.count" = "nan"',
                                    '"gpu.count" = ">= nan"', '"gpu.count" = [1, nan]',
                                    '"gpu.count" = "²"', f'"gpu.count" = {"9" * 5000}',
                                    f'"gpu.count" = "{"9" * 5000}"'],
                         ids=["nan", "-inf", "nan-string", "compare-nan", "list-nan", "superscript-two",
                              "5000-digit-integer", "5000-digit-string"])
def test_an_expectation_no_node_can_meet_is_refused_before_anything_runs(slurm, tmp_path, expect):
    config = tmp_path / "site.toml"
    config.write_text(f"[expect]\n{expect}\n")
    slurm.nodes({"name": "n1", "state": "IDLE", "reason": ""})
    result = slurm.health("--config", str(config), gate="ok")
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert slurm.calls() == []


@pytest.mark.parametrize("where", ["missing-dir/verdict.txt", "a-directory", "dangling"])
def test_an_unwritable_output_is_exit_74_before_the_node_is_drained(slurm, tmp_path, where):
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "verdict.txt")
    slurm.nodes({"name": "n1", "state": "IDLE", "reason": ""})
    result = slurm.health("--only", "hostile.gate", "-o", str(tmp_path / where))
    assert result.returncode == EXIT_OUTPUT, result.stdout + result.stderr
    assert slurm.updates() == []
    assert slurm.current()[0]["state"] == "IDLE"


TEXT_PACK = """
    from distdoctor.api import check, fail

    @check("hostile.text", title="Fails with the text the file HOSTILE_TEXT_FILE holds")
    def text(ctx):
        with open(ctx.env["HOSTILE_TEXT_FILE"], encoding="utf-8") as fh:
            said = fh.read()
        yield fail(said, subject=said[:80])

    CHECKS = [text]
"""

# What lands in a reason or a finding: an operator's free text, a pack's message, a log line.
HOSTILE_TEXTS = [
    'maint "quoted" \\\\ back\\\\slash',
    'x"} 1\nevil_metric{node="n1"} 1\n# TYPE evil gauge',  # a label breaking out of its quotes
    "\x1b[2J\x1b]0;owned\x07\r\x00tab\there",
    "\u202eevil\u200b \ud800 lone surrogate" if False else "\u202eevil\u200b \U0001f4a5",
    "r" * 200_000,
]
_METRIC = __import__("re").compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)*\})? '
                                   r'[-+0-9.eEinfNa]+( [0-9]+)?$')


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
@pytest.mark.parametrize("fmt", ["json", "prometheus"])
def test_hostile_reasons_and_findings_stay_inside_json_and_prometheus(slurm, tmp_path, text, fmt):
    """An operator's reason (a node someone else drained) and a finding's text, each hostile,
    printed as JSON (strict) and as Prometheus exposition (every line a comment or one sample,
    labels escaped: no sample of the attacker's making)."""
    from tests.harness.hostile import strict_json

    pack = write_pack(tmp_path / "textpack", "text.py", TEXT_PACK)
    reason = text[:2000].replace("\n", " ")  # scontrol prints the reason on one line
    slurm.nodes({"name": "n1", "state": "IDLE+DRAIN", "reason": reason})
    full_env = {"PATH": f"{slurm.dir}{os.pathsep}{os.environ.get('PATH', '')}",
                "FAKE_SCONTROL_STATE": str(slurm.state), "FAKE_SCONTROL_CALLS": str(slurm.calls_file),
                "SLURMD_NODENAME": "n1", "HOSTILE_TEXT_FILE": str(tmp_path / "text")}
    (tmp_path / "text").write_text(text, encoding="utf-8")
    result = dd("health", "--checks-dir", str(pack), "--only", "hostile.text", "--format", fmt, "--timeout", "20",
                env=full_env, timeout=40)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.elapsed < 30
    assert result.returncode == EXIT_FAIL, (result.returncode, result.stderr[-2000:])
    assert slurm.updates() == []  # someone else's drain: left as it is
    assert len(result.stdout) < 2 << 20, len(result.stdout)
    if fmt == "json":
        strict_json(result.stdout)
        return
    lines = [line for line in result.stdout.splitlines() if line and not line.startswith("#")]
    assert lines, result.stdout[:2000]
    for line in lines:
        assert _METRIC.match(line), line[:500]
    assert not any(line.startswith("evil") for line in result.stdout.splitlines())
