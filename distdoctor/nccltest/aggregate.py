"""How ranks share what they know through the rendezvous store without any rank reading N keys.

Every rank publishing `fp/<rank>` and rank 0 reading all of them is W reads for rank 0 and
W keys in one store; every rank reading everyone's address is W^2. Here ranks are grouped by
host, and one rank per host (its leader) speaks for the host:

    every rank     add   slot/<host>            -> its arrival order on its host (1 = leader)
    follower       set   fp/<host>/<slot>       its fingerprint
    leader         get   fp/<host>/2..L         its host's fingerprints (L = ranks on the host)
                   add   hosts                  -> the host's index i (arrival order of hosts)
                   set   host/<i>               the host's summary: name, ranks, fingerprints
    rank 0         get   host/0, host/1, ...    until the summaries cover the world
    ...then, per phase (`scatter`, `collect`, `announce`):
    rank 0         set   <name>/<i>             one key per host (a leader's mesh targets)
    leader         get   <name>/<i>             its own key only
    leader         set   <name>/<i>             one key per host (its mesh row)
    rank 0         get   <name>/<i>             one key per host
    rank 0         set   verdict;   every other rank: get verdict

So a follower sends 3 messages, a leader L + 6, and rank 0 three per host: per-rank cost does
not grow with the job except rank 0's, which grows with hosts, not ranks. (When the launcher
does not say how many ranks share a host, ranks that register after their leader summarised
the host are picked up by rank 0: one more count per host, only when ranks are missing.)

`<host>` is the hostname and the address the rank talks from, so cloned hostnames on two
machines stay two hosts. The leader is whoever registers first, not local rank 0: a launcher
that numbers local ranks wrongly, or two hosts that share a name and address, cannot make two
leaders or none.

The protocol is a generator per rank that yields store operations (`Set`, `Get`, `Add`) and
receives their results, so the same code runs against torch's TCPStore (`drive`) and against the
simulated store of `simulate.py`. A `Get` that times out receives None: the protocol carries on
with what it has, and what is missing is reported by who did not arrive. JSON only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HOSTS = "hosts"
VERDICT = "verdict"


@dataclass(frozen=True)
class Set:
    key: str
    value: str


@dataclass(frozen=True)
class Get:
    """Wait for the key, then read it; the driver sends back None when the wait times out."""
    key: str


@dataclass(frozen=True)
class Add:
    key: str
    amount: int


Op = Set | Get | Add
Protocol = Generator[Op, Any, Any]


def host_key(hostname: str, address: str) -> str:
    return f"{hostname}@{address}" if address else hostname


@dataclass
class Role:
    """What `gather` found out about this rank: leader or not, its host's index, and (rank 0)
    the host summaries."""
    leader: bool
    host: str
    index: int | None = None                 # the host's index, leaders only
    summaries: list[dict[str, Any]] = field(default_factory=list)   # rank 0 only
    missing: list[int] = field(default_factory=list)                # rank 0: ranks never seen


def gather(rank: int, world_size: int, host: str, fingerprint: Mapping[str, Any],
           local_world_size: int | None) -> Protocol:
    """Fingerprints to rank 0 through host leaders. Returns a `Role`."""
    slot = yield Add(f"slot/{host}", 1)
    if slot is None:
        return Role(False, host)
    if slot > 1:
        yield Set(f"fp/{host}/{slot}", json.dumps(dict(fingerprint)))
        role = Role(False, host)
    else:
        expected = local_world_size
        if not expected or expected < 1:
            now = yield Add(f"slot/{host}", 0)
            expected = int(now or 1)
        fps = [dict(fingerprint)]
        for other in range(2, expected + 1):
            raw = yield Get(f"fp/{host}/{other}")
            if raw is not None:
                fps.append(json.loads(raw))
        late = yield Add(f"slot/{host}", 0)  # more ranks than expected claim this host: read them too
        for other in range(expected + 1, int(late or 0) + 1):
            raw = yield Get(f"fp/{host}/{other}")
            if raw is not None:
                fps.append(json.loads(raw))
        index = (yield Add(HOSTS, 1)) - 1
        fps.sort(key=lambda f: int(f.get("rank", -1)))
        summary = {"host": host, "ranks": [int(f.get("rank", -1)) for f in fps], "fps": fps}
        yield Set(f"host/{index}", json.dumps(summary))
        role = Role(True, host, index)
    if rank == 0:
        seen: set[int] = set()
        i = 0
        while len(seen) < world_size:
            raw = yield Get(f"host/{i}")
            if raw is None:
                break
            summary = json.loads(raw)
            role.summaries.append(summary)
            seen.update(int(r) for r in summary.get("ranks", []))
            i += 1
        if len(seen) < world_size:
            # Ranks that registered after their leader had summarised its host (a launcher that
            # does not say how many ranks share a host): one count per host, then their keys.
            for summary in role.summaries:
                count = yield Add(f"slot/{summary['host']}", 0)
                for other in range(len(summary.get("fps", [])) + 1, int(count or 0) + 1):
                    raw = yield Get(f"fp/{summary['host']}/{other}")
                    if raw is not None:
                        fp = json.loads(raw)
                        summary["fps"].append(fp)
                        summary["ranks"].append(int(fp.get("rank", -1)))
                        seen.add(int(fp.get("rank", -1)))
        role.missing = sorted(set(range(world_size)) - seen)
    return role


def scatter(name: str, role: Role, rank: int, per_host: Mapping[int, Any] | None = None) -> Protocol:
    """Rank 0 gives each host leader its own value (`per_host[i]`); a leader returns its own."""
    mine = None
    if rank == 0:
        for i, value in sorted((per_host or {}).items()):
            if role.leader and i == role.index:
                mine = value
            else:
                yield Set(f"{name}/{i}", json.dumps(value))
        if not role.leader:
            return None
    if role.leader and rank != 0:
        raw = yield Get(f"{name}/{role.index}")
        mine = json.loads(raw) if raw is not None else None
    return mine


def collect(name: str, role: Role, rank: int, value: Any, n_hosts: int = 0) -> Protocol:
    """Each host leader hands rank 0 one value; rank 0 returns {host index: value or None}."""
    if role.leader and rank != 0:
        yield Set(f"{name}/{role.index}", json.dumps(value))
    if rank != 0:
        return None
    out: dict[int, Any] = {}
    if role.leader and role.index is not None:
        out[role.index] = value
    for i in range(n_hosts):
        if i not in out:
            raw = yield Get(f"{name}/{i}")
            out[i] = json.loads(raw) if raw is not None else None
    return out


def announce(rank: int, verdict: Any = None) -> Protocol:
    """Rank 0's verdict to every rank: one key written, one read per rank."""
    if rank == 0:
        yield Set(VERDICT, json.dumps(verdict))
        return verdict
    raw = yield Get(VERDICT)
    return json.loads(raw) if raw is not None else None


def ranks_by_host(summaries: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    return {str(s.get("host")): [int(r) for r in s.get("ranks", [])] for s in summaries}


def drive(protocol: Protocol, store: Any, deadline: float | Callable[[str], float],
          seal: Callable[[str, str], str | bytes] | None = None, unseal: Callable[[str, bytes], str] | None = None,
          rejected: list[str] | None = None) -> Any:
    """Run one rank's protocol against a torch TCPStore-like store (set/get/add/wait/check).
    `deadline` is a time.monotonic() instant, or a function of the key giving one (so that a
    leader stops waiting for its ranks before rank 0 stops waiting for leaders). A key that has
    not appeared by then reads as None; past the deadline a key is only looked up, never waited
    for, so a phase ends on time however many keys are missing.

    `seal(key, value)` / `unseal(key, raw)` wrap every value (the job token's HMAC over key and
    value, so that a stranger who reaches the store cannot plant a fingerprint); a value that does
    not unseal (unseal raises ValueError) reads as None and its key is appended to `rejected`."""
    import datetime
    import time

    reply: Any = None
    try:
        while True:
            op = protocol.send(reply)
            if isinstance(op, Set):
                store.set(op.key, seal(op.key, op.value) if seal else op.value)
                reply = None
            elif isinstance(op, Add):
                reply = store.add(op.key, op.amount)
            else:
                left = (deadline(op.key) if callable(deadline) else deadline) - time.monotonic()
                try:
                    if left > 0:
                        store.wait([op.key], datetime.timedelta(seconds=left))
                    raw = store.get(op.key) if left > 0 or store.check([op.key]) else None
                except RuntimeError:  # torch's DistStoreError (a RuntimeError) on timeout
                    raw = None
                reply = None
                if raw is not None:
                    try:
                        reply = unseal(op.key, raw) if unseal else raw.decode()
                    except ValueError:  # not this job's value (UnicodeDecodeError is one too)
                        if rejected is not None:
                            rejected.append(op.key)
    except StopIteration as done:
        return done.value
