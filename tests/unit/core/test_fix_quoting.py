"""Every named remedy, and every fix built by hand from a machine's or a report's values, run as
printed through real bash with hostile values in each place a value goes: the text parses
(`bash -n`), and run in a sandbox where a command named `pwned` leaves a mark, nothing
injected runs, here or on the node the fix is for (ssh/clush/srun run their command argument
the way the remote shell would).

The sandbox is a restricted bash (`bash -r`: no redirection to files, no command with a slash,
PATH fixed to a folder holding only `pwned`): a fix's own commands are not found and do
nothing, so a remedy that writes /etc cannot write it here."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from distdoctor import fixes, remote
from distdoctor.hang import ptrace, verdict
from distdoctor.logs import outcome

BASH = shutil.which("bash") or "/bin/bash"
HOSTILE = [";pwned;", "$(pwned)", "`pwned`", "x\npwned\nx", "a b;pwned", "x'pwned'x", "x';pwned;'x", 'x";pwned;"x',
           "x&&pwned", "x|pwned", "x${IFS}pwned", "$((1))pwned", "-oProxyCommand=pwned", "x\\\npwned"]

SANDBOX = r"""
command_not_found_handle() { return 0; }
kill() { :; }
remote_shell() { eval "$*"; }
ssh() { while [ $# -gt 0 ]; do case $1 in -[bcDEeFIiJLlmOopQRSWw]) shift 2;; -*) shift;; *) break;; esac; done
        shift; remote_shell "$@"; }
clush() { while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done; shift; remote_shell "$@"; }
srun() { while [ $# -gt 0 ]; do case $1 in -w) shift 2;; -*) shift;; *) break;; esac; done; "$@"; }
bash() { [ "$1" = -c ] && eval "$2"; }
sudo() { "$@"; }
timeout() { shift; "$@"; }
"""


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    stubs = tmp_path_factory.mktemp("stubs")
    (stubs / "pwned").write_text('#!/bin/sh\necho ran >> "$0.ran"\n')
    (stubs / "pwned").chmod(0o755)
    return stubs


def runs_clean(stubs: Path, text: str) -> None:
    """text parses, and run in the sandbox runs no `pwned`."""
    mark = stubs / "pwned.ran"
    mark.unlink(missing_ok=True)
    parsed = subprocess.run([BASH, "-n", "-c", text], capture_output=True, text=True, timeout=10)
    assert parsed.returncode == 0, f"does not parse: {text!r}: {parsed.stderr}"
    subprocess.run([BASH, "--norc", "--noprofile", "-r", "-c", SANDBOX + "\n" + text], cwd=stubs,
                   env={"PATH": str(stubs), "HOME": str(stubs)}, capture_output=True, text=True, timeout=10)
    assert not mark.exists(), f"an injected command ran: {text!r}"


def test_the_sandbox_catches_an_unquoted_value_here_and_on_a_node(sandbox):
    """The control: the shapes the old fixes had do run `pwned`."""
    for text in (f"sed -i '/^NCCL_P2P_DISABLE=/d' {HOSTILE[0]}", f"ssh node1 'ls {HOSTILE[1]}'",
                 f"clush -w 'n[1-2]' -- echo {HOSTILE[2]}", f"# read the lines around {HOSTILE[3]}",
                 f"srun -w n1 -N1 -n1 bash -c 'echo {HOSTILE[0]}'"):
        with pytest.raises(AssertionError, match="injected"):
            runs_clean(sandbox, text)


def remedies(h: str) -> dict[str, object]:
    """Every remedy of fixes.py, with h wherever a value goes."""
    found: dict[str, object] = {
        "memlock": fixes.memlock([h], here=h), "memlock slurm": fixes.memlock([h], slurm=True, here=h),
        "shm_size": fixes.shm_size(h, [h], here=h), "shm_missing": fixes.shm_missing([h], here=h),
        "socket_ifname": fixes.socket_ifname([h, "eth0"], gloo=h, comment=h),
        "gloo_ifname": fixes.gloo_ifname(h, comment=h),
        "firewall_allow_from": fixes.firewall_allow_from(h, [h, "10.0.0.2"]),
        "firewall_open_port": fixes.firewall_open_port([h, "node2"], 29500),
        "mtu": fixes.mtu(h, h, [h], here=h), "mtus": fixes.mtus([(h, h), ("eth0", 1500)], ["node2"], here=h),
        "hostname_address": fixes.hostname_address(h, [h]), "pip_install": fixes.pip_install(h, h, [h]),
        "pip_install version": fixes.pip_install("torch", h, ["node2"]),
        "drop_setting file": fixes.drop_setting("NCCL_P2P_DISABLE", h),
        "drop_setting name": fixes.drop_setting(h, "/etc/nccl.conf"),
    }
    for name in fixes.NAMED:
        found[f"named {name}"] = fixes.named(name, [h])
    return found


def _text(fix) -> str:
    if isinstance(fix, remote.Fix):
        return remote.render(fix)
    if isinstance(fix, (tuple, list)):
        return remote.render_all(fix)
    return str(fix)


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_every_named_remedy_keeps_a_hostile_value_a_word(sandbox, value):
    for name, fix in remedies(value).items():
        text = _text(fix)
        try:
            runs_clean(sandbox, text)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_remote_on_keeps_a_hostile_node_and_a_quoted_command_harmless(sandbox, value):
    for nodes in ([value], [value, "node2"], ["node1", "node2", value]):
        for srun in (False, True):
            runs_clean(sandbox, remote.on(nodes, f"ls {shlex.quote(value)}", srun=srun))
    runs_clean(sandbox, remote.render(remote.Fix((f"echo {shlex.quote(value)}",), ("node1",), comment=value)))


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_a_log_s_rank_host_and_place_stay_in_their_comment(sandbox, value):
    for signals in (["SIGKILL"], ["SIGBUS"], []):
        for host in (value, "node7"):
            runs_clean(sandbox, outcome._fix(signals, host, value, value))


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_a_node_s_snapshot_cannot_hand_the_operator_a_command(sandbox, value):
    """The ptrace fix comes back in another node's snapshot: only one distdoctor writes is
    printed, and its commands go to that node."""
    runs_clean(sandbox, verdict.ptrace_fix({"fix": value}, "here", "node3"))
    runs_clean(sandbox, verdict.ptrace_fix({"fix": f"sudo sysctl -w x=0; {value}"}, "here", "node3"))
    for known in ptrace.KNOWN_FIXES:
        text = verdict.ptrace_fix({"fix": known}, "here", value)
        runs_clean(sandbox, text)
    forged = verdict.ptrace_fix({"fix": "pwned"}, "here", "node3")
    assert forged.startswith("#") and "\n" not in forged


def test_a_known_ptrace_fix_goes_to_its_node():
    known = next(f for f in ptrace.KNOWN_FIXES if f.startswith("sudo sysctl"))
    text = verdict.ptrace_fix({"fix": known}, "here", "node3")
    assert text.splitlines()[0] == "ssh node3 sudo sysctl -w kernel.yama.ptrace_scope=0", text
    assert verdict.ptrace_fix({"fix": known}, "node3", "node3") == known


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_an_expect_table_s_values_and_names_stay_words_in_node_fixes(sandbox, value):
    """node.expectations: the expected values (a config file's) and an unknown key's source go
    into pip, comment and shm fixes."""
    from distdoctor.checks import node
    from distdoctor.model import Status
    from tests.unit.inventory.test_inventory import gpu_node
    from tests.unit.node.test_expectations import load, run

    host = gpu_node()
    wanted = {"torch.version": value, "nccl.version": value, "gpu.driver": value, "kernel": value,
              "shm.size": value, "gpu.count": 99, f"no.such.{value}": 1}
    cfg = load("")
    assert cfg is not None
    result = run(host, wanted)
    fixes_seen = [f.fix for f in result.findings if f.fix and f.status is not Status.OK]
    assert fixes_seen, [f.summary for f in result.findings]
    for fix in fixes_seen:
        runs_clean(sandbox, _text(fix))
    assert node.FIXES  # the templates exist: the values above went through them
