"""Rank 0's phases, in order: launch (is MASTER_ADDR this host?), serve (the store, on one
address), rendezvous (the roll), compare, mesh (host leaders probe each other), collectives,
results, report. Each phase is a function of the rank's shared state that returns what the
next one needs, or ends the run through rank.finish with what is known.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from distdoctor.api import fail, ok, skip, warn
from distdoctor.model import Finding
from distdoctor.model import Status
from distdoctor.nccltest import arrival, compare, hostmesh, interface, localise, mesh, pairtests, results
from distdoctor.nccltest import backend as backend_mod
from distdoctor.nccltest import collectives as collectives_mod
from distdoctor.nccltest import store as store_mod
from distdoctor.nccltest.session import Rank


# When MASTER_ADDR is not rank 0's host nobody can find the store: rank 0 reports after this
# long instead of at the bound (a NAT or VIP that does reach it gets that long to show).
FAIL_FAST_S = 5.0
ROLL_POLL_S = 0.2  # how often rank 0 rereads the roll when the arrival count and the roll disagree
# How long rank 0 still waits for the ranks not on the roll once a sealed line shows the job
# cannot run (a rank claimed twice, a rank of another world size): long enough for ranks started
# together to show up in the report, far shorter than the bound they would otherwise cost.
DOOMED_GRACE_S = 2.0


@dataclass(frozen=True)
class Launch:
    local: bool  # MASTER_ADDR is one of this host's addresses
    own: str  # where this rank reaches the store it serves
    network: str = ""  # the network of MASTER_ADDR's interface here (10.0.0.0/24), for a firewall fix


@dataclass(frozen=True)
class MeshPlan:
    hmap: hostmesh.HostMap
    plan: dict[str, Any]  # what every rank reads (the "plan" key)
    mine: dict[str, Any]  # rank 0's own targets
    unit: str  # "host", or "rank" for --mesh on one host
    probes: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)  # host pair -> probe


def run(rank: Rank, fp: dict[str, Any], listener, if_addrs) -> int:
    where = launch(rank, fp, if_addrs)
    if not serve(rank, where, if_addrs):
        return rank.finish()
    if not rendezvous(rank, fp, where):
        return rank.finish()
    backend, notes = backend_mod.choose(rank.fps, rank.args.backend)
    rank.recorder.extra["backend"] = backend
    blocker = backend_mod.gloo_address_problem(rank.fps) if backend == "gloo" else backend_mod.nccl_missing(rank.fps)
    planned = plan_mesh(rank, backend, listener)
    rank.channel.put("plan", planned.plan)
    go = blocker is None
    if planned.plan["mesh"]:
        listener.set_token(planned.plan["token"])
        go = mesh_phase(rank, planned, listener) and go
    rank.channel.put("verdict", {"go": go})
    if not go:
        if blocker is not None:
            rank.recorder.add("nccl-test.init", notes + [blocker])
        return rank.finish("not run: the checks above found a fault that would make it hang")
    ops, rows = collectives_mod.run_all(rank, backend)
    rank.channel.put("res/0", {"ops": [r.to_dict() for r in ops], "bench": rows})
    gather(rank, ops, rows, notes, planned)
    if planned.plan.get("reserve"):
        why = localise_reason(rank)
        rank.channel.put("loc", {"go": bool(why)})
        if why:
            localise_phase(rank, planned, why)
    return rank.finish()


def launch(rank: Rank, fp: dict[str, Any], if_addrs) -> Launch:
    """Is MASTER_ADDR this host? Says so at once when it is not, with the address that works."""
    e = rank.endpoint
    resolved = rank.host.resolve(e.addr, timeout=2)
    mine = interface.local_addresses(if_addrs)
    hostname = rank.host.hostname()
    suggestion = arrival.reachable_name(hostname, fp.get("hostname_addrs") or [], mine, fp.get("address") or "")
    findings = arrival.launch_findings(e, rank.ident, hostname, resolved.addresses, resolved.error, mine, suggestion,
                                       fp.get("hostname_addrs") or [])
    local = not resolved.error and arrival.is_local(resolved.addresses, mine)
    rank.recorder.add("nccl-test.launch", findings)
    rank.recorder.extra["rendezvous"] = {"master_addr": e.addr, "master_port": e.port, "addr_why": e.addr_why,
                                         "port_why": e.port_why, "world_size": rank.world,
                                         "launcher": rank.ident.launcher, "sealed_with": rank.token_why}
    if not local and not resolved.error and arrival.own_name_elsewhere(e.addr, hostname, resolved.addresses,
                                                                        fp.get("hostname_addrs") or []):
        rank.say(f"MASTER_ADDR={e.addr} is this host's name, but not an address this rank has: it runs behind NAT "
                 "(a container on a bridge network); run it with host networking (docker run --network=host)")
    elif not local:
        rank.say(f"MASTER_ADDR={e.addr} " + (f"does not resolve here ({resolved.error})" if resolved.error else
                                              "is not an address of this host")
                 + f": the other ranks will not find the rendezvous. Use: export MASTER_ADDR={suggestion}")
    return Launch(local, e.addr if local else "127.0.0.1",
                  arrival.network_of(resolved.addresses[0], if_addrs) if local and resolved.addresses else "")


def serve(rank: Rank, where: Launch, if_addrs) -> bool:
    """Rank 0 serves the store, listening on MASTER_ADDR's address only (or joins torchrun's)."""
    rank.set_phase("rendezvous")
    port = rank.endpoint.port
    serving = not rank.agent_store()
    # The store's listener shares ports (SO_REUSEPORT): binding where another store already
    # listens would succeed and split the ranks between the two. Look first.
    if serving and rank.host.connect(where.own, port, timeout=1).ok:
        port_taken(rank, "something already listens there")
        return False
    bind = store_bind(rank, where, if_addrs) if serving else ""
    rank.recorder.extra["rendezvous"]["store_listens_on"] = (bind or "every interface") if serving else \
        "torchrun's agent store"
    try:
        listener = store_mod.listen(bind, port) if serving else None
        rank.channel = rank.connect(where.own, serving, rank.left(), listener)
        rank.monitor = rank.connect(where.own, False, 2)
        # First, so that a rank of another job on this port learns it at once.
        rank.channel.put("hello", {"world_size": rank.world})
    except Exception as exc:  # OSError from bind, StoreGone/DistStoreError from the store
        text = collectives_mod.first_line(exc)
        in_use = "EADDRINUSE" in text or "in use" in text
        port_taken(rank, "the port is in use" if in_use else text, in_use)
        return False
    return True


def store_bind(rank: Rank, where: Launch, if_addrs) -> str:
    """The one address the store listens on: MASTER_ADDR's when it names one of this host's
    addresses; '' (every interface) only when MASTER_ADDR is a name that resolves to the
    loopback here while other hosts take part (their resolver may say otherwise)."""
    if not where.local:
        return "127.0.0.1"  # nobody else can find it anyway; the report says why
    try:
        ipaddress.ip_address(where.own)
        return where.own
    except ValueError:
        pass
    mine = interface.local_addresses(if_addrs)
    resolved = [a for a in rank.host.resolve(where.own, timeout=2).addresses if a in mine or a.startswith("127.")]
    real = [a for a in resolved if not a.startswith("127.") and a != "::1"]
    one_host = rank.ident.local_world_size is not None and rank.ident.local_world_size == rank.world
    if len(real) == 1:
        return real[0]
    if resolved and not real and (one_host or rank.world == 1):
        return resolved[0]
    return ""


def strangers_at_the_door(rank: Rank) -> list[Finding]:
    """The peers rank 0's store turned away (another job's token, garbage, a slow writer, a
    flood of connections): named, with what they claim, unverified. Their bytes never reached
    the store, so this job is not harmed: a warning, where a sealed value of another job on
    the roll (a rank that holds the token) stays a failure."""
    if rank.server is None:
        return []
    named, more = rank.server.named()
    if not named:
        return []
    claims = ["; ".join(f"{k} {v}" for k, v in s.claims.items()) for s in named if s.claims]
    count = len(named) + more
    return [warn(f"{count} connection{'s' if count > 1 else ''} to the rendezvous did not come from this job, "
                 f"turned away: {named[0].peer} {named[0].why}"
                 + (f" (unverified: {' | '.join(claims[:4])})" if claims else ""),
                 subject="rendezvous",
                 explanation="every connection to rank 0's store must prove the job's token before it may read "
                 "or write; these did not: another job that uses the same MASTER_ADDR:MASTER_PORT, a scanner, "
                 "or a stranger. Nothing they sent was kept",
                 fix="export MASTER_PORT=$((20000 + RANDOM % 10000))   # before launching, if another job uses "
                     "this port",
                 evidence={"turned_away": [{"from": s.peer, "why": s.why, "claims": s.claims} for s in named[:16]],
                           "more": more})]


def port_taken(rank: Rank, why: str, in_use: bool = True) -> None:
    rank.recorder.add("nccl-test.rendezvous", [fail(
        f"rank 0 cannot serve the rendezvous on port {rank.endpoint.port}: {why}",
        subject=str(rank.endpoint.port),
        explanation="another job's rendezvous, or an earlier test still running, holds the port" if in_use else "",
        fix="export MASTER_PORT=$((20000 + RANDOM % 10000))   # before launching: one free port for all ranks")],
        time.monotonic() - rank.started)


def rendezvous(rank: Rank, fp: dict[str, Any], where: Launch) -> bool:
    """Every rank adds its sealed fingerprint to the roll and counts itself in; rank 0 waits
    for the count, then reads the roll once (one key, whatever the world size)."""
    store = rank.channel.store
    store.append(store_mod.ROLL, store_mod.roll_line(rank.token, fp))
    own_start = time.monotonic() - rank.started  # python, import torch, launch: what the others pay too
    deadline = rank.phase_deadline()
    if not where.local:
        deadline = min(deadline, time.monotonic() + FAIL_FAST_S)
    while store.add(store_mod.ARRIVED, 0) < rank.world - 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    roll = store_mod.read_roll(rank.token, store.get(store_mod.ROLL), rank.world)
    # The count is only a hint: anyone who reaches the port can add to it (`add("arrived", 1000)`
    # once made rank 0 read the roll at once and call healthy ranks missing). A rank is missing
    # only when the roll itself, which only the job's token can sign, lacks it at the deadline,
    # or when a sealed line already says this job cannot run whoever else comes (two processes
    # on one rank, a rank of another world size): then the others get a short grace, not the bound.
    doomed_at, cut_short = None, False
    while len(roll.fps) < rank.world and time.monotonic() < deadline:
        if doomed_at is None and (roll.duplicates or roll.other_world):
            doomed_at = time.monotonic()
        if doomed_at is not None and time.monotonic() >= doomed_at + DOOMED_GRACE_S:
            cut_short = True
            break
        time.sleep(ROLL_POLL_S)
        roll = store_mod.read_roll(rank.token, store.get(store_mod.ROLL), rank.world)
    rank.fps = [roll.fps[r] for r in sorted(roll.fps)]
    rank.recorder.extra["fingerprints"] = rank.fps
    waited = time.monotonic() - rank.started
    hosts = sorted({f["host"] for f in rank.fps})
    missing = [r for r in range(rank.world) if r not in roll.fps]
    trouble = arrival.rendezvous_trouble(roll, rank.world, rank.ident.description)
    # A stranger's line is named but stops nothing; two claimants of a rank or a rank of
    # another world would make the collectives hang or mix data.
    strangers = [f for f in trouble if f.subject == "rendezvous"] + strangers_at_the_door(rank)
    trouble = [f for f in trouble if f.subject != "rendezvous"]
    if missing:
        trouble.insert(0, arrival.missing_finding(missing, waited, where.local, rank.ident, rank.endpoint,
                                                  rank.fps, rank.host.env, where.network,
                                                  cut_short=cut_short, own_start=own_start, bound=rank.args.timeout))
        rank.recorder.extra["missing_ranks"] = missing
    rank_table(rank)
    if trouble:
        rank.recorder.add("nccl-test.rendezvous", trouble + strangers, waited)
        rank.channel.put("plan", {"go": False})
        return False
    rank.recorder.add("nccl-test.rendezvous", [ok(
        f"all {rank.world} ranks arrived in {waited:.2f} s from {len(hosts)} host{'s' if len(hosts) > 1 else ''}: "
        + ", ".join(hosts[:8]) + (" ..." if len(hosts) > 8 else ""))] + strangers, waited)
    rank.set_phase("compare")
    rank.recorder.add("nccl-test.cross-rank", compare.compare(rank.fps))
    return True


def rank_table(rank: Rank) -> None:
    hosts = {f["host"] for f in rank.fps}
    rank.recorder.add("nccl-test.ranks", [ok(
        f"{len(rank.fps)} rank{'s' if len(rank.fps) != 1 else ''} on {len(hosts)} host"
        f"{'s' if len(hosts) != 1 else ''}", evidence={"table": compare.fingerprint_table(rank.fps)})])


def plan_mesh(rank: Rank, backend: str, listener) -> MeshPlan:
    """Who probes whom: one leader per host (its lowest rank); every leader gets its own key
    (mplan/<rank>) with its targets, so that it reads one key of its own size."""
    hmap = hostmesh.group(rank.fps)
    spans = len(hmap.hosts) > 1
    do_mesh = spans if rank.args.mesh is None else bool(rank.args.mesh)
    unit = "host"
    if do_mesh and not spans:
        hmap, unit = hostmesh.per_rank(rank.fps), "rank"  # --mesh on one host: rank to rank
    probe_timeout = min(3.0, max(0.5, rank.left() / 4))
    plan: dict[str, Any] = {"go": True, "backend": backend, "mesh": bool(do_mesh and listener),
                            "token": secrets.token_hex(16), "probe_timeout": probe_timeout,
                            "leaders": [hmap.leader(i) for i in range(len(hmap.hosts))]}
    if not plan["mesh"]:
        rank.recorder.add("nccl-test.mesh", [skip(
            "all ranks run on one host: the mesh check is off (--mesh turns it on)" if not spans
            else "turned off with --no-mesh" if listener else "no mesh listener could be opened")])
        return MeshPlan(hmap, plan, {}, unit)
    n = len(hmap.hosts)
    plan["reserve"] = pairtests.reserve(rank.args.timeout, n, unit == "host")
    rank.collective_reserve = plan["reserve"]
    pairs = hostmesh.mesh_pairs(n, rank.args.mesh if isinstance(rank.args.mesh, str) else "auto")
    order = hostmesh.targets(pairs, n)
    ports = {f["rank"]: f.get("mesh_port") or 0 for f in rank.fps}
    most = max((len(v) for v in order.values()), default=0)
    # Handshakes with every target at once, then one timed transfer after another.
    budget = min(max(1.0, rank.left() * 0.4), mesh.probe_seconds(most, probe_timeout) + most * probe_timeout)
    plan.update(nbytes=hostmesh.BENCH_TRANSFER_BYTES if rank.args.bench else hostmesh.TRANSFER_BYTES,
                budget=budget, pairs=len(pairs))
    mine: dict[str, Any] = {"targets": []}
    for s in range(n):
        # members: the ranks whose results this leader gathers for rank 0 (see gather)
        item = {"targets": [[hmap.leader(d), hmap.addresses[d], ports.get(hmap.leader(d), 0)]
                            for d in order.get(s, [])], "members": hmap.ranks[s]}
        if hmap.leader(s) == 0:
            mine = item
        else:
            rank.channel.put(f"mplan/{hmap.leader(s)}", item)
    return MeshPlan(hmap, plan, mine, unit)


def mesh_phase(rank: Rank, planned: MeshPlan, listener=None) -> bool:
    """Rank 0 probes as its host's leader, reads one row per other host, and judges."""
    rank.set_phase("mesh")
    started = time.monotonic()
    hmap, plan = planned.hmap, planned.plan
    leader_index = {hmap.leader(i): i for i in range(len(hmap.hosts))}
    rows: dict[int, dict[int, dict[str, Any]]] = {0: mesh.probe_row(planned.mine, plan, 0)}
    others = [hmap.leader(i) for i in range(len(hmap.hosts)) if hmap.leader(i) != 0]
    missing = rank.channel.missing([f"mesh/{r}" for r in others],
                                   min(rank.phase_deadline(), time.monotonic() + 3 + plan["budget"]))
    silent = [leader_index[int(k.split("/")[1])] for k in missing]
    for r in others:
        if f"mesh/{r}" in missing:
            continue
        row = hostmesh.parse_row(rank.channel.opened(f"mesh/{r}", r))
        if row is None:
            silent.append(leader_index[r])
        else:
            rows[r] = row
    probes = {(leader_index[s], leader_index[d]): probe for s, row in rows.items()
              for d, probe in row.items() if d in leader_index}
    planned.probes.update(probes)
    verdict = hostmesh.judge(len(hmap.hosts), probes, sorted(silent))
    owned = {int(fp["rank"]): list(fp.get("addresses") or []) for fp in rank.fps}
    behind_nat = hostmesh.nat_findings(hmap, dict(listener.seen), owned) if listener is not None else []
    found = behind_nat + hostmesh.findings(hmap, verdict, plan["pairs"], plan["nbytes"], planned.unit) + tampered(rank)
    if len(hmap.hosts) <= 32:
        table = hostmesh.host_table(hmap, probes, plan["nbytes"])
        found[0] = dataclasses.replace(found[0], evidence={**found[0].evidence, "table": table})
    rank.recorder.extra["mesh"] = {
        "hosts": [{"host": hmap.hosts[i], "ranks": hmap.ranks[i], "address": hmap.addresses[i]}
                  for i in range(len(hmap.hosts))],
        "rows": {str(s): {str(d): p.get("status") for d, p in row.items()} for s, row in rows.items()},
        "rates": {str(s): {str(d): p.get("rate_gbs") for d, p in row.items() if p.get("moved")}
                  for s, row in rows.items()},
        "blocked": [[hmap.leader(s), hmap.leader(d), st] for s, d, st in verdict.blocked],
        "transfer_bytes": plan["nbytes"], "median_gbs": verdict.median_gbs}
    rank.recorder.add("nccl-test.mesh", found, time.monotonic() - started)
    return not (verdict.blocked or verdict.stalled or verdict.silent or behind_nat)


def tampered(rank: Rank) -> list[Finding]:
    seen = rank.channel.take_tampered()
    return [arrival.tampered_finding(seen)] if seen else []


def gather(rank: Rank, mine: list[collectives_mod.OpResult], my_rows: list[dict], notes: list[Finding],
           planned: MeshPlan | None = None) -> None:
    """Every rank's results, judged. With the host mesh on, each host's leader gathers its
    host's results into one key (follow.host_results) and rank 0 reads one key per host and
    its own host's ranks; a host whose leader published nothing is read rank by rank, briefly.
    Without it (one host, --no-mesh) rank 0 reads one key per rank; the others read none."""
    rank.set_phase("results")
    deadline = rank.phase_deadline()
    if not all(r.ok for r in mine):
        # This rank already saw the failure; a peer that is still alive reports within moments.
        deadline = min(deadline, time.monotonic() + 2.0)
    got: dict[int, dict[str, Any]] = {0: {"ops": [r.to_dict() for r in mine], "bench": my_rows}}
    hmap = planned.hmap if planned is not None and planned.plan.get("mesh") and planned.unit == "host" else None
    if hmap is not None:
        own = next(i for i in range(len(hmap.hosts)) if hmap.leader(i) == 0)
        direct = [r for r in hmap.ranks[own] if r != 0]
        leaders = {hmap.leader(i): hmap.ranks[i] for i in range(len(hmap.hosts)) if i != own}
        waiting = rank.channel.missing([f"hres/{lead}" for lead in leaders] + [f"res/{r}" for r in direct], deadline)
        for lead, members in leaders.items():
            value = None if f"hres/{lead}" in waiting else rank.channel.opened(f"hres/{lead}", lead)
            rows = value.get("got") if isinstance(value, dict) else None
            if isinstance(rows, dict):
                for key, row in rows.items():
                    if key.isdigit() and int(key) in members and _result_ok(row):
                        got[int(key)] = row
            else:  # the leader is stuck or gone: its ranks may still have published their own
                direct += members
        late = [r for r in direct if r not in got]
        rank.recorder.extra["results_read"] = {"per_host": len(leaders), "per_rank": len(late)}
        left = rank.channel.missing([f"res/{r}" for r in late],
                                    max(min(deadline, time.monotonic() + 2.0), time.monotonic() + 0.1))
        for r in late:
            if f"res/{r}" not in left:
                row = rank.channel.opened(f"res/{r}", r)
                if _result_ok(row):
                    got[r] = row
        missing = [f"res/{r}" for r in range(1, rank.world) if r not in got]
    else:
        rank.recorder.extra["results_read"] = {"per_host": 0, "per_rank": rank.world - 1}
        missing = rank.channel.missing([f"res/{r}" for r in range(1, rank.world)], deadline)
        for r in range(1, rank.world):
            if f"res/{r}" not in missing:
                value = rank.channel.opened(f"res/{r}", r)
                if _result_ok(value):
                    got[r] = value
                else:
                    missing.append(f"res/{r}")
    silent = sorted(int(k.split("/")[1]) for k in missing)
    states = rank.rank_states(silent) if silent else {}
    rank.recorder.extra["results"] = {str(k): v for k, v in got.items()}
    names = results.check_names(rank.args.bench)
    for check_id, findings, duration in results.judge(names, got, silent, states, list(notes) + tampered(rank),
                                                       rank.recorder.extra.get("backend", "")):
        rank.recorder.add(check_id, findings, duration)
    if rank.args.bench and not rank.recorder.has("nccl-test.bench"):
        judged = results.bench_finding(my_rows, got)
        if judged:
            rank.recorder.extra["bench"] = my_rows
            rank.recorder.add("nccl-test.bench", [judged[0]], judged[1])


def _result_ok(value: Any) -> bool:
    """A rank's published results have the shape gather reads (anything else is a peer's garbage)."""
    return isinstance(value, dict) and isinstance(value.get("ops"), list) and all(
        isinstance(op, dict) and {"name", "ok", "seconds", "detail"} <= set(op) for op in value["ops"])


def localise_reason(rank: Rank) -> str:
    """Why the pair rounds should run, or '' when they should not."""
    if getattr(rank.args, "localise", False):
        return "asked for with --localise"
    for check_id in ("nccl-test.init", "nccl-test.all-reduce"):
        if rank.recorder.status(check_id) in (Status.FAIL, Status.ERROR, Status.TIMEOUT):
            return "the job-wide all_reduce failed" if check_id.endswith("all-reduce") else \
                "the process group did not initialize"
    return ""


def localise_phase(rank: Rank, planned: MeshPlan, why: str) -> None:
    """Rounds of disjoint host pairs (pairtests.py), driven by a Localiser seeded with the mesh's
    probes, until it has nothing more to ask, MAX_ROUNDS, or the time runs out."""
    rank.set_phase("localise")
    rank.wanted.append("nccl-test.localise")  # cut off at the bound, it still shows
    started = time.monotonic()
    hmap, plan = planned.hmap, planned.plan
    n = len(hmap.hosts)
    leaders = [hmap.leader(i) for i in range(n)]
    ports = {f["rank"]: f.get("mesh_port") or 0 for f in rank.fps}
    per_round = pairtests.round_seconds(plan["probe_timeout"])
    round_plan = pairtests.probe_plan(plan)
    loc = localise.Localiser(hmap.hosts, max_rounds=pairtests.MAX_ROUNDS)
    pairtests.seed(loc, planned.probes)
    tested: list[list[list[str]]] = []
    k = 0
    while time.monotonic() + per_round < rank.phase_deadline():
        pairs = loc.next_round()
        if pairs is None:
            break
        partner = pairtests.targets(pairs)
        mine: dict[str, Any] = {"targets": []}
        for i in range(n):
            p = partner.get(i)
            item = {"targets": [[leaders[p], hmap.addresses[p], ports.get(leaders[p], 0)]] if p is not None else []}
            if leaders[i] == 0:
                mine = item
            else:
                rank.channel.put(f"lt/{k}/{leaders[i]}", item)
        rows: dict[int, dict[int, dict[str, Any]]] = {}
        if mine["targets"]:
            rows[0] = mesh.probe_row(mine, round_plan, 0)
        busy = [leaders[i] for i in partner if leaders[i] != 0]
        missing = rank.channel.missing([f"lr/{k}/{r}" for r in busy], time.monotonic() + per_round)
        for r in busy:
            row = None if f"lr/{k}/{r}" in missing else hostmesh.parse_row(rank.channel.opened(f"lr/{k}/{r}", r))
            if row is not None:
                rows[r] = row
        for a, b in pairs:
            forward = rows.get(leaders[a], {}).get(leaders[b])
            backward = rows.get(leaders[b], {}).get(leaders[a])
            passed, judged, measured = pairtests.pair_result(forward, backward)
            loc.record((a, b), passed, judged, measured)
        tested.append([[hmap.hosts[a], hmap.hosts[b]] for a, b in pairs])
        k += 1
    for i in range(n):
        if leaders[i] != 0:
            rank.channel.put(f"lt/{k}/{leaders[i]}", {"done": True})
    rank.recorder.extra["localise"] = {"reason": why, "rounds": tested}
    rank.recorder.add("nccl-test.localise", pairtests.findings(loc, hmap, k, why) + tampered(rank),
                      time.monotonic() - started)
