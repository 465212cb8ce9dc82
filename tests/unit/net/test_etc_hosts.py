"""/etc/hosts lines that map a node's name to loopback, and the per-node fix, run by bash on a
copy of the file: the name maps to the cluster address afterwards, and nothing else changes."""

from __future__ import annotations

import subprocess

import pytest

from distdoctor import remote
from distdoctor.loopback_name import hosts_fix as _hosts_fix
from distdoctor.parsers.etc_hosts import loopback_lines, parse_etc_hosts

DEBIAN = "127.0.0.1\tlocalhost\n127.0.1.1\tgpu-7.cluster gpu-7\n\n# The following lines are desirable for IPv6\n" \
         "::1     localhost ip6-localhost ip6-loopback\nff02::1 ip6-allnodes\n"
CONTAINER = "127.0.0.1 localhost gpu-7  # written by the image\n::1 localhost\n10.0.0.9 other\n"


def hosts_fix(*args) -> str:
    return remote.render(_hosts_fix(*args))


def _apply(fix: str, text: str, tmp_path) -> str:
    path = tmp_path / "hosts"
    path.write_text(text)
    script = "\n".join(line for line in fix.splitlines() if not line.startswith("#"))
    subprocess.run(["bash", "-c", script.replace("/etc/hosts", str(path))], check=True, timeout=10)
    return path.read_text()


def test_parse_skips_comments_and_junk():
    lines = parse_etc_hosts("# c\nnot-an-address name\n10.0.0.1 a b # c\n\n")
    assert [(x.number, x.address, x.names) for x in lines] == [(3, "10.0.0.1", ("a", "b"))]


@pytest.mark.parametrize("text", [DEBIAN, CONTAINER], ids=["debian-127.0.1.1", "on-the-localhost-line"])
def test_the_fix_maps_the_name_to_its_address_and_keeps_the_rest(text, tmp_path):
    [line] = loopback_lines(text, "gpu-7")
    fix = hosts_fix("gpu-7", line, "gpu-7", "10.0.0.7")
    assert fix.startswith(f"# as root on gpu-7: /etc/hosts line {line.number} maps gpu-7 to {line.address}")
    after = _apply(fix, text, tmp_path)
    assert loopback_lines(after, "gpu-7") == []
    assert any(x.address == "10.0.0.7" and "gpu-7" in x.names for x in parse_etc_hosts(after))
    assert any(x.names[0] == "localhost" and x.address == "127.0.0.1" for x in parse_etc_hosts(after))
    assert len(parse_etc_hosts(after)) == len(parse_etc_hosts(text)) + (text is CONTAINER)


def test_a_name_that_is_not_plain_gets_a_comment_not_a_command():
    [line] = loopback_lines("127.0.1.1 node1\n", "node1")
    fix = hosts_fix("node1;reboot", line, "node1", "10.0.0.7")
    assert all(x.startswith("#") for x in fix.splitlines())
