"""How a fix reaches its nodes (distdoctor/remote.py): plain names get ssh or clush, anything
else a one-line comment; every command printed here is parsed by a real shell."""

import shlex
import subprocess

from distdoctor import remote


def bash_words(line: str) -> list[str]:
    """The words a real bash makes of line (printed, not run)."""
    out = subprocess.run(["bash", "-c", 'printf "%s\\0" ' + line], capture_output=True, text=True, timeout=10)
    return out.stdout.split("\0")[:-1]


def test_one_node_gets_ssh_several_get_clush_and_the_command_runs_there():
    assert remote.on(["gpu003"], "ip link set dev eth0 mtu 9000") == "ssh gpu003 ip link set dev eth0 mtu 9000"
    line = remote.on(["gpu007", "gpu012"], "rm -f /etc/machine-id && systemd-machine-id-setup")
    assert line == "clush -w 'gpu[007,012]' -- 'rm -f /etc/machine-id && systemd-machine-id-setup'"
    # bash hands clush the node set unglobbed and the whole command as one word for the node's shell
    assert bash_words(line) == ["clush", "-w", "gpu[007,012]", "--", "rm -f /etc/machine-id && systemd-machine-id-setup"]


def test_names_a_shell_cannot_use_get_a_one_line_comment_and_the_rest_their_command():
    text = remote.on(["gpu1", "gpu2;reboot", "gpu3\nreboot", "localhost"], "ibstat")
    lines = text.splitlines()
    assert lines[0] == "ssh gpu1 ibstat"
    assert all(line.startswith("#") for line in lines[1:]) and len(lines) == 3, lines
    assert "gpu2;reboot" in lines[1] and "gpu3\\nreboot" in lines[1] and "localhost" in lines[1]
    assert lines[2] == "#   ibstat"


def test_report_files_are_named_as_such():
    text = remote.on(["/tmp/r1.json", "/tmp/r2.json"], "ibstat", by_file=["/tmp/r1.json", "/tmp/r2.json"])
    assert text.splitlines()[0].startswith("# ") and "are report files whose nodes share a hostname" in text
    assert not any(line.startswith(("ssh", "clush")) for line in text.splitlines())


def test_plain_values_and_host_names():
    assert remote.plain("2.4.1+cu121") and remote.plain(68719476736) and remote.plain("eth0")
    for bad in ("2.3; reboot", "$(reboot)", "a b", "", None, True, "x\ny", "`id`"):
        assert not remote.plain(bad), bad
    assert remote.host_name("gpu-001.cluster") and remote.host_name("10.0.0.4")
    for bad in ("localhost", "127.0.0.1", "-oProxyCommand=x", "a;b", "", "a b"):
        assert not remote.host_name(bad), bad


def test_argument_quotes_only_what_needs_it():
    assert remote.argument("python3 -m pip install torch==2.4.1") == "python3 -m pip install torch==2.4.1"
    for command in ('echo "* - memlock unlimited" > /etc/x.conf', "a 'b", "dmesg | tail"):
        assert shlex.split(remote.argument(command)) == [command]


def test_through_slurm_one_task_per_node_and_a_shell_line_gets_its_shell():
    assert remote.on(["node2"], "python3 -m distdoctor check -v", srun=True) == \
        "srun -w node2 -N1 -n1 python3 -m distdoctor check -v"
    line = remote.on(["n1", "n2"], "echo a && echo b", srun=True)
    assert bash_words(line) == ["srun", "-w", "n[1-2]", "-N2", "-n2", "bash", "-c", "echo a && echo b"]
    assert remote.on(["n;1"], "ibstat", srun=True).startswith("# ")


def test_a_command_aimed_at_a_target_names_it_only_when_it_is_plainly_a_host():
    assert remote.toward("h1", "tracepath -n {}", "10.0.0.2") == "ssh h1 tracepath -n 10.0.0.2"
    assert remote.toward("h1", "tracepath -n {}", "h2;reboot") == "# on h1: tracepath -n h2;reboot"
