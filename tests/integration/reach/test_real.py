"""Every classification of reach.hosts produced for real: a key-only sshd in a network namespace
and one on a loopback port, a closed port, an nft DROP rule, a socket that never accepts, an
unknown and a changed host key, a name that does not resolve, a name that maps to loopback.

The product runs as the installed CLI inside a private mount namespace whose /etc/hosts names
the test hosts and whose resolv.conf points at a loopback address where nothing listens, so
no query leaves the machine. All traffic stays on loopback or inside the namespace.
"""

import os
import socket
import subprocess
import time

import pytest

from distdoctor.checks import reach
from distdoctor.facts import reach as R
from distdoctor.host import Host
from distdoctor.model import Status
from distdoctor.testing import run_check
from tests.conftest import load_report, distdoctor_argv
from tests.harness import apt
from tests.harness.netns import Namespaces
from tests.harness.runprefix import RUN
from tests.harness.sshd import SilentListener, SshLab, free_port


NS_IP, ROOT_IP = f"{RUN.subnet('reach')}.2", f"{RUN.subnet('reach')}.1"  # the run's own /24
HOSTS = ("ddr-good", "ddr-denied", "ddr-newkey", "ddr-changed", "ddr-closed", "ddr-dropped")
DROPPED_PORT = 2323


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("network namespaces and sshd's private /run need root")
    apt.ensure("nftables", "iproute2", "util-linux")
    base = tmp_path_factory.mktemp("ddr-sshd")
    ns = Namespaces("ddr")
    lab = SshLab(base, ns)
    silent = None
    try:
        lab.start_netns_host("a", NS_IP, ROOT_IP)
        lo_port = lab.start_loopback()
        # a DROP rule inside the namespace: SYNs to this port vanish, connects time out
        ns.run("a", ["nft", "add", "table", "inet", "ddr"])
        ns.run("a", ["nft", "add", "chain", "inet", "ddr", "input",
                     "{ type filter hook input priority 0; policy accept; }"])
        ns.run("a", ["nft", "add", "rule", "inet", "ddr", "input", "tcp", "dport", str(DROPPED_PORT), "drop"])
        silent = SilentListener()
        key = lab.public_key("host_key")
        with open(lab.path("known_hosts"), "w") as fh:
            fh.write(f"{','.join(h for h in HOSTS if h != 'ddr-changed')},{NS_IP} {key}\n")
            fh.write(f"[ddr-lo]:{lo_port},[127.0.0.1]:{lo_port} {key}\n")
        with open(lab.path("known_hosts.wrong"), "w") as fh:
            fh.write(f"ddr-changed {lab.public_key('other_host_key')}\n")
        open(lab.path("known_hosts.empty"), "w").close()
        # What a user's ~/.ssh/config would hold: per-host ports and keys. Host-key checking
        # is left at ssh's default (ask, which BatchMode turns into a refusal).
        with open(lab.path("ssh_config"), "w") as fh:
            fh.write(f"Host ddr-denied\n  IdentityFile {lab.path('id_unknown')}\n"
                     f"Host ddr-newkey\n  UserKnownHostsFile {lab.path('known_hosts.empty')}\n"
                     f"Host ddr-changed\n  UserKnownHostsFile {lab.path('known_hosts.wrong')}\n"
                     "Host ddr-closed\n  Port 2299\n"
                     f"Host ddr-dropped\n  Port {DROPPED_PORT}\n"
                     f"Host ddr-lo\n  Port {lo_port}\n"
                     f"Host * !ddr-denied\n  IdentityFile {lab.path('id_ed25519')}\n"
                     f"Host *\n  User root\n  IdentitiesOnly yes\n  IdentityAgent none\n"
                     f"  UserKnownHostsFile {lab.path('known_hosts')}\n  LogLevel ERROR\n")
        with open(lab.path("hosts"), "w") as fh:
            fh.write("127.0.0.1 localhost\n" + "".join(f"{NS_IP} {h}\n" for h in HOSTS) + "127.0.0.1 ddr-lo\n")
        with open(lab.path("resolv.conf"), "w") as fh:
            fh.write("nameserver 127.83.0.53\noptions timeout:1 attempts:1\n")
        with open(lab.path("config.toml"), "w") as fh:
            fh.write('[checks."reach.hosts"]\n'
                     f'ssh_options = ["-F", "{lab.path("ssh_config")}"]\nprobe_timeout = 2\n')
        yield {"lab": lab, "lo_port": lo_port, "silent": silent, "ns": ns}
    finally:
        if silent is not None:
            silent.close()
        lab.stop()
        ns.cleanup()


def run_cli(lab, *args, **env_extra):
    """distdoctor with the lab's /etc/hosts and resolv.conf, in a private mount namespace."""
    script = 'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && shift 2 && exec "$@"'
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            lab["lab"].path("hosts"), lab["lab"].path("resolv.conf"), *distdoctor_argv(), "check",
            "--config", lab["lab"].path("config.toml"), *args]
    env = dict(os.environ, XDG_CONFIG_HOME=lab["lab"].path("xdg"), **env_extra)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def test_every_ssh_and_tcp_classification_against_real_sshd(lab):
    hosts = ",".join(HOSTS + ("ddr-lo", "ddr-nosuch.invalid"))
    started = time.monotonic()
    proc = run_cli(lab, "--only", "reach.hosts", "--format", "json", "--hosts", hosts,
                   "--ports", str(lab["silent"].port))
    wall = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = load_report(proc.stdout)
    (run,) = doc["checks"]
    per_host = {h["host"]: h["probes"] for h in run["findings"][0]["evidence"]["hosts"]}
    ssh = {h: p["ssh"]["status"] for h, p in per_host.items()}
    assert ssh == {"ddr-good": "ok", "ddr-denied": "key_denied", "ddr-newkey": "hostkey_unknown",
                   "ddr-changed": "hostkey_changed", "ddr-closed": "refused", "ddr-dropped": "timeout",
                   "ddr-lo": "ok", "ddr-nosuch.invalid": "not_resolved"}, per_host
    tcp_ssh = {h: (p["tcp/ssh"]["status"], p["tcp/ssh"].get("port")) for h, p in per_host.items()}
    assert tcp_ssh["ddr-good"] == ("ok", 22)
    assert tcp_ssh["ddr-closed"] == ("refused", 2299)
    assert tcp_ssh["ddr-dropped"] == ("timeout", DROPPED_PORT)
    assert tcp_ssh["ddr-lo"] == ("ok", lab["lo_port"])
    silent = f"tcp/{lab['silent'].port}"
    assert per_host["ddr-lo"][silent]["status"] == "timeout"  # listens, never accepts
    assert per_host["ddr-good"][silent]["status"] == "refused"  # closed port in the namespace
    names = {h: p["name"]["status"] for h, p in per_host.items()}
    assert names["ddr-good"] == "ok" and per_host["ddr-good"]["name"]["addresses"] == [NS_IP]
    assert names["ddr-lo"] == "loopback" and names["ddr-nosuch.invalid"] == "not_resolved"
    assert per_host["ddr-changed"]["ssh"]["known_hosts_file"] == lab["lab"].path("known_hosts.wrong")
    for probes in per_host.values():  # never weakened, always batch mode with a connect timeout
        argv = " ".join(probes["ssh"].get("argv", []))
        assert "BatchMode=yes" in argv and "ConnectTimeout=2" in argv
        assert "StrictHostKeyChecking" not in argv and "/dev/null" not in argv
    summaries = [f["summary"] for f in run["findings"][1:]]
    assert "ssh to ddr-newkey: host key not known here" in summaries
    assert "ssh to ddr-changed: HOST KEY CHANGED" in summaries
    assert f"ssh port {DROPPED_PORT} on ddr-dropped: timed out" in summaries
    # ddr-dropped's ssh timeout is explained by its port's timeout: not a second finding
    assert not any(s.startswith("ssh to ddr-dropped") for s in summaries)
    assert wall < 30  # bounded; the speed goal itself is bench/reach_scale.py


def test_console_table_at_80_columns(lab):
    # Piped output is 100 columns unless COLUMNS says otherwise (render/console.py): ask for 80.
    proc = run_cli(lab, "--only", "reach.hosts", "--hosts", "ddr-good,ddr-denied,ddr-dropped,ddr-lo", COLUMNS="80")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines if not line.startswith("   $ ")) <= 80, proc.stdout  # fixes stay whole
    # (the renderer may indent the table under its check)
    header = next(line for line in lines if line.split()[:2] == ["host", "name"])
    assert header.split() == ["host", "name", "tcp/ssh", "ssh"]
    row = next(line for line in lines if line.strip().startswith("ddr-denied "))
    assert "key denied" in row
    assert "ssh-copy-id -i ~/.ssh/id_ed25519.pub ddr-denied" in proc.stdout


def test_hostfile_and_horovod_list_against_real_sshd(lab, tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# job hosts\nddr-good slots=4\nddr-lo:2\nbad line here\n")
    proc = run_cli(lab, "--only", "reach.hosts", "--format", "json", "--hostfile", str(hostfile),
                   "-H", "ddr-denied:4")
    run = load_report(proc.stdout)["checks"][0]
    matrix = next(f for f in run["findings"] if "table" in f["evidence"])
    hosts = {h["host"]: h for h in matrix["evidence"]["hosts"]}
    assert run["findings"][0]["summary"].startswith(f"{hostfile}:4:")
    assert hosts["ddr-good"]["slots"] == 4 and hosts["ddr-good"]["source"] == f"{hostfile}:2"
    assert hosts["ddr-good"]["probes"]["ssh"]["status"] == "ok"
    assert hosts["ddr-denied"]["probes"]["ssh"]["status"] == "key_denied"
    assert hosts["ddr-denied"]["source"] == "-H"


def test_silent_socket_times_out_for_tcp_and_ssh_without_root_tricks():
    apt.ensure("openssh-client")
    silent = SilentListener()
    try:
        settings = R.ProbeSettings(timeout=1, ssh_port=silent.port,
                                   ssh_options=("-F", "/dev/null", "-o", "IdentityAgent=none"))
        (row,) = R.probe_hosts(Host(), [R.Target("127.0.0.1")], settings)
    finally:
        silent.close()
    assert row.probes["tcp/ssh"].kind == "timeout"
    assert row.probes["ssh"].kind == "timeout"
    assert row.probes["name"].kind == "ok"  # an address literal given alone is not a finding


def test_master_port_bind_and_connect_for_real():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        busy = run_check(reach.master_port, Host(env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}))
        assert busy[-1].status is Status.FAIL and "already in use" in busy[-1].summary
    finally:
        holder.close()
    free = run_check(reach.master_port, Host(env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}))
    assert free[-1].status is Status.OK and "free to bind" in free[-1].summary



def test_slurm_job_nodelist_through_real_scontrol(tmp_path):
    """Inside a job, with no hosts given, the job's nodes are probed: the nodelist is expanded
    by the real `scontrol show hostnames` (a minimal slurm.conf is enough, no daemon)."""
    apt.ensure("slurm-client")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=ddr\nSlurmctldHost=localhost\nNodeName=n[1-2] CPUs=1\nPartitionName=p Nodes=ALL\n")
    config = tmp_path / "config.toml"
    config.write_text('[checks."reach.hosts"]\nssh_options = ["-F", "/dev/null", "-o", "IdentityAgent=none"]\n'
                      f"probe_timeout = 1\nssh_port = {free_port()}\n")  # a closed port
    env = dict(os.environ, SLURM_CONF=str(conf), SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="127.0.0.[1-2]",
               XDG_CONFIG_HOME=str(tmp_path))
    proc = subprocess.run([*distdoctor_argv(), "check", "--only", "reach.hosts", "--format", "json",
                           "--config", str(config)], capture_output=True, text=True, timeout=60, env=env)
    run = load_report(proc.stdout)["checks"][0]
    matrix = run["findings"][0]
    assert [h["host"] for h in matrix["evidence"]["hosts"]] == ["127.0.0.1", "127.0.0.2"]
    assert matrix["evidence"]["origin"] == "Slurm job 4242"
    # nothing listens on that port: under Slurm that is a WARN, not a FAIL
    ssh_findings = [f for f in run["findings"][1:] if f["evidence"]["probe"] in ("ssh", "tcp/ssh")]
    assert ssh_findings and all(f["status"] == "warn" for f in ssh_findings)
    assert "srun does not use ssh" in ssh_findings[0]["explanation"]
