"""The mesh probe against real sockets on the loopback."""

import socket

from distdoctor.nccltest import mesh


def test_peer_with_the_token_answers_ok():
    listener = mesh.Listener("127.0.0.1", rank=3)
    try:
        listener.set_token("secret")
        assert mesh.probe(3, "127.0.0.1", listener.port, "secret", 0, timeout=2) == "ok"
        assert mesh.probe(4, "127.0.0.1", listener.port, "secret", 0, timeout=2) == "wrong peer"
        assert mesh.probe(3, "127.0.0.1", listener.port, "guess", 0, timeout=2) == "rejected"
    finally:
        listener.close()


def test_refused_and_timeout_are_told_apart():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert mesh.probe(1, "127.0.0.1", port, "t", 0, timeout=1) == "refused"
    # listen(0) and never accept: the first connection fills the queue, later ones time out
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        filler = [socket.create_connection(full.getsockname(), timeout=1) for _ in range(1)]
        try:
            status = mesh.probe(1, "127.0.0.1", full.getsockname()[1], "t", 0, timeout=0.5)
        finally:
            for s in filler:
                s.close()
    assert status == "timeout"


def test_probe_all_and_matrix():
    listeners = [mesh.Listener("127.0.0.1", rank=r) for r in range(3)]
    try:
        for listener in listeners:
            listener.set_token("tok")
        peers = {r: ("127.0.0.1", l.port) for r, l in enumerate(listeners)}
        peers[2] = ("127.0.0.1", 1)  # nothing listens on port 1
        rows = {r: mesh.probe_all(peers, "tok", r, timeout=1) for r in range(2)}
    finally:
        for listener in listeners:
            listener.close()
    assert rows[0] == {1: "ok", 2: "refused"} and rows[1] == {0: "ok", 2: "refused"}
    assert mesh.blocked_pairs(rows) == [(0, 2, "refused"), (1, 2, "refused")]
    table = mesh.matrix_table(rows, 3, {0: "a", 1: "a", 2: "b"})
    assert table["columns"] == ["from \\ to", "0", "1", "2"]
    assert table["rows"][0] == ["0 a", "-", "ok", "refused"]
    assert table["rows"][2] == ["2 b", "?", "?", "-"]


def test_probe_all_bounds_its_parallelism_and_still_covers_every_peer():
    listener = mesh.Listener("127.0.0.1", rank=1)
    try:
        listener.set_token("tok")
        # ten "peers" that are all the same listener; only rank 1's answer matches
        peers = {r: ("127.0.0.1", listener.port) for r in range(11)}
        row = mesh.probe_all(peers, "tok", 0, timeout=2, parallel=3)
    finally:
        listener.close()
    assert sorted(row) == list(range(1, 11))
    assert row[1] == "ok" and {row[r] for r in range(2, 11)} == {"wrong peer"}
