"""Host grouping, probe planning and the verdict on timed probes (pure logic), and the timed
transfer against real sockets on the loopback."""

import socket
import threading

from distdoctor.nccltest import hostmesh, mesh


def fp(rank, host, address):
    return {"rank": rank, "host": host, "address": address}


def test_ranks_group_by_host_and_the_lowest_rank_leads():
    hmap = hostmesh.group([fp(3, "b", "10.0.0.2"), fp(0, "a", "10.0.0.1"), fp(1, "a", "10.0.0.1"),
                           fp(2, "b", "10.0.0.2")])
    assert hmap.hosts == ["a", "b"] and hmap.ranks == [[0, 1], [2, 3]]
    assert [hmap.leader(i) for i in range(2)] == [0, 2]
    assert hmap.label(1) == "b (ranks 2-3)"
    assert hmap.index_of_rank() == {0: 0, 1: 0, 2: 1, 3: 1}


def test_one_hostname_on_two_machines_is_two_hosts():
    hmap = hostmesh.group([fp(0, "node", "10.0.0.1"), fp(1, "node", "10.0.0.2")])
    assert hmap.hosts == ["node[10.0.0.1]", "node[10.0.0.2]"]


def test_full_mesh_up_to_the_threshold_and_every_host_sends_and_receives_above_it():
    assert len(hostmesh.mesh_pairs(4)) == 12
    assert len(hostmesh.mesh_pairs(40, "full")) == 40 * 39
    pairs = hostmesh.mesh_pairs(40)
    assert len(pairs) < 40 * 39 / 4
    assert {s for s, _ in pairs} == set(range(40)) == {d for _, d in pairs}


def test_targets_start_with_the_next_host_so_receivers_do_not_collide():
    order = hostmesh.targets(hostmesh.mesh_pairs(4), 4)
    assert order[0] == [1, 2, 3] and order[2] == [3, 0, 1]
    # at each step every receiver gets one sender
    for step in range(3):
        assert sorted(order[s][step] for s in range(4)) == [0, 1, 2, 3]


def ok_probe(rate, seconds=0.5):
    return {"status": "ok", "rate_gbs": rate, "seconds": seconds, "moved": int(rate * seconds * 1e9)}


def test_a_throttled_sender_is_named_and_nothing_else():
    results = {(s, d): ok_probe(0.005 if s == 3 else 0.48) for s in range(4) for d in range(4) if s != d}
    verdict = hostmesh.judge(4, results)
    assert [(h, sorted(ways)) for h, ways, _m in verdict.slow_hosts] == [(3, ["sending"])]
    assert verdict.slow_links == [] and verdict.blocked == [] and verdict.stalled == []
    hmap = hostmesh.group([fp(r, f"h{r}", f"10.0.0.{r + 1}") for r in range(4)])
    found = hostmesh.findings(hmap, verdict, 12, 1 << 20)
    assert [f.status.value for f in found] == ["fail"]
    assert found[0].summary == "h3 is slow: 0.005 GB/s vs median 0.48 GB/s on pairs with h3 (sending; ranks 3)"


def test_a_slow_link_between_fast_hosts_is_the_link():
    results = {(s, d): ok_probe(0.01 if (s, d) == (1, 2) else 0.5) for s in range(4) for d in range(4) if s != d}
    verdict = hostmesh.judge(4, results)
    assert verdict.slow_hosts == [] and [(s, d) for s, d, _r, _m in verdict.slow_links] == [(1, 2)]


def test_fast_transfers_under_the_noise_floor_are_not_outliers():
    # 1 MiB in 1 ms and in 5 ms: both latency, neither slow
    results = {(s, d): {"status": "ok", "rate_gbs": 1.0 if d else 0.2, "seconds": 0.001 if d else 0.005,
                        "moved": 1 << 20} for s in range(4) for d in range(4) if s != d}
    verdict = hostmesh.judge(4, results)
    assert verdict.slow_hosts == [] and verdict.slow_links == []


def test_blocked_stalled_and_silent_are_each_named():
    results = {(0, 1): {"status": "timeout"}, (1, 0): ok_probe(0.5), (0, 2): {"status": "stalled", "moved": 65536},
               (2, 0): ok_probe(0.5), (1, 2): ok_probe(0.5), (2, 1): ok_probe(0.5)}
    verdict = hostmesh.judge(4, results, silent=[3])
    hmap = hostmesh.group([fp(r, f"h{r}", f"10.0.0.{r + 1}") for r in range(4)])
    text = [f.summary for f in hostmesh.findings(hmap, verdict, 12, 1 << 20)]
    assert text[0] == "1 of 12 host-to-host connections fail: 0(h0)->1(h1): timeout"
    assert text[1] == "h0 (rank 0) -> h2 (rank 2): small messages pass, a 1 MiB transfer stalled after 64 KiB " \
                      "left the sender"
    assert text[2] == "no connection results from h3 (rank 3)"


def test_a_measured_path_mtu_names_the_size_and_lowers_only_the_ends_above_it():
    """Jumbo on h0, 1500 on h1, the path carries 1500: only h0 comes down (by what the path
    carries, not by majority); both directions stalled read as one finding, one fix."""
    path = {"route_mtu": 9000, "passes": 1500, "fails": [9000, 8192, 4096, 4092]}
    results = {(0, 1): {"status": "stalled", "moved": 65536, "path": path},
               (1, 0): {"status": "stalled", "moved": 65536, "path": path}}
    fps = [{**fp(0, "h0", "10.0.0.1"), "interface": "eth0", "mtu": 9000},
           {**fp(1, "h1", "10.0.0.2"), "interface": "ens5", "mtu": 1500}]
    [found] = hostmesh.findings(hostmesh.group(fps), hostmesh.judge(2, results), 2, 1 << 20)
    assert found.summary.startswith("h0 (rank 0) -> h1 (rank 1): the path carries packets of 1500 bytes, not 9000 ")
    assert found.fix.splitlines()[0] == "ssh h0 ip link set dev eth0 mtu 1500"
    assert found.fix.splitlines()[1].startswith("# lasts until a reboot")
    assert "h1 ip link" not in found.fix
    # Nothing measured (UDP filtered): the stall as before, no MTU verdict.
    results = {(0, 1): {"status": "stalled", "moved": 1, "path": {"route_mtu": 9000, "passes": 0, "no_echo": True}}}
    [found] = hostmesh.findings(hostmesh.group(fps), hostmesh.judge(2, results), 2, 1 << 20)
    assert "small messages pass" in found.summary


def test_a_host_that_advertises_loopback_is_not_given_a_firewall_rule():
    """Live (loopback-name-node1): rank 0's name on 127.0.1.1, so it advertised 127.0.0.1 and
    node2's probe was refused by its own loopback; the fix was an nft rule for node1."""
    results = {(1, 0): {"status": "refused"}, (0, 1): ok_probe(0.5)}
    hmap = hostmesh.group([fp(0, "node1", "127.0.0.1"), fp(1, "node2", "10.0.0.2")])
    [found] = hostmesh.findings(hmap, hostmesh.judge(2, results), 2, 1 << 20)
    assert found.summary == ("the other hosts cannot connect to node1 (rank 0) at 127.0.0.1: a loopback address, "
                             "where each connects to itself")
    assert "nft" not in found.fix and found.fix.startswith("# map node1 to the cluster address")


def test_a_stall_through_a_shaper_names_the_shaper_not_the_mtu():
    """Live (bench/live_faults.py tbf-1mbit-node2): 1 Mbit/s on node2's eth0, the 1 MiB transfer
    did not finish, the probes got no echo through the full queue, and the fix was to compare
    MTUs. The end with the shaper is named, with the tc line for it."""
    results = {(1, 0): {"status": "stalled", "moved": 720896, "path": {"route_mtu": 1500, "passes": 0,
                                                                        "no_echo": True}},
               (0, 1): ok_probe(0.5)}
    fps = [{**fp(0, "node1", "10.0.0.1"), "interface": "eth0", "mtu": 1500, "qdisc": "noqueue"},
           {**fp(1, "node2", "10.0.0.2"), "interface": "eth0", "mtu": 1500, "qdisc": "tbf"}]
    [found] = hostmesh.findings(hostmesh.group(fps), hostmesh.judge(2, results), 2, 1 << 20)
    assert found.summary == ("node2 (rank 1) -> node1 (rank 0): a 1 MiB transfer did not finish in time (704 KiB "
                             "left the sender): node2's eth0 has a tbf queueing discipline (a rate limit (token "
                             "bucket filter))"), found.summary
    assert found.fix.splitlines() == ["ssh node2 'tc qdisc show dev eth0 && tc qdisc del dev eth0 root'",
                                      "# unless someone set it on purpose"], found.fix


def test_path_mtu_against_a_real_listener_on_the_loopback():
    listener = mesh.Listener("127.0.0.1", 0)
    try:
        got = mesh.path_mtu("127.0.0.1", listener.port)
    finally:
        listener.close()
    assert got["route_mtu"] == 65535 and got["passes"] == 65535
    assert mesh.path_mtu("127.0.0.1", listener.port)["no_echo"] is True  # closed: nobody echoes


def test_healthy_mesh_is_one_ok():
    results = {(s, d): ok_probe(0.5) for s in range(3) for d in range(3) if s != d}
    hmap = hostmesh.group([fp(r, f"h{r}", f"10.0.0.{r + 1}") for r in range(3)])
    [only] = hostmesh.findings(hmap, hostmesh.judge(3, results), 6, 1 << 20)
    assert only.status.value == "ok" and only.summary.startswith("all 6 host-to-host connections work")


def test_a_timed_transfer_over_real_sockets():
    listener = mesh.Listener("127.0.0.1", rank=1)
    try:
        listener.set_token("tok")
        probe = mesh.probe_transfer(1, "127.0.0.1", listener.port, "tok", 0, timeout=5, nbytes=1 << 20)
        assert probe.status == "ok" and probe.moved == 1 << 20 and probe.rate_gbs > 0
        row = mesh.probe_hosts({1: ("127.0.0.1", listener.port)}, "tok", 0, timeout=5, nbytes=1 << 16, budget=10)
        assert row[1].status == "ok" and row[1].moved == 1 << 16
    finally:
        listener.close()


def test_a_peer_that_takes_the_handshake_and_never_reads_is_a_stall():
    """A fake peer answers the handshake, then stops reading: the bytes pile up in the buffers
    and the transfer ends at its timeout as 'stalled', with what left the sender."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    held = []

    def answer():
        conn, _ = server.accept()
        held.append(conn)
        conn.recv(256)
        conn.sendall(b"OK 1\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        probe = mesh.probe_transfer(1, "127.0.0.1", server.getsockname()[1], "tok", 0, timeout=1,
                                    nbytes=64 << 20)
    finally:
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()
    assert probe.status == "stalled" and 0 < probe.moved < 64 << 20


def test_garbage_on_the_mesh_port_is_rejected_and_bounded():
    listener = mesh.Listener("127.0.0.1", rank=1)
    try:
        listener.set_token("tok")
        for junk in (b"\x00\xff" * 5000, b"DDNT1 tok 0 999999999999\n", b"GET / HTTP/1.0\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", listener.port), timeout=2) as sock:
                sock.settimeout(2)
                sock.sendall(junk)
                reply = sock.recv(64)
            assert reply in (b"NO\n", b"OK 1\n"), reply
        # the listener still serves the job
        assert mesh.probe(1, "127.0.0.1", listener.port, "tok", 0, timeout=2) == "ok"
    finally:
        listener.close()


def test_a_pair_the_budget_left_untimed_is_not_shown_as_measured():
    """h2's row: one transfer stalled and used the budget, so its second target got only the
    handshake; the table says so instead of 'ok'. Without transfers planned, 'ok' is all there is."""
    hmap = hostmesh.group([fp(0, "h0", "10.0.0.1"), fp(1, "h1", "10.0.0.2"), fp(2, "h2", "10.0.0.3")])
    results = {(2, 0): {"status": "stalled", "moved": 1 << 20}, (2, 1): {"status": "ok", "moved": 0},
               (0, 1): {"status": "ok", "moved": 1 << 20, "rate_gbs": 0.5}}
    rows = {row[0]: row[1:] for row in hostmesh.host_table(hmap, results, 1 << 20)["rows"]}
    assert rows["2 h2"] == ["stalled", "ok, untimed", "-"]
    assert rows["0 h0"] == ["-", "ok", "?"]
    rows = {row[0]: row[1:] for row in hostmesh.host_table(hmap, results)["rows"]}
    assert rows["2 h2"] == ["stalled", "ok", "-"]


def test_a_host_arriving_from_another_address_than_it_advertises_is_behind_nat():
    hmap = hostmesh.group([fp(0, "a", "10.0.0.1"), fp(1, "b", "172.17.0.2"), fp(2, "c", "10.0.0.3")])
    [found] = hostmesh.nat_findings(hmap, {1: "10.0.0.2", 2: "10.0.0.3"})
    assert found.subject == "b" and "advertises 172.17.0.2 but its connections arrive from 10.0.0.2" in found.summary
    assert "--network=host" in found.fix
    assert hostmesh.nat_findings(hmap, {1: "172.17.0.2", 2: "junk"}) == []
    # Arriving from another address of its own (two on one host) is not NAT.
    assert hostmesh.nat_findings(hmap, {1: "10.0.0.2"}, {1: ["172.17.0.2", "10.0.0.2"]}) == []


def _scripted_transfers(monkeypatch, seconds_by_try):
    """probe_hosts over scripted peers: every handshake passes, and the k-th transfer to rank r
    takes seconds_by_try[r][k] (1 MiB each). Returns the tries made per rank."""
    tries: dict[int, int] = {}
    monkeypatch.setattr(mesh, "probe_all", lambda peers, *a, **k: {r: "ok" for r in peers})

    def transfer(rank, address, port, token, my_rank, timeout, nbytes, transfer_timeout=None):
        k = tries.get(rank, 0)
        tries[rank] = k + 1
        took = seconds_by_try[rank][min(k, len(seconds_by_try[rank]) - 1)]
        return mesh.Probe("ok", nbytes / took / 1e9, took, nbytes)

    monkeypatch.setattr(mesh, "probe_transfer", transfer)
    return tries


def test_a_target_slow_on_one_try_is_measured_again_and_the_faster_try_counts(monkeypatch):
    tries = _scripted_transfers(monkeypatch, {1: [0.004], 2: [0.045, 0.004], 3: [0.005]})
    row = mesh.probe_hosts({r: ("127.0.0.1", 1) for r in (1, 2, 3)}, "tok", 0, timeout=1, nbytes=1 << 20, budget=10)
    assert tries == {1: 1, 2: 2, 3: 1}
    assert row[2].seconds == 0.004


def test_a_target_slow_on_both_tries_stays_slow_and_a_slow_sender_retries_nothing(monkeypatch):
    tries = _scripted_transfers(monkeypatch, {1: [0.004], 2: [0.3, 0.2]})
    row = mesh.probe_hosts({1: ("127.0.0.1", 1), 2: ("127.0.0.1", 1)}, "tok", 0, timeout=1, nbytes=1 << 20, budget=10)
    assert tries == {1: 1, 2: 2} and row[2].seconds == 0.2
    tries = _scripted_transfers(monkeypatch, {1: [0.3], 2: [0.35]})
    mesh.probe_hosts({1: ("127.0.0.1", 1), 2: ("127.0.0.1", 1)}, "tok", 0, timeout=1, nbytes=1 << 20, budget=10)
    assert tries == {1: 1, 2: 1}
