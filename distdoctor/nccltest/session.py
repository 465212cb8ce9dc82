"""One rank's run of nccl-test.

Every rank talks to the others only through torch's TCPStore, served by rank 0 on the
rendezvous port, in this order (each wait bounded by the deadline):

    fp/<rank>      every rank's fingerprint            -> rank 0 names who never arrived
    plan           rank 0: go/no-go, backend, mesh, token, peers' mesh addresses
    mesh/<rank>    each rank's row of the connection matrix
    verdict        rank 0: go/no-go for the collectives after the mesh
    phase/<rank>   where each rank is (init, all-reduce, ...), read only when something hangs
    hb/<rank>      a heartbeat counter: tells a dead or frozen rank from a slow one
    res/<rank>     each rank's collective results
    final          rank 0: the exit code every rank returns; bye counts who read it

The process group is initialised on the same store (under a prefix), so the test needs one
port, the one the report names.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import secrets
import sys
import threading
import time
from typing import Any

from distdoctor.api import fail, ok, skip, warn
from distdoctor.model import Finding, RunContext, Status
from distdoctor.nccltest import bench as bench_mod
from distdoctor.nccltest import collectives, compare, fingerprint, hostmesh, interface, mesh
from distdoctor.nccltest import report as report_mod
from distdoctor.nccltest import store as store_mod
from distdoctor.nccltest.rendezvous import Endpoint, Identity, expected_rank_hosts, step_hosts

HEARTBEAT_S = 0.3
FAIL_FAST_S = 5.0
PHASE_CHECK = {"rendezvous": "nccl-test.rendezvous", "mesh": "nccl-test.mesh", "init": "nccl-test.init",
               "all-reduce": "nccl-test.all-reduce", "broadcast": "nccl-test.broadcast",
               "all-gather": "nccl-test.all-gather", "bench": "nccl-test.bench", "results": "nccl-test.init"}


_CONNECT_WHY = {
    "timeout": "connection timed out (a firewall dropping packets, or a wrong address)",
    "refused": "connection refused (nothing listens there yet: rank 0 not started, or a wrong "
               "MASTER_ADDR/MASTER_PORT)",
}


def wait_for_port(host, addr: str, port: int, deadline: float) -> str:
    """'' once addr:port accepts connections, else why not at the deadline. Retrying here,
    rather than in TCPStore, lets the report say refused / timed out / no route."""
    last = ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 and last:
            return last
        result = host.connect(addr, port, timeout=min(2.0, max(0.1, left)))
        if result.ok:
            return ""
        last = _CONNECT_WHY.get(result.error, result.error)
        if result.error.startswith("name not resolved: "):
            last = f"cannot resolve {addr}: {result.error[len('name not resolved: '):]}"
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


class RankRun:
    def __init__(self, args, host, ident: Identity, endpoint: Endpoint, started: float, started_wall: float,
                 torch: Any):
        self.args = args
        self.host = host
        self.ident = ident
        self.endpoint = endpoint
        self.torch = torch
        self.started = started
        self.started_wall = started_wall
        self.rank = ident.rank
        self.world = ident.world_size
        self.deadline = started + args.timeout
        # Time kept back for naming stuck ranks and printing the report before the bound.
        self.reserve = min(2.5, 0.25 * args.timeout)
        self.phase = "rendezvous"
        self.recorder = report_mod.Recorder()
        self.token, self.token_why = store_mod.job_token(host.env, endpoint.addr, endpoint.port)
        self.listen_sock = None
        self.tampered: list[str] = []
        self.final_lock = threading.Lock()
        self.final_code: int | None = None
        self.store = None
        self.monitor = None
        self.fps: list[dict[str, Any]] = []
        self.wanted = list(report_mod.TITLES) if args.bench else [i for i in report_mod.TITLES
                                                                  if i != "nccl-test.bench"]

    # --- small tools -------------------------------------------------------------------------

    def log(self, message: str) -> None:
        if self.args.verbose:
            print(f"[nccl-test rank {self.rank} {self.host.hostname()} +{time.monotonic() - self.started:.2f}s] "
                  f"{message}", file=sys.stderr, flush=True)

    def say(self, message: str) -> None:
        """A follower's one line when it cannot rely on rank 0 to report."""
        print(f"distdoctor nccl-test: rank {self.rank} ({self.host.hostname()}): {message}", file=sys.stderr,
              flush=True)

    def phase_deadline(self) -> float:
        return self.deadline - self.reserve

    def left(self) -> float:
        return max(0.05, self.phase_deadline() - time.monotonic())

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.log(f"phase {phase}")
        if self.store is not None:
            try:
                self.store.set(f"phase/{self.rank}", phase)
            except Exception:
                pass

    def wait_keys(self, store, keys: list[str], deadline: float) -> list[str]:
        """Wait for keys until the deadline; the keys still missing."""
        if not keys:
            return []
        try:
            store.wait(keys, datetime.timedelta(seconds=max(0.01, deadline - time.monotonic())))
            return []
        except Exception:
            return [k for k in keys if not store.check([k])]

    def get_json(self, store, key: str, deadline: float) -> Any:
        """The sealed value under key, None if it never came. A value that does not open (a
        stranger's, planted before the real one) is waited past until the deadline, then
        raised as Unsealed."""
        while True:
            if self.wait_keys(store, [key], deadline):
                return None
            try:
                return store_mod.unseal(self.token, key, store.get(key))
            except store_mod.Unsealed:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def put(self, key: str, value: Any, store=None) -> None:
        (store or self.store).set(key, store_mod.seal(self.token, key, value))

    def tamper_findings(self) -> list[Finding]:
        """The values rank 0 had to ignore since the last call, as one finding."""
        if not self.tampered:
            return []
        seen, self.tampered = self.tampered, []
        return [fail(f"{len(seen)} value{'s' if len(seen) > 1 else ''} on the rendezvous {'were' if len(seen) > 1 else 'was'}"
                     f" not this job's and {'were' if len(seen) > 1 else 'was'} ignored: " + "; ".join(seen[:4]),
                     subject="rendezvous",
                     explanation="something other than this job's ranks wrote to the store (another job on the "
                     "same port, or a stranger); the rank is reported as silent",
                     fix="export MASTER_PORT=<a port no other job uses>   # e.g. $((20000 + RANDOM % 10000))",
                     evidence={"rejected": seen[:16]})]

    def opened(self, key: str, rank: int) -> Any:
        """Rank 0 reading what a rank published: None, and a note naming the rank, when the value
        is not this job's (overwritten by a stranger, or garbage)."""
        try:
            return store_mod.unseal(self.token, key, self.store.get(key))
        except store_mod.Unsealed as exc:
            self.tampered.append(f"{key} (rank {rank}): {exc}")
            return None

    def tcpstore(self, addr: str, master: bool, timeout: float, listen_fd: int | None = None):
        """A connection to the rendezvous store, with every key under a prefix of this test run:
        under torchrun the store is the agent's, shared with torch's own keys. listen_fd: the
        server's own listening socket (bound to one address; without it TCPStore binds all)."""
        from torch.distributed import PrefixStore, TCPStore

        extra = {"master_listen_fd": listen_fd} if listen_fd is not None else {}
        raw = TCPStore(addr, self.endpoint.port, None, master, datetime.timedelta(seconds=max(0.5, timeout)),
                       wait_for_workers=False, **extra)
        env = self.host.env
        return PrefixStore(f"distdoctor-nccl-test/{env.get('TORCHELASTIC_RUN_ID', '')}/"
                           f"{env.get('TORCHELASTIC_RESTART_COUNT', '')}", raw)

    def agent_store(self) -> bool:
        """torchrun's agent already serves a store on MASTER_PORT: every rank, rank 0 included,
        joins it as a client instead of serving a second one on the same port."""
        return self.host.env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"

    # --- entry --------------------------------------------------------------------------------

    def execute(self) -> int:
        if_addrs = self.host.net_if_addrs()
        choice = interface.choose(self.endpoint.addr, if_addrs, interface.route_source(self.endpoint.addr))
        try:
            listener = mesh.Listener(choice.address or "0.0.0.0", self.rank)
        except OSError as exc:
            listener = None
            self.log(f"mesh listener could not bind {choice.address}: {exc}")
        fp = fingerprint.collect(self.host, self.ident, choice, self.torch)
        fp["mesh_port"] = listener.port if listener else 0
        fp["route"] = choice.how
        fp["hostname_addrs"] = list(self.host.resolve(fp["host"], timeout=2).addresses)
        if self.rank == 0:
            return self.lead(fp, listener, if_addrs)
        return self.follow(fp, listener)

    # --- rank 0 -------------------------------------------------------------------------------

    def _reachable_name(self, mine: set[str], route_address: str) -> str:
        """What to suggest as MASTER_ADDR: rank 0's hostname when it resolves to a real address
        of this host, else the address this host routes from, else any non-loopback address."""
        name = self.host.hostname()
        if any(a in mine and not a.startswith("127.") for a in self.host.resolve(name, timeout=2).addresses):
            return name
        if route_address and not route_address.startswith("127."):
            return route_address
        real = sorted(a for a in mine if not a.startswith(("127.", "fe80", "::1")))
        return real[0] if real else name

    def launch_findings(self, if_addrs, route_address: str) -> tuple[list[Finding], bool]:
        e = self.endpoint
        findings = [ok(f"rank 0 of {self.world} via {self.ident.description}; rendezvous at {e.addr}:{e.port}",
                       explanation=f"address: {e.addr_why}; port: {e.port_why}",
                       evidence={"master_addr": e.addr, "master_port": e.port, "addr_why": e.addr_why,
                                 "port_why": e.port_why, "launcher": self.ident.launcher})]
        resolved = self.host.resolve(e.addr, timeout=2)
        mine = interface.local_addresses(if_addrs)
        local = any(a in mine or a.startswith("127.") or a == "::1" for a in resolved.addresses)
        if resolved.error:
            findings.append(fail(f"MASTER_ADDR {e.addr} does not resolve on rank 0's host: {resolved.error}",
                                 subject=e.addr, fix="export MASTER_ADDR=<rank 0's hostname or address>"))
        elif not local:
            findings.append(fail(
                f"MASTER_ADDR {e.addr} ({', '.join(resolved.addresses)}) is not an address of rank 0's host "
                f"{self.host.hostname()}", subject=e.addr,
                explanation="rank 0 serves the rendezvous; the other ranks look for it at MASTER_ADDR and "
                "will not find it unless this host is reachable there (NAT, a VIP)",
                fix=f"export MASTER_ADDR={self._reachable_name(mine, route_address)}"))
        return findings, local

    def lead(self, fp: dict[str, Any], listener, if_addrs) -> int:
        launch, local = self.launch_findings(if_addrs, fp.get("address") or "")
        self.recorder.add("nccl-test.launch", launch)
        self.recorder.extra["rendezvous"] = {"master_addr": self.endpoint.addr, "master_port": self.endpoint.port,
                                             "addr_why": self.endpoint.addr_why, "port_why": self.endpoint.port_why,
                                             "world_size": self.world, "launcher": self.ident.launcher}
        own = self.endpoint.addr if local else "127.0.0.1"
        serve = not self.agent_store()
        # The store's listener shares ports (SO_REUSEPORT): binding where another store already
        # listens would succeed and split the ranks between the two. Look first.
        if serve and self.host.connect(own, self.endpoint.port, timeout=1).ok:
            return self.port_taken("something already listens there")
        bind = self.store_bind(own, local, if_addrs) if serve else ""
        self.recorder.extra["rendezvous"]["store_listens_on"] = (bind or "every interface") if serve else \
            "torchrun's agent store"
        try:
            if bind:
                self.listen_sock = store_mod.listen(bind, self.endpoint.port)
            self.store = self.tcpstore(own, serve, self.left(),
                                       self.listen_sock.fileno() if self.listen_sock is not None else None)
            self.monitor = self.tcpstore(own, False, 2)
        except Exception as exc:
            text = collectives.first_line(exc)
            in_use = "EADDRINUSE" in text or "in use" in text
            return self.port_taken("the port is in use" if in_use else text, in_use)
        return self.rendezvous(fp, listener, local)

    def store_bind(self, own: str, local: bool, if_addrs) -> str:
        """The one address the store listens on: MASTER_ADDR's when it names one of this host's
        addresses; '' (every interface) only when MASTER_ADDR is a name that resolves to the
        loopback here while other hosts take part (their resolver may say otherwise)."""
        if not local:
            return "127.0.0.1"  # nobody else can find it anyway; the report says why
        try:
            ipaddress.ip_address(own)
            return own
        except ValueError:
            pass
        mine = interface.local_addresses(if_addrs)
        resolved = [a for a in self.host.resolve(own, timeout=2).addresses if a in mine or a.startswith("127.")]
        real = [a for a in resolved if not a.startswith("127.") and a != "::1"]
        single_host = self.ident.local_world_size is not None and self.ident.local_world_size == self.world
        if len(real) == 1:
            return real[0]
        if resolved and not real and (single_host or self.world == 1):
            return resolved[0]
        return ""

    def port_taken(self, why: str, in_use: bool = True) -> int:
        self.recorder.add("nccl-test.rendezvous", [fail(
            f"rank 0 cannot serve the rendezvous on port {self.endpoint.port}: {why}",
            subject=str(self.endpoint.port),
            explanation="another job's rendezvous, or an earlier test still running, holds the port" if in_use else "",
            fix="export MASTER_PORT=<a free port>   # e.g. $((20000 + RANDOM % 10000))")],
            time.monotonic() - self.started)
        return self.finish()

    def rendezvous(self, fp: dict[str, Any], listener, local: bool) -> int:
        """Every rank adds its sealed fingerprint to the roll and counts itself in; rank 0 waits
        for the count, then reads the roll once (one key, whatever the world size)."""
        self.store.append(store_mod.ROLL, store_mod.roll_line(self.token, fp))
        # When MASTER_ADDR is not this host, nobody can find the store: say so within seconds,
        # not at the bound (a NAT or VIP that does reach it gets that long to show).
        deadline = self.phase_deadline() if local else min(self.phase_deadline(), time.monotonic() + FAIL_FAST_S)
        if not local:
            self.say(f"MASTER_ADDR={self.endpoint.addr} is not an address of this host: the other ranks will not "
                     f"find the rendezvous; reporting in {FAIL_FAST_S:g} s")
        while self.store.add(store_mod.ARRIVED, 0) < self.world - 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        roll = store_mod.read_roll(self.token, self.store.get(store_mod.ROLL), self.world)
        self.fps = [roll.fps[r] for r in sorted(roll.fps)]
        self.recorder.extra["fingerprints"] = self.fps
        waited = time.monotonic() - self.started
        hosts = sorted({f["host"] for f in self.fps})
        missing_ranks = [r for r in range(self.world) if r not in roll.fps]
        trouble = rendezvous_trouble(roll, self.world, self.ident.description)
        # A stranger's line is named but stops nothing; two claimants of a rank or a rank of
        # another world would make the collectives hang or mix data.
        strangers = [f for f in trouble if f.subject == "rendezvous"]
        trouble = [f for f in trouble if f.subject != "rendezvous"]
        if missing_ranks:
            trouble.insert(0, self.missing_finding(missing_ranks, waited, local))
            self.recorder.extra["missing_ranks"] = missing_ranks
        if trouble:
            self.recorder.add("nccl-test.rendezvous", trouble + strangers, waited)
            self.put("plan", {"go": False})
            self.add_rank_table()
            return self.finish()
        self.recorder.add("nccl-test.rendezvous", [ok(
            f"all {self.world} ranks arrived in {waited:.2f} s from {len(hosts)} host{'s' if len(hosts) > 1 else ''}: "
            + ", ".join(hosts[:8]) + (" ..." if len(hosts) > 8 else ""))] + strangers, waited)
        self.add_rank_table()
        self.recorder.add("nccl-test.cross-rank", compare.compare(self.fps))
        return self.lead_tests(fp, listener)

    def add_rank_table(self) -> None:
        hosts = {f["host"] for f in self.fps}
        self.recorder.add("nccl-test.ranks", [ok(
            f"{len(self.fps)} rank{'s' if len(self.fps) != 1 else ''} on {len(hosts)} host"
            f"{'s' if len(hosts) != 1 else ''}", evidence={"table": compare.fingerprint_table(self.fps)})])

    def missing_finding(self, missing: list[int], waited: float, master_local: bool) -> Finding:
        placement = expected_rank_hosts(self.host.env)
        arrived_hosts = {f["host"] for f in self.fps} | {f.get("slurm", {}).get("node") for f in self.fps}
        never = [h for h in step_hosts(self.host.env) if h not in arrived_hosts]
        where = ""
        if placement:
            where = " (expected on " + ", ".join(sorted({placement.get(r, "?") for r in missing})) + ")"
        summary = (f"rank{'s' if len(missing) > 1 else ''} {compare.rank_ranges(missing)} of {self.world} never "
                   f"arrived{where} within {waited:.1f} s of rank 0's start")
        if never:
            summary += f"; no rank arrived from host{'s' if len(never) > 1 else ''} {', '.join(never)}"
        causes = [f"the world size is {self.world} (from {self.ident.description}) but fewer processes were "
                  "started, or they started elsewhere",
                  "those ranks crashed before reaching the rendezvous (look at their stderr)",
                  f"they cannot reach {self.endpoint.addr}:{self.endpoint.port} (firewall, wrong MASTER_ADDR, "
                  "a different MASTER_PORT on their side)"]
        if not master_local:
            causes.insert(0, f"MASTER_ADDR={self.endpoint.addr} is not rank 0's host, so the other ranks look for "
                             "the rendezvous somewhere else")
        fix = (f"# on a host of a missing rank, while the test runs:\n"
               f"timeout 5 bash -c '</dev/tcp/{self.endpoint.addr}/{self.endpoint.port}' && echo reachable")
        return fail(summary, subject=compare.rank_ranges(missing), explanation="Likely causes: " + "; ".join(causes),
                    fix=fix, evidence={"missing_ranks": missing, "hosts_without_ranks": never,
                                       "arrived_hosts": sorted(h for h in arrived_hosts if h)})

    def choose_backend(self) -> tuple[str, list[Finding]]:
        notes: list[Finding] = []
        cuda = [f.get("cuda_available") and f.get("nccl") for f in self.fps]
        if self.args.backend:
            return self.args.backend, notes
        if all(cuda):
            return "nccl", notes
        if any(cuda):
            notes.append(warn(f"only ranks {compare.rank_ranges(f['rank'] for f in self.fps if f.get('cuda_available'))}"
                              " have CUDA and NCCL: testing with gloo",
                              explanation="a NCCL job would fail on the ranks without a GPU",
                              fix="nvidia-smi; echo $CUDA_VISIBLE_DEVICES   # on the ranks without CUDA"))
        return "gloo", notes

    def nccl_missing(self) -> Finding | None:
        without = [f for f in self.fps if not (f.get("cuda_available") and f.get("nccl"))]
        if not without:
            return None
        builds = sorted({f"torch {f.get('torch')}" + (f" ({f['cuda_error']})" if f.get("cuda_error") else "")
                         for f in without})
        return fail(f"--backend nccl, but rank{'s' if len(without) > 1 else ''} "
                    f"{compare.rank_ranges(f['rank'] for f in without)} have no usable CUDA GPU with NCCL: "
                    + "; ".join(builds),
                    explanation="NCCL needs a CUDA build of torch and a visible GPU on every rank",
                    fix="nvidia-smi; python -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())'"
                        "   # on those ranks; or run with --backend gloo")

    def gloo_address_problem(self) -> Finding | None:
        """gloo binds to the address the hostname resolves to unless GLOO_SOCKET_IFNAME is set; on a
        host whose name resolves to 127.0.0.1 the peers are told to connect to themselves."""
        bad = [f for f in self.fps if not (f.get("env") or {}).get("GLOO_SOCKET_IFNAME")
               and f.get("hostname_addrs") and all(a.startswith("127.") or a == "::1" for a in f["hostname_addrs"])]
        if not bad or len({f["host"] for f in self.fps}) == 1 and len({f.get("address") for f in self.fps}) == 1:
            return None
        per_host = {f"{f['host']} ({f.get('address')})": f["interface"] for f in self.fps if f.get("interface")}
        names = sorted(set(per_host.values()))
        # GLOO_SOCKET_IFNAME lists devices gloo uses together, all of which must exist: one name
        # per node, not the union NCCL_SOCKET_IFNAME would take.
        value = names[0] if len(names) == 1 else "<this node's interface>   # " + ", ".join(
            f"{i} on {h}" for h, i in sorted(per_host.items()))
        if len(names) == 1:
            value += "   # or map the hostname to the node's real address in /etc/hosts"
        return fail(f"gloo would advertise 127.0.0.1 on rank{'s' if len(bad) > 1 else ''} "
                    f"{compare.rank_ranges(f['rank'] for f in bad)}: the hostname resolves to the loopback",
                    explanation="without GLOO_SOCKET_IFNAME gloo binds to the address of `hostname`; the peers "
                    "are then told to connect to 127.0.0.1 and time out (about 40 s) instead of failing",
                    fix=f"export GLOO_SOCKET_IFNAME={value if names else '<interface>'}")

    def lead_tests(self, fp: dict[str, Any], listener) -> int:
        backend, notes = self.choose_backend()
        self.recorder.extra["backend"] = backend
        hmap = hostmesh.group(self.fps)
        spans = len(hmap.hosts) > 1
        do_mesh = spans if self.args.mesh is None else bool(self.args.mesh)
        if do_mesh and not spans:
            hmap = hostmesh.per_rank(self.fps)  # --mesh on one host: rank to rank
        blocker = self.gloo_address_problem() if backend == "gloo" else self.nccl_missing()
        token = secrets.token_hex(16)
        probe_timeout = min(3.0, max(0.5, self.left() / 4))
        leaders = [hmap.leader(i) for i in range(len(hmap.hosts))]
        plan = {"go": True, "backend": backend, "mesh": bool(do_mesh and listener), "token": token,
                "probe_timeout": probe_timeout, "leaders": leaders}
        mesh_plan = self.plan_mesh(hmap, plan) if plan["mesh"] else {}
        self.put("plan", plan)
        go = blocker is None
        if plan["mesh"]:
            listener.set_token(token)
            go = self.lead_mesh(hmap, plan, mesh_plan) and go
        else:
            self.recorder.add("nccl-test.mesh", [skip(
                "all ranks run on one host: the mesh check is off (--mesh turns it on)" if not spans
                else "turned off with --no-mesh" if listener else "no mesh listener could be opened")])
        self.put("verdict", {"go": go})
        if not go:
            if blocker is not None:
                self.recorder.add("nccl-test.init", notes + [blocker])
            return self.finish("not run: the checks above found a fault that would make it hang")
        results, rows = self.run_collectives(backend)
        self.put("res/0", {"ops": [r.to_dict() for r in results], "bench": rows})
        self.set_phase("results")
        self.gather_results(results, rows, notes)
        return self.finish()

    def plan_mesh(self, hmap: hostmesh.HostMap, plan: dict[str, Any]) -> dict[str, Any]:
        """Publish each host leader's targets under its own key (mplan/<rank>), so that a leader
        reads one key of its own size, not every host's address. Returns rank 0's own."""
        n = len(hmap.hosts)
        pairs = hostmesh.mesh_pairs(n, str(self.args.mesh if isinstance(self.args.mesh, str) else "auto"))
        order = hostmesh.targets(pairs, n)
        ports = {f["rank"]: f.get("mesh_port") or 0 for f in self.fps}
        nbytes = hostmesh.BENCH_TRANSFER_BYTES if self.args.bench else hostmesh.TRANSFER_BYTES
        # Handshakes with every target at once, then one timed transfer after another.
        budget = min(max(1.0, self.left() * 0.4),
                     mesh.probe_seconds(max(len(v) for v in order.values()) if order else 0, plan["probe_timeout"])
                     + sum(plan["probe_timeout"] for _ in range(max((len(v) for v in order.values()), default=0))))
        plan.update(nbytes=nbytes, budget=budget, pairs=len(pairs))
        mine: dict[str, Any] = {}
        for s in range(n):
            item = {"targets": [[hmap.leader(d), hmap.addresses[d], ports.get(hmap.leader(d), 0)]
                                for d in order.get(s, [])]}
            if hmap.leader(s) == 0:
                mine = item
            else:
                self.put(f"mplan/{hmap.leader(s)}", item)
        return mine

    def lead_mesh(self, hmap: hostmesh.HostMap, plan: dict[str, Any], mine: dict[str, Any]) -> bool:
        self.set_phase("mesh")
        started = time.monotonic()
        leader_index = {hmap.leader(i): i for i in range(len(hmap.hosts))}
        rows: dict[int, dict[str, Any]] = {0: run_mesh_row(mine, plan, 0)}
        others = [hmap.leader(i) for i in range(len(hmap.hosts)) if hmap.leader(i) != 0]
        missing = self.wait_keys(self.store, [f"mesh/{r}" for r in others],
                                 min(self.phase_deadline(), time.monotonic() + 3 + plan["budget"]))
        malformed: list[int] = []
        for r in others:
            if f"mesh/{r}" in missing:
                continue
            row = parse_mesh_row(self.opened(f"mesh/{r}", r))
            if row is None:
                malformed.append(r)
            else:
                rows[r] = row
        results = {(leader_index[s], leader_index[d]): probe for s, row in rows.items()
                   for d, probe in row.items() if d in leader_index}
        silent = [leader_index[int(k.split("/")[1])] for k in missing] + [leader_index[r] for r in malformed]
        verdict = hostmesh.judge(len(hmap.hosts), results, silent)
        unit = "host" if len(hostmesh.group(self.fps).hosts) > 1 else "rank"
        found = hostmesh.findings(hmap, verdict, plan["pairs"], plan["nbytes"], unit) + self.tamper_findings()
        table = hostmesh.host_table(hmap, results) if len(hmap.hosts) <= 32 else None
        if table:
            found = [dataclasses.replace(f, evidence={**(f.evidence or {}), "table": table}) if i == 0 else f
                     for i, f in enumerate(found)]
        self.recorder.extra["mesh"] = {
            "hosts": [{"host": hmap.hosts[i], "ranks": hmap.ranks[i], "address": hmap.addresses[i]}
                      for i in range(len(hmap.hosts))],
            "rows": {str(s): {str(d): p.get("status") for d, p in row.items()} for s, row in rows.items()},
            "rates": {str(s): {str(d): p.get("rate_gbs") for d, p in row.items() if p.get("moved")}
                      for s, row in rows.items()},
            "blocked": [[hmap.leader(s), hmap.leader(d), st] for s, d, st in verdict.blocked],
            "transfer_bytes": plan["nbytes"], "median_gbs": verdict.median_gbs}
        self.recorder.add("nccl-test.mesh", found, time.monotonic() - started)
        return not (verdict.blocked or verdict.stalled or verdict.silent)

    def gather_results(self, mine: list[collectives.OpResult], my_rows: list[dict], notes: list[Finding]) -> None:
        deadline = self.phase_deadline()
        if not all(r.ok for r in mine):
            # This rank already saw the failure; a peer that is still alive reports within moments.
            deadline = min(deadline, time.monotonic() + 2.0)
        missing = self.wait_keys(self.store, [f"res/{r}" for r in range(1, self.world)], deadline)
        results: dict[int, dict[str, Any]] = {0: {"ops": [r.to_dict() for r in mine], "bench": my_rows}}
        for r in range(1, self.world):
            if f"res/{r}" not in missing:
                got = self.opened(f"res/{r}", r)
                if isinstance(got, dict) and isinstance(got.get("ops"), list):
                    results[r] = got
                else:
                    missing.append(f"res/{r}")
        silent = sorted(int(k.split("/")[1]) for k in missing)
        notes = list(notes) + self.tamper_findings()
        states = self.rank_states(silent) if silent else {}
        # Each silent rank is reported under the step it was in when it went quiet.
        silent_at: dict[str, list[int]] = {}
        names = ["init"] + [n for n, _ in collectives.OPS] + (["bench"] if self.args.bench else [])
        for r in silent:
            check_id = PHASE_CHECK.get(states[r][0], "nccl-test.init")
            silent_at.setdefault(check_id if check_id[len("nccl-test."):] in names else "nccl-test.init",
                                 []).append(r)
        self.recorder.extra["results"] = {str(k): v for k, v in results.items()}
        for name in names:
            check_id = f"nccl-test.{name}"
            per_rank = {r: next((op for op in res["ops"] if op["name"] == name), None) for r, res in results.items()}
            findings = list(notes) if name == "init" else []
            failed = {r: op for r, op in per_rank.items() if op is not None and not op["ok"]}
            ran = {r: op for r, op in per_rank.items() if op is not None}
            for detail, ranks in _group_details(failed).items():
                findings.append(fail(f"rank{'s' if len(ranks) > 1 else ''} {compare.rank_ranges(ranks)}: {detail}",
                                     subject=compare.rank_ranges(ranks), explanation=self.op_explanation(name, silent),
                                     fix=self.op_fix(name)))
            quiet = silent_at.get(check_id, [])
            if quiet:
                findings.append(fail(f"no result from rank{'s' if len(quiet) > 1 else ''} "
                                     f"{compare.rank_ranges(quiet)}: " + "; ".join(states[r][1] for r in quiet),
                                     subject=compare.rank_ranges(quiet),
                                     explanation="a rank that stops responding in the middle of a job hangs every "
                                     "collective of the others until their timeout"))
            if not ran and not quiet:
                continue
            if name == "bench" and not findings:
                continue  # a sweep that ran everywhere is judged by add_bench
            if not findings:
                slowest = max(op["seconds"] for op in ran.values())
                detail = ran[0]["detail"] if 0 in ran else ""
                findings.append(ok(f"{self.recorder.extra.get('backend')}: {detail or 'ok on every rank'} "
                                   f"(slowest rank {slowest * 1000:.1f} ms)"))
            duration = max((op["seconds"] for op in ran.values()), default=0.0)
            self.recorder.add(check_id, findings, duration)
        if self.args.bench and not self.recorder.has("nccl-test.bench"):
            self.add_bench(my_rows, results, silent)

    def add_bench(self, rows: list[dict], results: dict[int, dict[str, Any]], silent: list[int]) -> None:
        if not rows:
            return
        wrong = sorted(r for r, res in results.items() for row in res.get("bench") or [] if row.get("ok") is False)
        self.recorder.extra["bench"] = rows
        evidence = {"table": bench_mod.bench_table(rows)}
        done = [r for r in rows if "skipped" not in r]
        if wrong:
            finding = fail(f"wrong all_reduce results on rank{'s' if len(set(wrong)) > 1 else ''} "
                           f"{compare.rank_ranges(wrong)}", evidence=evidence)
        elif not done:
            finding = warn("no size was measured before the deadline", evidence=evidence)
        else:
            peak = max(done, key=lambda r: r["busbw_gbs"])
            finding = ok(f"{len(done)} sizes, all correct; peak busbw {peak['busbw_gbs']:.3f} GB/s at "
                         f"{bench_mod.human_size(peak['bytes'])}", evidence=evidence)
        self.recorder.add("nccl-test.bench", [finding], sum(r.get("time_us", 0) for r in done) / 1e6)

    def op_explanation(self, name: str, silent: list[int]) -> str:
        if name == "init":
            return ("the ranks met at the rendezvous but could not connect to each other: gloo/NCCL use other "
                    "ports and the interface they bind to (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)")
        return "the collective failed or gave a wrong answer" + (
            " because a peer stopped responding" if silent else "")

    def op_fix(self, name: str) -> str:
        if name == "init":
            return "NCCL_DEBUG=INFO distdoctor nccl-test -v   # shows the interface and the peer that fails"
        return "distdoctor nccl-test -v --bench   # repeat with every rank's log"

    def rank_states(self, ranks: list[int]) -> dict[int, tuple[str, str]]:
        """For each silent rank: (its last phase, a sentence on where it was and whether it is
        still alive: its heartbeat counter moves). Uses the monitor connection so that a main
        connection blocked in a call cannot stall it."""
        store = self.monitor or self.store
        hosts = {f["rank"]: f"{f['host']} pid {f['pid']}" for f in self.fps}
        if store is None:
            return {r: ("", f"rank {r} ({hosts.get(r, '?')}): state unknown") for r in ranks}

        def beats() -> dict[int, int]:
            return {r: store.add(f"hb/{r}", 0) for r in ranks}

        try:
            before = beats()
            time.sleep(HEARTBEAT_S * 3 + 0.1)
            after = beats()
            phases = {r: (store.get(f"phase/{r}").decode() if store.check([f"phase/{r}"]) else "rendezvous")
                      for r in ranks}
        except Exception as exc:
            return {r: ("", f"rank {r} ({hosts.get(r, '?')}): state unknown ({collectives.first_line(exc)})")
                    for r in ranks}
        return {r: (phases[r], f"rank {r} ({hosts.get(r, '?')}) " + (
            f"stopped responding during {phases[r]}: its process is gone or frozen" if after[r] == before[r]
            else f"is alive but still in {phases[r]}")) for r in ranks}

    def run_collectives(self, backend: str) -> tuple[list[collectives.OpResult], list[dict]]:
        import torch.distributed as dist

        torch = self.torch
        results: list[collectives.OpResult] = []
        device = torch.device("cpu")
        sync = lambda: None  # noqa: E731
        self.set_phase("init")
        started = time.monotonic()
        timeout = datetime.timedelta(seconds=self.left())
        try:
            if backend == "nccl":
                device = torch.device("cuda", self.ident.local_rank)
                torch.cuda.set_device(device)
                sync = torch.cuda.synchronize
            kwargs = {"device_id": device} if backend == "nccl" else {}
            dist.init_process_group(backend, store=dist.PrefixStore("pg", self.store), rank=self.rank,
                                    world_size=self.world, timeout=timeout, **kwargs)
            if backend == "gloo":
                # Names every rank that does not reach the barrier, where a plain barrier just hangs.
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=self.left()), wait_all_ranks=True)
        except Exception as exc:
            results.append(collectives.OpResult("init", False, time.monotonic() - started,
                                                collectives.first_line(exc)))
            return results, []
        results.append(collectives.OpResult("init", True, time.monotonic() - started,
                                            f"process group of {self.world} ranks"))
        for name, op in collectives.OPS:
            self.set_phase(name)
            result = collectives.timed(name, sync, lambda op=op: op(torch, dist, device, self.rank, self.world))
            results.append(result)
            self.log(f"{name}: {'ok' if result.ok else 'FAILED'} {result.detail}")
            if not result.ok and result.detail.startswith(("RuntimeError", "DistBackendError", "DistError")):
                return results, []
        rows: list[dict] = []
        if self.args.bench:
            self.set_phase("bench")
            try:
                rows = bench_mod.sweep(torch, dist, device, self.rank, self.world, self.args.bench_sizes,
                                       self.args.iters, sync, self.phase_deadline() - 1.0,
                                       on_size=lambda s: self.log(f"bench {bench_mod.human_size(s)}"))
            except Exception as exc:
                results.append(collectives.OpResult("bench", False, 0.0, collectives.first_line(exc)))
        try:
            dist.destroy_process_group()
        except Exception:
            pass
        return results, rows

    # --- other ranks --------------------------------------------------------------------------

    def heartbeat(self) -> None:
        while True:
            try:
                self.monitor.add(f"hb/{self.rank}", 1)
            except Exception:
                return
            time.sleep(HEARTBEAT_S)

    def follow(self, fp: dict[str, Any], listener) -> int:
        e = self.endpoint
        self.log(f"rendezvous at {e.addr}:{e.port} ({e.addr_why})")
        why = wait_for_port(self.host, e.addr, e.port, self.phase_deadline())
        if why:
            home = expected_rank_hosts(self.host.env).get(0)
            self.say(f"cannot reach the rendezvous at {e.addr}:{e.port} ({e.addr_why}) within "
                     f"{self.args.timeout:g} s: {why}" + (f"; rank 0 should run on {home}" if home else ""))
            return 2
        try:
            self.store = self.tcpstore(e.addr, False, self.left())
            self.monitor = self.tcpstore(e.addr, False, 2)
        except Exception as exc:
            self.say(f"cannot join the rendezvous store at {e.addr}:{e.port}: {collectives.first_line(exc)}")
            return 2
        threading.Thread(target=self.heartbeat, daemon=True, name="nccl-test-heartbeat").start()
        try:
            return self.follow_plan(fp, listener)
        except self.torch.distributed.DistError as exc:  # rank 0 went away mid-protocol
            self.say(f"lost the connection to rank 0 at {e.addr}:{e.port} in {self.phase}: "
                     f"{collectives.first_line(exc)}")
            return 2
        except store_mod.Unsealed as exc:
            self.say(f"the rendezvous at {e.addr}:{e.port} is not this job's ({exc}): another job's rank 0 "
                     f"serves that port; give this job its own MASTER_PORT")
            return 2

    def follow_plan(self, fp: dict[str, Any], listener) -> int:
        self.store.append(store_mod.ROLL, store_mod.roll_line(self.token, fp))
        self.store.add(store_mod.ARRIVED, 1)
        # Rank 0 decides at its own phase deadline at the latest; wait past that for its word.
        plan = self.get_json(self.store, "plan", self.deadline + 1.0)
        if plan is None:
            self.say("rank 0 never answered at the rendezvous (it hung or died)")
            return 2
        if not plan["go"]:
            return self.follow_final(1)
        if plan["mesh"] and listener:
            listener.set_token(plan["token"])
        if plan["mesh"] and self.rank in plan.get("leaders", ()):
            self.set_phase("mesh")
            mine = self.get_json(self.store, f"mplan/{self.rank}", self.phase_deadline()) or {"targets": []}
            row = run_mesh_row(mine, plan, self.rank)
            self.log(f"mesh row: {row}")
            self.put(f"mesh/{self.rank}", {str(k): v for k, v in row.items()})
        verdict = self.get_json(self.store, "verdict", self.deadline + 1.0)
        if verdict is None or not verdict["go"]:
            return self.follow_final(1 if verdict is not None else 2)
        results, rows = self.run_collectives(plan["backend"])
        try:
            self.put(f"res/{self.rank}", {"ops": [r.to_dict() for r in results], "bench": rows})
        except Exception as exc:
            self.say(f"cannot report results to rank 0: {collectives.first_line(exc)}")
            return 2
        return self.follow_final(0 if all(r.ok for r in results) else 1)

    def follow_final(self, fallback: int) -> int:
        """Wait for rank 0's verdict so that every rank exits with the same code."""
        self.set_phase("final")
        try:
            # Rank 0 publishes the code by its own deadline plus the time to name stuck ranks.
            final = self.get_json(self.store, "final", self.deadline + 1.8)
        except Exception as exc:  # rank 0 went away before it published the result
            self.say(f"lost the connection to rank 0: {collectives.first_line(exc)}")
            return fallback or 2
        if final is None:
            self.say("rank 0 did not report a result in time")
            return 2
        try:
            self.store.add("bye", 1)
        except Exception:  # rank 0 stops waiting for the others after a moment
            pass
        return int(final["code"])

    # --- the end ------------------------------------------------------------------------------

    def finish(self, not_reached: str = "not run: an earlier step failed") -> int:
        """Rank 0: render, publish the exit code, let the others read it, return it."""
        with self.final_lock:
            runs = self.recorder.runs(self.wanted, not_reached)
            code = report_mod.exit_code(runs)
            if self.store is not None:
                try:
                    self.put("final", {"code": code})
                    arrived = len(self.fps) - 1
                    end = min(time.monotonic() + 2.0, self.deadline)
                    while arrived > 0 and self.store.add("bye", 0) < arrived and time.monotonic() < end:
                        time.sleep(0.005)
                except Exception:
                    pass
            self.render(runs)
            self.final_code = code
            return code

    def render(self, runs) -> None:
        context = RunContext(self.ident.kind, self.ident.description, self.ident.launcher, self.rank,
                             self.ident.local_rank, self.world, self.ident.local_world_size, self.ident.node_rank,
                             self.ident.job_id, self.ident.step_id)
        report = report_mod.build(runs, self.host.hostname(), context, self.started_wall,
                                  time.monotonic() - self.started)
        report_mod.emit(report_mod.render(report, self.args.format, self.args.verbose,
                                          {"nccl_test": self.recorder.extra}))

    def crash(self, exc: BaseException) -> int:
        """Rank 0 hit a bug: report what is known, with the error under the step it was in."""
        with self.final_lock:
            if self.final_code is not None:
                return self.final_code
        check_id = PHASE_CHECK.get(self.phase, "nccl-test.init")
        self.recorder.add(check_id, [Finding(Status.ERROR, f"distdoctor failed in {self.phase}: "
                                             f"{collectives.first_line(exc)}",
                                             fix="distdoctor nccl-test -v   # and report this as a distdoctor bug")],
                          status=Status.ERROR)
        return self.finish("not run: distdoctor failed before it")

    def last_words(self) -> int:
        """The watchdog's: what is known at the deadline."""
        if self.rank != 0:
            self.say(f"gave up at the {self.args.timeout:g} s bound while in {self.phase} "
                     f"(rank 0 {self.endpoint.addr}:{self.endpoint.port} reports the details)")
            return 2
        if not self.final_lock.acquire(timeout=1.5):
            return 2
        if self.final_code is not None:  # the report is out: the bound came just after it
            return self.final_code
        phase = self.phase
        check_id = PHASE_CHECK.get(phase, "nccl-test.init")
        timeout = Finding(Status.TIMEOUT, f"{phase} did not finish within the {self.args.timeout:g} s bound",
                          explanation="a transport call hung past its own timeout; distdoctor ended the test at "
                          "the bound", fix="distdoctor nccl-test -v   # every rank logs its progress to stderr")
        self.recorder.add(check_id, [timeout], time.monotonic() - self.started, status=Status.TIMEOUT)
        code = report_mod.exit_code(self.recorder.runs(self.wanted, ""))
        store = self.monitor or self.store  # the main connection may be blocked in a call
        try:  # first, so that the other ranks can end with the same code while this one reports
            self.put("final", {"code": code}, store)
        except Exception:
            pass
        others = [f["rank"] for f in self.fps if f["rank"] != 0]
        findings = [timeout] + self.reported_failures(store, others, phase)
        quiet = [r for r in others if not store.check([f"res/{r}"])] if store is not None else others
        states = {r: text for r, (_p, text) in self.rank_states(quiet).items()} if quiet else {}
        if states:
            findings.append(fail("; ".join(states.values()), subject=compare.rank_ranges(quiet),
                                 evidence={"ranks": {str(r): s for r, s in states.items()}}))
        self.recorder.add(check_id, findings, time.monotonic() - self.started, status=Status.TIMEOUT)
        self.render(self.recorder.runs(self.wanted, "not run: the test hit its time bound"))
        return code

    def reported_failures(self, store, ranks: list[int], phase: str) -> list[Finding]:
        """Failures other ranks already published while this rank was stuck: often the cause
        (a peer's 'connection refused, remote=127.0.0.1' explains rank 0's hang)."""
        findings = []
        for r in ranks:
            try:
                if store is None or not store.check([f"res/{r}"]):
                    continue
                ops = store_mod.unseal(self.token, f"res/{r}", store.get(f"res/{r}"))["ops"]
            except Exception:
                continue
            for op in ops:
                if not op["ok"]:
                    findings.append(fail(f"rank {r}: {op['name']} failed: {op['detail']}", subject=str(r)))
        return findings


def rendezvous_trouble(roll: store_mod.Roll, world: int, source: str) -> list[Finding]:
    """What the roll shows besides missing ranks: two processes on one rank, ranks of another
    world size, lines that are not this job's."""
    out = []

    def who(fp: dict[str, Any]) -> str:
        return f"{fp.get('host')} pid {fp.get('pid')}"

    for rank, claimants in sorted(roll.duplicates.items()):
        out.append(fail(f"rank {rank} is claimed by {len(claimants)} processes: "
                        + ", ".join(who(f) for f in claimants), subject=str(rank),
                        explanation="two processes started with the same rank (a launcher run twice, or RANK set "
                        "by hand): the collectives would mix their data or hang",
                        fix="pgrep -af 'distdoctor nccl-test'   # on those hosts: stop the extra process",
                        evidence={"rank": rank, "claimants": [{"host": f.get("host"), "pid": f.get("pid")}
                                                              for f in claimants]}))
    if roll.other_world:
        sizes = sorted({f["world_size"] for f in roll.other_world})
        out.append(fail(f"{len(roll.other_world)} process{'es' if len(roll.other_world) > 1 else ''} of this job "
                        f"think{'' if len(roll.other_world) > 1 else 's'} the world size is "
                        f"{', '.join(map(str, sizes))}, not {world}: "
                        + ", ".join(f"rank {f['rank']} ({who(f)}, world {f['world_size']})"
                                    for f in roll.other_world[:8]),
                        subject="world_size",
                        explanation=f"rank 0 has world size {world} from {source}; every rank must be started "
                        "with the same one, or the rendezvous waits for ranks that never come",
                        fix="echo $WORLD_SIZE $SLURM_NTASKS $OMPI_COMM_WORLD_SIZE   # on those ranks: the launch "
                            "must give every rank the same world size",
                        evidence={"ranks": [{"rank": f["rank"], "world_size": f["world_size"], "host": f.get("host"),
                                             "pid": f.get("pid")} for f in roll.other_world]}))
    if roll.foreign:
        hints = "; ".join(", ".join(f"{k} {v}" for k, v in h.items()) for h in roll.foreign_hints[:4])
        out.append(fail(f"{len(roll.foreign)} value{'s' if len(roll.foreign) > 1 else ''} on the rendezvous did "
                        f"not come from this job: {roll.foreign[0]}" + (f" (unverified: {hints})" if hints else ""),
                        subject="rendezvous",
                        explanation="another job uses the same MASTER_ADDR:MASTER_PORT, or something else wrote to "
                        "the store; its data was ignored",
                        fix="export MASTER_PORT=<a port no other job uses>   # e.g. $((20000 + RANDOM % 10000))",
                        evidence={"rejected": roll.foreign[:16], "claims": roll.foreign_hints[:16]}))
    return out


def run_mesh_row(mine: dict[str, Any], plan: dict[str, Any], rank: int) -> dict[int, dict[str, Any]]:
    """A host leader's probes of its targets: {leader rank: Probe as a dict}."""
    peers = {int(r): (str(addr), int(port)) for r, addr, port in mine.get("targets", [])}
    row = mesh.probe_hosts(peers, plan["token"], rank, plan["probe_timeout"], int(plan.get("nbytes", 0)),
                           float(plan.get("budget", 5.0)))
    return {r: p.to_dict() for r, p in row.items()}


def parse_mesh_row(data: Any) -> dict[int, dict[str, Any]] | None:
    """A leader's published row, or None when it is not one (a stranger's or a broken write)."""
    try:
        return {int(d): {"status": str(p["status"]), "rate_gbs": float(p.get("rate_gbs") or 0.0),
                         "seconds": float(p.get("seconds") or 0.0), "moved": int(p.get("moved") or 0)}
                for d, p in data.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _group_details(failed: dict[int, dict[str, Any]]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for rank, op in sorted(failed.items()):
        groups.setdefault(op["detail"], []).append(rank)
    return groups
