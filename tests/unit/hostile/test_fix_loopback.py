"""A host is loopback by what the resolver makes of it, not by its spelling: every form
inet_aton(3) reads as 127/8 or 0.0.0.0 (`0`, `2130706433`, `0x7f000001`, `0177.0.0.1`, `127.1`)
and the loopback names never become `ssh HOST` or a `clush -w` target; a fix for them is a
comment. Other hosts, including numeric spellings of real addresses, still get a command."""

from __future__ import annotations

import ipaddress

import pytest

from distdoctor import remote

LOOPBACK = ["0", "00", "0x0", "0.0", "0.0.0.0", "127.0.0.1", "127.1", "127.0.1", "2130706433", "0x7f000001",
            "0X7F000001", "0177.0.0.1", "0x7f.1", "017700000001", "127.255.255.254", "localhost", "LOCALHOST",
            "localhost.localdomain", "ip6-localhost", "foo.localhost", "a.b.localhost"]
REMOTE = ["node1", "10.0.0.1", "167772161", "0x0a000001", "8", "1.2.3.4", "128.0.0.1", "0x80000001", "12.7.0.1",
          "gpu-a01.cluster", "08", "0x7g000001", "1.2.3.4.5", "localhostx"]


@pytest.mark.parametrize("name", LOOPBACK)
def test_every_spelling_of_the_local_machine_is_loopback(name):
    assert remote.loopback(name)
    assert not remote.host_name(name)
    fix = remote.on([name], "systemctl restart slurmd")
    assert not fix.startswith(("ssh", "clush", "srun")), fix
    assert fix.lstrip().startswith("#")


@pytest.mark.parametrize("name", REMOTE)
def test_other_hosts_still_get_a_command(name):
    assert not remote.loopback(name)
    assert remote.host_name(name)
    assert remote.on([name], "uptime").startswith("ssh ")


@pytest.mark.parametrize("text", ["0", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "10.1", "0xa.0.0.1",
                                  "167772161", "1.2.3.4"])
def test_numeric_forms_read_as_inet_aton_reads_them(text):
    """Checked against the rules of inet_aton(3): the last part fills the remaining bytes."""
    parts = text.split(".")
    ints = [int(p, 16) if p.lower().startswith("0x") else int(p, 8) if p.startswith("0") and len(p) > 1
            else int(p) for p in parts]
    expected = 0
    for value in ints[:-1]:
        expected = expected << 8 | value
    expected = expected << (8 * (4 - len(ints) + 1)) | ints[-1]
    assert remote.numeric_ipv4(text) == expected
    assert ipaddress.IPv4Address(expected)


def test_a_mixed_node_list_keeps_the_real_nodes_and_comments_the_local_one():
    fix = remote.on(["node2", "0", "node3", "2130706433"], "uptime")
    assert "clush -w 'node[2-3]'" in fix or "clush -w node[2-3]" in fix
    assert "ssh 0" not in fix and "2130706433" not in fix.split("#")[0]
