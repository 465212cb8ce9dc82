"""reach checks over a FakeHost: where hosts come from, how each probe result becomes a cell,
a finding and a fix, and that the console table fits 80 columns."""

import io
import threading
import time

from distdoctor.api import Context
from distdoctor.engine import build_report, run_checks
from distdoctor.facts import Facts
from distdoctor.checks import reach
from distdoctor.facts import reach as R
from distdoctor.host import CommandResult
from distdoctor.launch import detect_context
from distdoctor.model import Status
from distdoctor.render import console
from distdoctor.testing import FakeHost, run_check

SSH_DENIED = "root@node2: Permission denied (publickey).\n"
SSH_CHANGED = ("@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
               "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
               "Offending ED25519 key in /home/u/.ssh/known_hosts:7\n"
               "Host key for node3 has changed and you have requested strict checking.\n"
               "Host key verification failed.\n")


def ssh_answers(per_host):
    """A FakeHost command answer for `ssh`: `ssh -G` dumps the config, `ssh ... true` answers
    per destination (rc, stderr)."""
    calls = []

    def answer(argv):
        calls.append(argv)
        dest = argv[argv.index("--") + 1]
        if "-G" in argv:
            port = argv[argv.index("-p") + 1] if "-p" in argv else "22"
            return CommandResult(argv, 0, f"user root\nhostname {dest}\nport {port}\n")
        rc, err = per_host.get(dest, (0, ""))
        return CommandResult(argv, rc, "", err, duration=0.2)
    return answer, calls


def run_with(host, info, params=None, options=None):
    facts = Facts(host)
    if options is not None:
        facts.options = options
    merged = {**info.params, **(params or {})}
    runs = run_checks([info], lambda _i: Context(facts, merged), jobs=1, total_timeout=info.timeout + 5)
    return runs[0]


def cluster_host(**kw):
    answer, calls = ssh_answers({"node2": (255, SSH_DENIED), "node3": (255, SSH_CHANGED)})
    host = FakeHost(
        resolve={"node1": ["10.0.0.1"], "node2": ["10.0.0.2"], "node3": ["10.0.0.3"], "node4": ["10.0.0.4"],
                 "node5": ["127.0.1.1"]},
        connect={("node1", 22): "ok", ("node2", 22): "ok", ("node3", 22): "ok", ("node5", 22): "ok",
                 ("node4", 22): "timeout", ("node1", 29500): "ok", ("node2", 29500): "refused",
                 ("node3", 29500): "ok", ("node4", 29500): "timeout", ("node5", 29500): "ok"},
        commands={"ssh": answer}, **kw)
    return host, calls


OPTIONS = {"hosts": ["node[1-5]"], "hostfile": None, "horovod_hosts": None, "ports": ["29500"]}


def test_this_nodes_own_name_on_loopback_is_left_to_the_gloo_check():
    """On node5 itself, node5 -> 127.0.1.1 reaches node5: not a reachability finding here (live,
    the loopback-name fault gave it besides the gloo finding, with a fix addressed to no node);
    another node's name on loopback still is one."""
    host, _calls = cluster_host(hostname="node5")
    run = run_with(host, reach.hosts, options=OPTIONS)
    assert not any("node5" in f.summary and "loopback" in f.summary for f in run.findings), \
        [f.summary for f in run.findings]
    host, _calls = cluster_host(hostname="node1")
    run = run_with(host, reach.hosts, options=OPTIONS)
    assert any(f.summary == "name resolution of node5: name resolves to a loopback address" for f in run.findings)


def test_no_hosts_skips_and_says_how():
    run = run_with(FakeHost(), reach.hosts, options={"hosts": [], "hostfile": None, "horovod_hosts": None,
                                                      "ports": []})
    assert run.status is Status.SKIP
    assert "--hostfile" in run.findings[0].summary and "--hosts" in run.findings[0].fix


def test_matrix_cells_groups_and_fixes():
    host, calls = cluster_host()
    run = run_with(host, reach.hosts, options=OPTIONS)
    assert run.status is Status.FAIL
    table = run.findings[0].evidence["table"]
    assert table["columns"] == ["host", "name", "tcp/22", "tcp/29500", "ssh"]
    cells = {row[0]: row[1:] for row in table["rows"]}
    assert cells["node1"][1:] == ["ok <1ms", "ok <1ms", "ok 200ms"]
    assert cells["node2"][2:] == ["refused", "key denied"]
    assert cells["node3"][3] == "hostkey changed"
    assert cells["node4"][1:3] == ["timeout", "timeout"]
    assert cells["node5"][0].startswith("loopback")
    by_summary = {f.summary: f for f in run.findings[1:]}
    denied = by_summary["ssh to node2: public key denied"]
    assert denied.status is Status.FAIL and "ssh-copy-id" in denied.fix
    changed = by_summary["ssh to node3: HOST KEY CHANGED"]
    assert 'ssh-keygen -f "/home/u/.ssh/known_hosts" -R node3' in changed.fix and "line 7" in changed.fix
    assert by_summary["ssh port 22 on node4: timed out"].status is Status.FAIL
    assert "firewall-cmd --permanent --add-port=22/tcp" in by_summary["ssh port 22 on node4: timed out"].fix
    # Refused on the rendezvous port before the job: the host answers, the store is not up yet.
    waiting = by_summary["TCP port 29500 on node2: the host answers, nothing listens yet (expected before rank 0 "
                         "starts the rendezvous)"]
    assert waiting.status is Status.OK and not waiting.fix
    assert by_summary["name resolution of node5: name resolves to a loopback address"].status is Status.WARN
    # node4's ssh cell is not repeated as its own finding: the closed-off port explains it
    # (FakeHost's ssh answered ok for node4, so there is nothing to repeat either way)
    per_host = {h["host"]: h for h in run.findings[0].evidence["hosts"]}
    assert per_host["node3"]["probes"]["ssh"]["known_hosts_line"] == 7
    assert per_host["node1"]["probes"]["name"]["addresses"] == ["10.0.0.1"]
    assert per_host["node2"]["source"] == "--hosts"


def test_refused_fails_on_a_service_port_and_not_on_a_rendezvous_port_before_the_job():
    """`check --only reach --ports 29500` before the job: refused is what a rendezvous port says
    until rank 0 starts; on any other port (or MASTER_PORT's own, when set) it is a fault."""
    def run(ports, env=None):
        host = FakeHost(env=env or {}, resolve={"node1": ["10.0.0.1"]},
                        connect={("node1", 22): "ok", ("node1", 29500): "refused", ("node1", 8080): "refused",
                                 ("node1", 29512): "refused"})
        return run_check(reach.hosts, host, {"hosts": ["node1"], "ports": ports, "ssh": False})
    before = run(["29500"])
    assert [f.status for f in before] == [Status.OK, Status.OK] and "nothing listens yet" in before[1].summary
    service = run(["8080"])
    assert service[0].status is Status.FAIL and service[1].summary == "TCP port 8080 on node1: connection refused"
    assert run(["29512"], {"MASTER_PORT": "29512"})[0].status is Status.OK


def test_ssh_argv_is_batch_mode_and_never_weakens_host_keys():
    host, calls = cluster_host()
    run_with(host, reach.hosts, params={"ssh_options": ["-F", "/etc/dd/ssh_config"], "probe_timeout": 2.5},
             options=OPTIONS)
    logins = [c for c in calls if "-G" not in c]
    assert len(logins) == 5
    for argv in logins:
        assert argv[:6] == ("ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3")
        assert argv[-1] == "true" and argv[-3] == "--"
        assert "-F" in argv
        joined = " ".join(argv).lower()
        assert "stricthostkeychecking" not in joined and "/dev/null" not in joined


def test_ssh_port_from_ssh_config_decides_the_tcp_probe():
    def answer(argv):
        if "-G" in argv:
            return CommandResult(argv, 0, "hostname 10.9.9.9\nport 2222\n")
        return CommandResult(argv, 0, "")
    host = FakeHost(resolve={"alias": ["10.9.9.9"]}, connect={("10.9.9.9", 2222): "ok"}, commands={"ssh": answer})
    run = run_with(host, reach.hosts, options={**OPTIONS, "hosts": ["alias"], "ports": []})
    assert run.status is Status.OK, run.findings
    assert run.findings[0].evidence["table"]["columns"][2] == "tcp/2222"


def test_slurm_nodelist_is_used_and_ssh_failures_only_warn():
    answer, _calls = ssh_answers({"gpu02": (255, SSH_DENIED)})
    host = FakeHost(env={"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[01-02]"},
                    resolve={"gpu01": ["10.0.0.1"], "gpu02": ["10.0.0.2"]},
                    connect={("gpu01", 22): "ok", ("gpu02", 22): "ok"},
                    commands={"ssh": answer, ("scontrol", "show", "hostnames", "gpu[01-02]"): "gpu01\ngpu02\n"})
    run = run_with(host, reach.hosts, options={"hosts": [], "hostfile": None, "horovod_hosts": None, "ports": []})
    assert run.status is Status.WARN
    assert "Slurm job 42" in run.findings[0].summary
    assert ("scontrol", "show", "hostnames", "gpu[01-02]") in host.calls
    assert "srun does not use ssh" in run.findings[1].explanation


def test_slurm_nodelist_without_scontrol_uses_hostlist():
    host = FakeHost(env={"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n[08-10]"})
    targets = R.slurm_targets(Facts(host).slurm_env)
    assert [t.name for t in targets.hosts] == ["n08", "n09", "n10"]


def test_hostlist_expression_cut_by_the_cli_is_rejoined():
    targets = R.collect_targets(FakeHost(), hosts=["gpu[01", "03]", "alice@login1", "-x@login2"])
    assert [(t.user, t.name) for t in targets.hosts] == [("", "gpu01"), ("", "gpu03"), ("alice", "login1")]
    assert targets.problems == ("--hosts: '-x' is not a user name",)


def test_bad_inputs_become_findings_with_line_numbers():
    host = FakeHost(files={"/tmp/hf": "node1 slots=2\nnode2 slots=two\n-evil\n", "/tmp/empty": "# none\n"})
    run = run_with(host, reach.hosts, options={"hosts": ["--oops"], "hostfile": "/tmp/hf", "horovod_hosts": "a:1,:2",
                                               "ports": ["0", "29500-29400", "x"]}, params={"ssh": False})
    summaries = [f.summary for f in run.findings]
    assert any(s.startswith("/tmp/hf:2:") for s in summaries)
    assert any(s.startswith("/tmp/hf:3:") and "begins with '-'" in s for s in summaries)
    assert any(s.startswith("--hosts:") and "begins with '-'" in s for s in summaries)
    assert any(s.startswith("-H entry:2:") for s in summaries)
    assert sum("is not a TCP port" in s for s in summaries) == 3
    empty = run_with(host, reach.hosts, options={"hosts": [], "hostfile": "/tmp/empty", "horovod_hosts": None,
                                                 "ports": []})
    assert [f.status for f in empty.findings] == [Status.FAIL, Status.FAIL]
    assert "lists no hosts" in empty.findings[0].summary
    missing = run_with(host, reach.hosts, options={"hosts": [], "hostfile": "/nope", "horovod_hosts": None,
                                                   "ports": []})
    assert "does not exist" in missing.findings[0].summary


def test_hosts_from_config_when_nothing_else():
    host = FakeHost(resolve={"c1": ["10.1.0.1"]}, connect={("c1", 22): "ok"})
    findings = run_check(reach.hosts, host, {"hosts": ["c1"], "ssh": False})
    assert findings[0].status is Status.OK and "config" in findings[0].summary


def test_weakening_ssh_options_are_called_out():
    host = FakeHost(resolve={"c1": ["10.1.0.1"]}, connect={("c1", 22): "ok"}, commands={"ssh": ssh_answers({})[0]})
    findings = run_check(reach.hosts, host, {"hosts": ["c1"], "ssh_options": "-o StrictHostKeyChecking=no"})
    assert findings[0].status is Status.WARN and "host-key checking off" in findings[0].summary


class HungResolver(FakeHost):
    def resolve(self, name, timeout=3.0):
        if name == "stuck":
            threading.Event().wait(10)
        return super().resolve(name, timeout)

    def connect(self, host, port, timeout=3.0):
        if host == "stuck":
            threading.Event().wait(10)
        return super().connect(host, port, timeout)


def test_a_hung_probe_is_abandoned_at_its_deadline():
    host = HungResolver(resolve={"fine": ["10.0.0.1"]}, connect={("fine", 22): "ok"})
    started = time.monotonic()
    rows = R.probe_hosts(host, [R.Target("fine"), R.Target("stuck")], R.ProbeSettings(timeout=0.2, ssh=False))
    assert time.monotonic() - started < 5
    assert rows[0].probes["name"].kind == "ok"
    assert rows[1].probes["name"].kind == "timeout" and "abandoned" in rows[1].probes["name"].message
    assert all(t.daemon for t in threading.enumerate() if t.name == "reach-probe")


def test_table_fits_80_columns():
    host, _calls = cluster_host()
    run = run_with(host, reach.hosts, options=OPTIONS)
    report = build_report([run], host="node1", context=detect_context({}), started=0, duration=1)
    buf = io.StringIO()
    console.render(report, console.make_console(buf, width=80, color=False), verbose=True)
    text = buf.getvalue()
    assert "hostkey changed" in text and "key denied" in text
    assert max(len(line) for line in text.splitlines() if not line.startswith("   $ ")) <= 80  # fixes stay whole


def test_long_lists_keep_failing_rows():
    names = [f"n{i:03d}" for i in range(60)]
    host = FakeHost(resolve={n: ["10.0.0.1"] for n in names}, connect={(n, 22): "ok" for n in names[:-1]})
    findings = run_check(reach.hosts, host, {"hosts": names, "ssh": False, "max_rows": 10})
    rows = findings[0].evidence["table"]["rows"]
    assert len(rows) == 11 and rows[-1][0] == "(+50 more, all ok)"
    assert ["n059", "ok <1ms", "refused"] in rows
    assert len(findings[0].evidence["hosts"]) == 60


# --- reach.master-port ------------------------------------------------------------------------

class Master(FakeHost):
    def __init__(self, bind="", **kw):
        super().__init__(**kw)
        self.bind = bind

    def can_bind(self, address, port):
        return self.bind


def master(env, **kw):
    kw.setdefault("resolve", {"node1": ["10.0.0.1"], "localhost": ["127.0.0.1"]})
    kw.setdefault("if_addrs", {"eth0": [{"family": "inet", "address": "10.0.0.2", "netmask": None}]})
    return run_check(reach.master_port, Master(env=env, **kw))


def test_master_unset_skips():
    assert master({})[0].status is Status.SKIP


def test_master_bad_port_and_unresolvable():
    assert master({"MASTER_ADDR": "node1", "MASTER_PORT": "http"})[0].status is Status.FAIL
    assert "does not resolve" in master({"MASTER_ADDR": "nosuch", "MASTER_PORT": "29500"})[0].summary


def test_master_loopback_in_multinode_job_fails():
    findings = master({"MASTER_ADDR": "localhost", "MASTER_PORT": "29500", "SLURM_JOB_NUM_NODES": "2"})
    assert findings[0].status is Status.FAIL and "2-node job" in findings[0].summary


def test_master_port_in_use_on_the_master_node():
    findings = master({"MASTER_ADDR": "node1", "MASTER_PORT": "29500"}, bind="address in use",
                      if_addrs={"eth0": [{"family": "inet", "address": "10.0.0.1", "netmask": None}]})
    assert findings[0].status is Status.FAIL and "already in use" in findings[0].summary
    assert "ss -ltnp" in findings[0].fix


def test_master_from_another_node():
    ok = master({"MASTER_ADDR": "node1", "MASTER_PORT": "29500"}, connect={("node1", 29500): "refused"})
    assert ok[0].status is Status.OK and "nothing listens" in ok[0].summary
    dead = master({"MASTER_ADDR": "node1", "MASTER_PORT": "29500"}, connect={("node1", 29500): "timeout"})
    assert dead[0].status is Status.FAIL and "firewall-cmd" in dead[0].fix
    torchrun = master({"MASTER_ADDR": "node1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"},
                      connect={("node1", 29500): "refused"})
    assert torchrun[0].status is Status.FAIL


def test_missing_ssh_client_is_named_with_its_package():
    host = FakeHost(resolve={"c1": ["10.1.0.1"]}, connect={("c1", 22): "ok"})
    findings = run_check(reach.hosts, host, {"hosts": ["c1"]})
    assert findings[0].evidence["table"]["rows"] == [["c1", "ok <1ms", "ok <1ms", "error"]]
    assert "openssh-client" in findings[1].fix and findings[1].status is Status.FAIL


def test_only_local_rank_zero_probes():
    host = FakeHost(env={"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
                         "SLURM_JOB_NODELIST": "n[1-2]"})
    findings = run_check(reach.hosts, host)
    assert findings[0].status is Status.SKIP and "local rank 1" in findings[0].summary
    assert not any(c[0] == "ssh" for c in host.calls)


def test_connection_closed_before_key_exchange_points_at_maxstartups():
    answer, _ = ssh_answers({"c1": (255, "kex_exchange_identification: Connection closed by remote host\r\n"
                                         "Connection closed by 10.1.0.1 port 22\r\n")})
    host = FakeHost(resolve={"c1": ["10.1.0.1"]}, connect={("c1", 22): "ok"}, commands={"ssh": answer})
    findings = run_check(reach.hosts, host, {"hosts": ["c1"]})
    assert findings[1].summary == "ssh to c1: failed (kex_exchange_identification: Connection closed by remote host)"
    assert "MaxStartups" in findings[1].explanation


def test_malformed_job_nodelist_is_a_problem_naming_the_variable():
    host = FakeHost(env={"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-"})
    targets = R.slurm_targets(Facts(host).slurm_env)
    assert targets.hosts == ()
    assert targets.problems and targets.problems[0].startswith("SLURM_JOB_NODELIST='n[1-'")
