"""The phases of every rank but rank 0: reach the rendezvous, add this rank to the roll, probe
(when this rank leads its host), run the collectives, publish the results, and end with rank
0's exit code. A rank reads O(1) keys whatever the world size: plan, its own mplan, verdict,
final; a host leader also reads its own host's results (one key per rank on its host).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from distdoctor.nccltest import collectives as collectives_mod
from distdoctor.nccltest import mesh, pairtests
from distdoctor.nccltest import store as store_mod
from distdoctor.nccltest.rendezvous import expected_rank_hosts
from distdoctor.nccltest.session import HEARTBEAT_S, Rank


# Exit codes a rank returns on its own, when it cannot learn rank 0's verdict: 1 when it knows
# the job failed (it cannot reach the rendezvous, rank 0 said no), 2 when the test is
# incomplete (rank 0 vanished or never answered).
FAILED, INCOMPLETE = 1, 2

_CONNECT_WHY = {
    "timeout": "connection timed out (packets are dropped: a firewall, or a wrong address on a routed network)",
    "refused": "connection refused (nothing listens there yet: rank 0 not started, or a wrong "
               "MASTER_ADDR/MASTER_PORT)",
    "no route to host": "no route to host (nobody answers for that address on its network: no host owns it, "
                        "or its host is down; a wrong MASTER_ADDR)",
}


def wait_for_port(host, addr: str, port: int, deadline: float, early: float | None = None,
                  on_early=None) -> str:
    """'' once addr:port accepts connections, else why not at the deadline. Retrying here,
    rather than in TCPStore, lets the report say refused / timed out / no route. Each try may
    take 4 s: an address nobody owns fails its ARP resolution after about 3. Still failing at
    `early`, on_early(why) is called once."""
    last = ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 and last:
            return last
        result = host.connect(addr, port, timeout=min(4.0, max(0.1, left)))
        if result.ok:
            return ""
        last = _CONNECT_WHY.get(result.error, result.error)
        if result.error.startswith("name not resolved: "):
            last = f"cannot resolve {addr}: {result.error[len('name not resolved: '):]}"
        if on_early is not None and early is not None and time.monotonic() >= early:
            on_early(last)
            on_early = None
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def run(rank: Rank, fp: dict[str, Any], listener) -> int:
    e = rank.endpoint
    rank.set_phase("rendezvous")
    rank.log(f"rendezvous at {e.addr}:{e.port} ({e.addr_why})")
    home = expected_rank_hosts(rank.host.env).get(0)
    where = f"the rendezvous at {e.addr}:{e.port} ({e.addr_why})"
    rank0 = f"; rank 0 should run on {home}" if home else ""

    def early(why: str) -> None:
        # Rank 0 gives up on a missing rank at about the same bound as this wait, and a
        # launcher kills the job as soon as rank 0 exits: say it now, while it can be heard.
        rank.say(f"cannot reach {where} after {time.monotonic() - rank.started:.1f} s: {why}{rank0}; "
                 f"still trying until the {rank.args.timeout:g} s bound")

    # Tried until this rank's own bound, not its phase deadline: rank 0 gives up on a missing
    # rank at its phase deadline and reports then; a launcher that ends the job at the first
    # exit (mpirun) killed rank 0 mid-report when this rank left at that same moment.
    why = wait_for_port(rank.host, e.addr, e.port, rank.started + rank.args.timeout,
                        rank.started + rank.args.timeout / 2, early)
    if why:
        rank.say(f"cannot reach {where} within {rank.args.timeout:g} s: {why}{rank0}")
        return FAILED
    try:
        rank.channel = rank.connect(e.addr, False, rank.left())
        rank.monitor = rank.connect(e.addr, False, 2)
    except store_mod.Unsealed as exc:  # the store there does not hold this job's token
        return not_ours(rank, str(exc))
    except Exception as exc:  # the port answers but is not a store, or the store went away
        rank.say(f"cannot join the rendezvous store at {e.addr}:{e.port}: {collectives_mod.first_line(exc)}")
        return FAILED
    threading.Thread(target=heartbeat, args=(rank,), daemon=True, name="nccl-test-heartbeat").start()
    try:
        return phases(rank, fp, listener)
    except rank.torch.distributed.DistError as exc:  # rank 0 went away mid-protocol
        if rank.channel.foreign:  # ... and it was another job's rank 0
            return not_ours(rank, rank.channel.foreign)
        if rank.doomed:  # this rank already knows the job cannot pass
            return FAILED
        rank.say(f"lost the connection to rank 0 at {e.addr}:{e.port} in {rank.phase}: "
                 f"{collectives_mod.first_line(exc)}")
        return INCOMPLETE
    except store_mod.Unsealed as exc:
        return not_ours(rank, str(exc))


def not_ours(rank: Rank, why: str) -> int:
    e = rank.endpoint
    rank.say(f"the rendezvous at {e.addr}:{e.port} is not this job's ({why}): another job's rank 0 serves that "
             "port; give this job its own MASTER_PORT")
    return FAILED


def heartbeat(rank: Rank) -> None:
    while True:
        try:
            rank.monitor.store.add(f"hb/{rank.rank}", 1)
        except Exception:  # the store is gone: rank 0 has ended
            return
        time.sleep(HEARTBEAT_S)


def phases(rank: Rank, fp: dict[str, Any], listener) -> int:
    channel = rank.channel
    line = store_mod.roll_line(rank.token, fp)
    if channel.missing(["hello"], rank.phase_deadline()):
        rank.say("rank 0 serves the store but never said hello (it hung or died)")
        return INCOMPLETE
    try:
        hello = store_mod.unseal(rank.token, "hello", channel.store.get("hello"))
    except store_mod.Unsealed as exc:
        channel.store.append(store_mod.ROLL, line)  # so that the other job's rank 0 names this rank
        return not_ours(rank, str(exc))
    channel.store.append(store_mod.ROLL, line)
    channel.store.add(store_mod.ARRIVED, 1)
    if hello.get("world_size") != rank.world:
        rank.doomed = True
        rank.say(f"rank 0 has world size {hello.get('world_size')}, this rank {rank.world}: the launch gave the "
                 "ranks different world sizes (rank 0 names this rank)")
    # Rank 0 decides at its own phase deadline at the latest; wait past that for its word.
    plan = channel.take("plan", rank.deadline + 1.0)
    if plan is None:
        rank.say("rank 0 never answered at the rendezvous (it hung or died)")
        return INCOMPLETE
    if not plan["go"]:
        return final(rank, FAILED)
    if plan["mesh"] and listener:
        listener.set_token(plan["token"])
    members: list[int] = []
    if plan["mesh"] and rank.rank in plan.get("leaders", ()):
        rank.set_phase("mesh")
        mine = channel.take(f"mplan/{rank.rank}", rank.phase_deadline()) or {"targets": []}
        members = [m for m in mine.get("members", []) if isinstance(m, int)]
        row = mesh.probe_row(mine, plan, rank.rank)
        rank.log(f"mesh row: {row}")
        channel.put(f"mesh/{rank.rank}", {str(k): v for k, v in row.items()})
    verdict = channel.take("verdict", rank.deadline + 1.0)
    if verdict is None or not verdict["go"]:
        return final(rank, FAILED if verdict is not None else INCOMPLETE)
    ops, rows = collectives_mod.run_all(rank, plan["backend"])
    try:
        channel.put(f"res/{rank.rank}", {"ops": [r.to_dict() for r in ops], "bench": rows})
    except Exception as exc:  # rank 0's store is gone
        rank.say(f"cannot report results to rank 0: {collectives_mod.first_line(exc)}")
        return INCOMPLETE
    if members:
        host_results(rank, members, {"ops": [r.to_dict() for r in ops], "bench": rows}, all(r.ok for r in ops))
    if plan.get("reserve") and plan["mesh"] and rank.rank in plan.get("leaders", ()):
        pair_rounds(rank, plan)
    return final(rank, 0 if all(r.ok for r in ops) else FAILED)


def host_results(rank: Rank, members: list[int], own: dict[str, Any], passed: bool) -> None:
    """A host leader gathers its host's results into one key for rank 0 (hres/<leader>): rank 0
    then reads one key per host. What a rank published is passed on as it opened; a rank that
    published nothing by the leader's deadline is left out, and rank 0 names it."""
    channel = rank.channel
    others = [m for m in members if m != rank.rank]
    # a second before rank 0 gives up, so that rank 0 still gets this host's row
    deadline = rank.phase_deadline() - 1.0
    if not passed:  # the failure is known here: live peers report within moments
        deadline = min(deadline, time.monotonic() + 1.5)
    missing = channel.missing([f"res/{m}" for m in others], max(deadline, time.monotonic() + 0.1))
    got: dict[str, Any] = {str(rank.rank): own}
    for m in others:
        if f"res/{m}" not in missing:
            got[str(m)] = channel.opened(f"res/{m}", m)
    try:
        channel.put(f"hres/{rank.rank}", {"got": got})
    except Exception as exc:  # rank 0's store is gone: final() says so
        rank.log(f"cannot publish this host's results: {collectives_mod.first_line(exc)}")


def pair_rounds(rank: Rank, plan: dict[str, Any]) -> None:
    """A host leader's part in the localisation rounds (pairtests.py): one key to read and at
    most one to write per round."""
    channel = rank.channel
    go = channel.take("loc", rank.deadline)
    if not go or not go.get("go"):
        return
    rank.set_phase("localise")
    round_plan = pairtests.probe_plan(plan)
    for k in range(pairtests.MAX_ROUNDS + 1):
        item = channel.take(f"lt/{k}/{rank.rank}", rank.deadline)
        if not isinstance(item, dict) or item.get("done"):
            return
        if item.get("targets"):
            row = mesh.probe_row(item, round_plan, rank.rank)
            channel.put(f"lr/{k}/{rank.rank}", {str(r): v for r, v in row.items()})


def final(rank: Rank, fallback: int) -> int:
    """Wait for rank 0's verdict so that every rank exits with the same code."""
    rank.set_phase("final")
    try:
        # Rank 0 publishes the code by its own deadline plus the time to name stuck ranks.
        verdict = rank.channel.take("final", rank.deadline + 1.8)
    except Exception as exc:  # rank 0 went away before it published the result
        rank.say(f"lost the connection to rank 0: {collectives_mod.first_line(exc)}")
        return fallback or INCOMPLETE
    if verdict is None:
        rank.say("rank 0 did not report a result in time")
        return INCOMPLETE
    try:
        rank.channel.store.add("bye", 1)
    except Exception:  # rank 0 stops waiting for the others after a moment
        pass
    return int(verdict["code"])
