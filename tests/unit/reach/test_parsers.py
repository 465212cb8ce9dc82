"""Pure parsers of the reach area: MPI hostfiles, Horovod -H lists, ssh's answers."""

import json
import re

import pytest

from distdoctor.parsers import ParseError
from distdoctor.parsers.hostfile import check_name, parse_horovod_hosts, parse_hostfile
from distdoctor.parsers.ssh import (HOSTKEY_UNKNOWN, KEY_DENIED, NOT_RESOLVED, OK, OTHER,
                                    REFUSED, TIMEOUT, parse_ssh_g, parse_ssh_result)
from tests.conftest import data_path


def _cases(text):
    """The lab's ssh_cases.txt: `### name`, `$ command`, `rc=N wall=Xs`, then stderr."""
    cases = {}
    for block in text.split("### ")[1:]:
        lines = block.splitlines()
        rc = int(re.match(r"rc=(\d+)", lines[2]).group(1))
        cases[lines[0].strip()] = (rc, "\n".join(lines[3:]))
    return cases


def test_every_captured_ssh_case_is_classified():
    with open(data_path("ssh", "ssh_cases.txt"), encoding="utf-8") as fh:
        cases = _cases(fh.read())
    with open(data_path("ssh", "ssh_cases.expected.json"), encoding="utf-8") as fh:
        expected = json.load(fh)
    assert set(cases) == set(expected)
    for name, (rc, stderr) in cases.items():
        outcome = parse_ssh_result(rc, stderr)
        want = expected[name]
        assert outcome.kind == want["kind"], name
        for key in ("message", "known_hosts_file", "known_hosts_line"):
            if key in want:
                assert getattr(outcome, key) == want[key], (name, key)


@pytest.mark.parametrize("rc,stderr,kind", [
    (255, "ssh: Could not resolve hostname nosuch: Name or service not known\n", NOT_RESOLVED),
    (255, "ssh: Could not resolve hostname x: Temporary failure in name resolution\n", NOT_RESOLVED),
    (255, "Connection timed out during banner exchange\nConnection to 10.0.0.2 port 22 timed out\n", TIMEOUT),
    (255, "kex_exchange_identification: Connection closed by remote host\n"
          "Connection closed by 127.0.0.1 port 2222\n", OTHER),
    (255, "Received disconnect from 10.0.0.2 port 22:2: Too many authentication failures\n", KEY_DENIED),
    (255, "u@h: Permission denied (publickey,password).\n", KEY_DENIED),
    (255, "ssh: connect to host 10.0.0.9 port 22: No route to host\n", OTHER),
    (255, "Host key verification failed.\n", HOSTKEY_UNKNOWN),
    (1, "", OTHER),
    (0, "Warning: Permanently added 'x' (ED25519) to the list of known hosts.\n", OK),
])
def test_ssh_wordings(rc, stderr, kind):
    assert parse_ssh_result(rc, stderr).kind == kind


def test_ssh_killed_at_our_deadline_is_a_timeout():
    assert parse_ssh_result(None, "", timed_out=True).kind == TIMEOUT


def test_remote_command_failure_names_its_status():
    outcome = parse_ssh_result(126, "bash: true: Permission denied\n")
    assert outcome.kind == OTHER and "status 126" in outcome.message


def test_ssh_refused_keeps_the_line():
    outcome = parse_ssh_result(255, "ssh: connect to host a port 22: Connection refused\n")
    assert (outcome.kind, outcome.message) == (REFUSED, "ssh: connect to host a port 22: Connection refused")


def test_ssh_g_dump():
    text = "user root\nhostname 10.83.1.2\nport 2222\nproxycommand none\nbatchmode yes\n"
    target = parse_ssh_g(text)
    assert (target.hostname, target.port, target.user, target.proxy) == ("10.83.1.2", 2222, "root", "")
    assert parse_ssh_g("hostname h\nport 22\nproxyjump bastion\n").proxy == "bastion"
    with pytest.raises(ParseError):
        parse_ssh_g("garbage\n")


OPEN_MPI_HOSTFILE = """\
# Open MPI hostfile
node01 slots=4 max_slots=8
node02 slots=4   # trailing comment

alice@node03
node04:2
[fe80::1%eth0]:3
fd00::5
"""


def test_hostfile_open_mpi_and_mpich_forms():
    parsed = parse_hostfile(OPEN_MPI_HOSTFILE)
    assert parsed.problems == ()
    got = [(e.name, e.slots, e.user, e.line) for e in parsed.entries]
    assert got == [("node01", 4, "", 2), ("node02", 4, "", 3), ("node03", None, "alice", 5),
                   ("node04", 2, "", 6), ("fe80::1%eth0", 3, "", 7), ("fd00::5", None, "", 8)]


def test_hostfile_plain_list():
    parsed = parse_hostfile("gpu1\ngpu2\n\n#gpu3\n")
    assert parsed.names == ["gpu1", "gpu2"] and parsed.problems == ()


def test_hostfile_bad_lines_are_reported_with_numbers_and_good_ones_kept():
    text = "node01 slots=4\nnode02 slots=x\n-oProxyCommand=evil\nnode04 node05\nnode06:0\nno;de7\nnode08 foo=1\n"
    parsed = parse_hostfile(text)
    assert [p.line for p in parsed.problems] == [2, 3, 4, 5, 6, 7]
    assert "begins with '-'" in parsed.problems[1].message
    assert "one host per line" in parsed.problems[2].message
    assert "unknown option 'foo'" in parsed.problems[5].message
    # an unknown option is reported but the host is kept
    assert parsed.names == ["node01", "node08"]
    assert "line 2" in str(parsed.problems[0])


def test_horovod_list():
    parsed = parse_horovod_hosts("node1:4,node2:4,node3")
    assert [(e.name, e.slots) for e in parsed.entries] == [("node1", 4), ("node2", 4), ("node3", None)]
    bad = parse_horovod_hosts("node1:4,,-x:2,node4:four")
    assert [p.line for p in bad.problems] == [2, 3, 4]
    assert bad.names == ["node1"]
    assert parse_horovod_hosts("").problems


@pytest.mark.parametrize("name,good", [
    ("node-01.cluster", True), ("10.0.0.1", True), ("fe80::1%eth0", True), ("-x", False),
    ("a b", False), ("$(reboot)", False), ("x" * 254, False), ("", False),
])
def test_check_name(name, good):
    assert (check_name(name) == "") is good
