"""DISTDOCTOR_TEST_PREFIX keeps two runs of the suite apart: names, subnets and ports."""

from __future__ import annotations

import ast
import os
import re
import socket

import pytest

from tests.conftest import REPO
from tests.harness import runprefix
from tests.harness.runprefix import RunPrefix, PrefixError


def _everything(run: RunPrefix) -> tuple[set[str], set[str], set[int]]:
    names = {run.name("qb", "n", 1), run.ifname("sb", 1), run.ifname("sv", 1, 3), run.ifname("a", 999)}
    subnets = {run.subnet(owner, i) for owner, block in runprefix.SUBNETS.items() for i in range(len(block))}
    return names, subnets, set(run.ports)


@pytest.mark.parametrize("a, b", [("dd82", "ht133"), ("ht133", "ht134"), ("d8", "d82"), ("a1", "b1")])
def test_two_prefixes_share_no_name_subnet_or_port(a, b):
    # the same pid for both: the prefix alone must keep them apart
    names_a, subnets_a, ports_a = _everything(RunPrefix.parse(a, pid=4242))
    names_b, subnets_b, ports_b = _everything(RunPrefix.parse(b, pid=4242))
    assert not names_a & names_b
    if RunPrefix.parse(a).octet != RunPrefix.parse(b).octet:
        assert not subnets_a & subnets_b and not ports_a & ports_b


def test_the_same_prefix_in_two_processes_gives_two_sets_of_names():
    one, two = RunPrefix.parse("ht133", pid=17), RunPrefix.parse("ht133", pid=17 * 36 + 1)
    assert one.ifname("sb", 1) != two.ifname("sb", 1)
    assert one.name("s", 1, "n", 1) != two.name("s", 1, "n", 1)


def test_names_subnets_and_ports_follow_the_value():
    run = RunPrefix.parse("ht133", pid=1234)
    assert run.name("qb").startswith("ht133-") and run.subnet("free", 0) == "10.133.100"
    assert run.subnet("sshd") == "10.133.7"
    assert run.ports.stop <= 32768  # below the kernel's ephemeral range
    assert len(run.ifname("sv", 9, 9)) <= 15


@pytest.mark.parametrize("value", ["", "ht", "133", "abc1", "ht0", "ht255", "ht07", "HT1", "ht-1", "ht1 "])
def test_a_bad_value_is_named_with_what_is_expected(value):
    with pytest.raises(PrefixError, match="DISTDOCTOR_TEST_PREFIX=.*letters and a number from 1 to 254"):
        RunPrefix.parse(value)


def test_an_interface_name_over_15_characters_is_refused_not_cut():
    with pytest.raises(PrefixError, match="longer than 15"):
        RunPrefix.parse("ht254", pid=1).ifname("toolong")


def test_blocks_of_third_octets_do_not_overlap_and_fit_a_slash_16():
    seen: set[int] = set()
    for owner, block in runprefix.SUBNETS.items():
        assert 1 <= block.start and block.stop <= 255, owner
        assert not seen & set(block), owner
        seen |= set(block)
    with pytest.raises(PrefixError, match="outside"):
        RunPrefix.parse("dd82").subnet("sshd", 1)


def test_free_port_is_in_the_runs_block_and_passes_over_a_held_port(tmp_path):
    run = RunPrefix.parse("ht133", pid=os.getpid())
    leases = str(tmp_path / "leases")
    first = runprefix.free_port("127.0.0.1", run, leases)
    assert first in run.ports
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", first))
        holder.listen()
        handed = []
        with pytest.raises(PrefixError, match="in use or was handed out"):
            for _ in range(len(run.ports)):  # the whole block, until the leases run out
                handed.append(runprefix.free_port("127.0.0.1", run, leases))
        assert first not in handed and len(set(handed)) == len(handed) == len(run.ports) - 1


def test_two_processes_of_one_run_are_never_handed_the_same_port(tmp_path):
    """xdist's workers are processes of one run: the leases keep them apart."""
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.harness import runprefix as r; "
            "run = r.RunPrefix.parse('ht134'); "
            "print(' '.join(str(r.free_port('127.0.0.1', run, sys.argv[2])) for _ in range(30)))")
    procs = [subprocess.Popen([sys.executable, "-c", code, REPO, str(tmp_path / "leases")], stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(len(o) == 30 for o in outs)
    assert not set(outs[0]) & set(outs[1])


def test_each_worker_looks_in_its_own_share_of_the_free_subnets():
    run = RunPrefix.parse("ht133", pid=1)
    shares = [set(run.free_subnets(w, 3)) for w in range(3)]
    assert not (shares[0] & shares[1]) and not (shares[1] & shares[2]) and not (shares[0] & shares[2])
    assert set().union(*shares) == set(run.free_subnets(0, 1))


def _literals(path: str):
    with open(path) as fh:
        tree = ast.parse(fh.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_no_integration_test_assigns_a_hard_coded_ipv4_address():
    """An address with a prefix length (what `ip addr add` takes) is built from the run's
    subnets, so two runs never put the same address on two interfaces."""
    assigned = re.compile(r"\b10\.\d+\.\d+\.\d+/\d+")
    found = []
    for top in ("integration", "harness"):
        for dirpath, _dirs, files in os.walk(os.path.join(REPO, "tests", top)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    found += [f"{os.path.relpath(path, REPO)}:{line}: {text!r}"
                              for line, text in _literals(path) if assigned.search(text)]
    assert found == []
