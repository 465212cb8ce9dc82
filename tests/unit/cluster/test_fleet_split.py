"""How fleet reads what the nodes sent: srun's labelled pieces, ssh per-host output."""

import json

from distdoctor import remote
from distdoctor.crosscheck import fleet
from distdoctor.host import CommandResult
from tests.harness.reports import node_report


def _labelled(task, text, piece=1024):
    return [f"{task}: {text[i:i + piece]}" for i in range(0, len(text), piece)]


def test_long_report_lines_cut_by_srun_are_joined_per_task():
    a, b = (json.dumps(dict(node_report(n), node=n), separators=(",", ":")) for n in ("n1", "n2"))
    lines = []
    for pa, pb in zip(_labelled(0, a), _labelled(1, b)):  # interleaved, as srun forwards them
        lines += [pa, pb]
    lines += _labelled(0, a)[len(lines) // 2:] + _labelled(1, b)[len(lines) // 2:]
    got = fleet.split_srun("\n".join(lines) + "\n", ["n1", "n2"], 30)
    assert sorted(got.reports) == ["n1", "n2"] and got.missing == []


def test_srun_garbage_and_silence_are_named_by_node():
    good = json.dumps(dict(node_report("n1"), node="n1"))
    out = "\n".join(_labelled(0, good) + ["1: Segmentation fault", "1: {not json"]) + "\n"
    got = fleet.split_srun(out, ["n1", "n2", "n3"], 30)
    assert list(got.reports) == ["n1"]
    assert [m.reason for m in got.missing] == ["n2: output is not a distdoctor report (not JSON)",
                                               "n3: no answer within 30 s"]
    assert remote.render(got.missing[1].fix) == "srun -w n3 -N1 -n1 python3 -m distdoctor check -v"


def test_ssh_results_timeout_refusal_and_report():
    report = json.dumps(node_report("a"))
    results = {
        "a": CommandResult(("x",), 0, "warming up\n" + report + "\n", ""),
        "b": CommandResult(("x",), None, "", "", 30.0, timed_out=True),
        "c": CommandResult(("x",), 255, "", "Host key verification failed.\n"),
        "d": CommandResult(("x",), 1, "", "/usr/bin/python3: No module named distdoctor\n"),
    }
    got = fleet.split_ssh(results, 30)
    assert list(got.reports) == ["a"]
    assert [m.reason for m in got.missing] == [
        "b: no answer within 30 s", "c: ssh failed (Host key verification failed.)",
        "d: no report (exit 1: /usr/bin/python3: No module named distdoctor)"]


def test_a_failed_ssh_gets_a_fix_other_than_the_same_ssh():
    from distdoctor import remote

    results = {
        "r": CommandResult(("x",), 255, "", "ssh: connect to host r port 22: Connection refused\n"),
        "t": CommandResult(("x",), 255, "", "ssh: connect to host t port 22: Connection timed out\n"),
        "k": CommandResult(("x",), 255, "", "u@k: Permission denied (publickey).\n"),
    }
    fixes = {m.node: remote.render(m.fix) for m in fleet.split_ssh(results, 30).missing}
    assert all("distdoctor check" not in fix and not fix.startswith("ssh ") for fix in fixes.values()), fixes
    assert "nc -vz -w 3 r 22" in fixes["r"] and "start sshd" in fixes["r"]
    assert "firewall" in fixes["t"]
    assert "ssh-copy-id k" in fixes["k"]


def test_node_command_passes_the_selection_and_a_shorter_bound():
    assert fleet.node_argv(["dd"], 30, ["net"], ["gpu"]) == [
        "dd", "check", "--node-report", "--timeout", "27", "--only", "net", "--skip", "gpu"]
    argv = fleet.srun_argv(["n1", "n2"], False, ["dd"], 30)
    assert argv[:2] == ["srun", "--label"] and "-wn[1-2]" in "".join(argv) and "--immediate=30" in argv
    assert argv[-5:] == ["timeout", "-k", "2", "30", "dd"]


def test_fleet_inside_an_srun_step_is_a_usage_error(monkeypatch):
    import argparse

    import pytest

    from distdoctor.host import Host

    args = argparse.Namespace(timeout=30.0, fanout=8, hosts=[], nodes=None, distdoctor=None, only=[], skip=[],
                              save=None, ssh_option=[])
    host = Host({"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "n[1-2]"})
    with pytest.raises(ValueError, match="not under srun"):
        fleet.run(args, host, {})


def test_fleet_without_srun_says_so():
    import argparse

    import pytest

    from distdoctor.testing import FakeHost

    args = argparse.Namespace(timeout=30.0, fanout=8, hosts=[], nodes="n[1-2]", distdoctor=None, only=[], skip=[],
                              save=None, ssh_option=[])
    with pytest.raises(ValueError, match="cannot run srun .*name the hosts with --hosts"):
        fleet.run(args, FakeHost(), {})
