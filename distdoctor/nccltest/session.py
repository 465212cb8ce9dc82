"""One rank's run of nccl-test: what its phases share, and how it ends.

The phases are units of their own: rank 0's sequence is in lead.py, the other ranks' in
follow.py; the judgements they make are pure modules (arrival, backend, hostmesh, results).
A `Rank` carries what every phase needs (the arguments, the host, who this rank is, the
store channel, the clock) and the ending: `finish` (rank 0 reports and publishes the exit code
every rank returns), `crash` (a bug, reported under its phase) and `last_words` (the watchdog's
report at the bound, naming the phase that used the time).

Every rank talks to the others only through distdoctor's bounded store (store_server.py),
served by rank 0 on the rendezvous port (under torchrun's agent, the agent's TCPStore), in
this order (each wait bounded by the deadline; every connection proves the job's token, see
store_wire.py, and every value is sealed with it, see store.py):

    roll, arrived  every rank's fingerprint on one roll, and a count -> rank 0 reads one key
    plan           rank 0: go/no-go, backend, mesh settings, the host leaders
    mplan/<rank>   rank 0 to each host leader: the leaders it probes
    mesh/<rank>    each host leader's probes
    verdict        rank 0: go/no-go for the collectives after the mesh
    phase/<rank>   where each rank is (init, all-reduce, ...), read only when something hangs
    hb/<rank>      a heartbeat counter: tells a dead or frozen rank from a slow one
    res/<rank>     each rank's collective results
    final          rank 0: the exit code every rank returns; bye counts who read it

The process group is initialised on the same store (under a prefix), so the test needs one
port, the one the report names.
"""

from __future__ import annotations

import datetime
import sys
import threading
import time
from typing import Any

from distdoctor.api import fail
from distdoctor.model import Finding, RunContext, Status
from distdoctor.nccltest import (
    collectives,
    compare,
)
from distdoctor.nccltest import report as report_mod
from distdoctor.nccltest import store as store_mod
from distdoctor.nccltest.clock import Clock
from distdoctor.nccltest.rendezvous import Endpoint, Identity
from distdoctor.nccltest.results import PHASE_CHECK

# How often a rank other than 0 says it is alive (follow.heartbeat), and how long rank 0
# waits for three of those beats before it calls a rank frozen.
HEARTBEAT_S = 0.3

# Phases that touch no network: a bound spent here is not a transport problem.
_LOCAL_PHASES = ("start", "import torch", "launch")


class Rank:
    """What the phases of one rank share. Phases read and set these attributes; the sequence
    lives in lead.run and follow.run."""

    def __init__(self, args, host, ident: Identity, endpoint: Endpoint, clock: Clock, started_wall: float,
                 torch: Any):
        self.args = args
        self.host = host
        self.ident = ident
        self.endpoint = endpoint
        self.torch = torch
        self.clock = clock
        self.started = clock.started
        self.started_wall = started_wall
        self.rank = ident.rank
        self.world = ident.world_size
        self.deadline = clock.deadline
        self.recorder = report_mod.Recorder()
        self.token, self.token_why = store_mod.job_token(host.env, endpoint.addr, endpoint.port)
        self.final_lock = threading.Lock()
        self.final_code: int | None = None
        self.channel: store_mod.Channel | None = None
        self.monitor: store_mod.Channel | None = None  # a second connection: never blocked by a call
        self.server: Any = None  # rank 0's store_server.Server, when it serves the store
        self.fps: list[dict[str, Any]] = []
        self.doomed = False  # a follower that knows the job fails whatever rank 0 says
        # nccl-test.localise appears only when its rounds ran
        self.wanted = [i for i in report_mod.TITLES if i != "nccl-test.localise" and (args.bench or i != "nccl-test.bench")]
        self.collective_reserve = 0.0  # seconds the collectives leave for the localisation rounds

    @property
    def phase(self) -> str:
        return self.clock.current

    def phase_deadline(self) -> float:
        return self.clock.phase_deadline()

    def left(self) -> float:
        return self.clock.left()

    def log(self, message: str) -> None:
        if self.args.verbose:
            print(f"[nccl-test rank {self.rank} {self.host.hostname()} +{time.monotonic() - self.started:.2f}s] "
                  f"{message}", file=sys.stderr, flush=True)

    def say(self, message: str) -> None:
        """A follower's one line when it cannot rely on rank 0 to report."""
        print(f"distdoctor nccl-test: rank {self.rank} ({self.host.hostname()}): {message}", file=sys.stderr,
              flush=True)

    def set_phase(self, phase: str) -> None:
        """Enter a phase: the clock records where the time goes; the store tells rank 0 where
        this rank is if it goes quiet."""
        self.clock.enter(phase)
        self.log(f"phase {phase}")
        if self.channel is not None:
            try:
                self.channel.store.set(f"phase/{self.rank}", phase)
            except Exception:  # a store gone away is reported by the phase that needs it
                pass

    def connect(self, addr: str, master: bool, timeout: float, listener=None):
        """A connection to the rendezvous store, with every key under a prefix of this test run.
        master: rank 0 serves distdoctor's bounded store (store_server.py) on `listener`, its own
        listening socket bound to one address. Under torchrun's agent the store is the agent's
        TCPStore, shared with torch's own keys: every rank joins it as a client."""
        env = self.host.env
        prefix = f"distdoctor-nccl-test/{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '')}"
        if self.agent_store():
            from torch.distributed import PrefixStore, TCPStore

            raw = TCPStore(addr, self.endpoint.port, None, False, datetime.timedelta(seconds=max(0.5, timeout)),
                           wait_for_workers=False)
            return store_mod.Channel(PrefixStore(prefix, raw), self.token)
        from distdoctor.nccltest import store_server, store_wire
        from distdoctor.nccltest.store_torch import BoundedStore

        if master and self.server is None:
            self.server = store_server.Server(listener, self.token, store_server.Limits.for_world(self.world)).start()
        claims = {"host": self.host.hostname(), "pid": self.host.pid(), "rank": self.rank, "world_size": self.world}
        conn = store_wire.Connection(addr, self.endpoint.port, self.token, claims, timeout)
        return store_mod.Channel(BoundedStore(conn, prefix, timeout), self.token)

    def agent_store(self) -> bool:
        """torchrun's agent already serves a store on MASTER_PORT: every rank, rank 0 included,
        joins it as a client instead of serving a second one on the same port."""
        return self.host.env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"

    # --- the end ------------------------------------------------------------------------------

    def finish(self, not_reached: str = "not run: an earlier step failed") -> int:
        """Rank 0: render, publish the exit code, let the others read it, return it."""
        with self.final_lock:
            runs = self.recorder.runs(self.wanted, not_reached)
            code = report_mod.exit_code(runs)
            if self.channel is not None:
                try:
                    self.channel.put("final", {"code": code})
                    # Every process that counted itself in reads the code, a duplicate or a rank of
                    # another world size too (they are not in self.fps).
                    arrived = max(len(self.fps) - 1, self.channel.store.add(store_mod.ARRIVED, 0))
                    end = min(time.monotonic() + 2.0, self.deadline)
                    while arrived > 0 and self.channel.store.add("bye", 0) < arrived and time.monotonic() < end:
                        time.sleep(0.005)
                except Exception:  # the others fall back to their own view of the verdict
                    pass
            self.render(runs)
            self.final_code = code
            return code

    def render(self, runs) -> None:
        self.recorder.extra["phases"] = [{"phase": p, "seconds": round(s, 3)} for p, s in self.clock.spent()]
        context = RunContext(self.ident.kind, self.ident.description, self.ident.launcher, self.rank,
                             self.ident.local_rank, self.world, self.ident.local_world_size, self.ident.node_rank,
                             self.ident.job_id, self.ident.step_id)
        report = report_mod.build(runs, self.host.hostname(), context, self.started_wall,
                                  time.monotonic() - self.started)
        output = getattr(self.args, "output", None)
        report_mod.emit(report_mod.render(report, self.args.format, self.args.verbose,
                                          {"nccl_test": self.recorder.extra}, bool(output)), output)

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

    def interrupted(self) -> int:
        """Ctrl-C: rank 0 reports what is known so far; every rank ends with 2 (incomplete)."""
        if self.rank != 0:
            self.say(f"interrupted in {self.phase}")
            return 2
        with self.final_lock:
            if self.final_code is not None:
                return self.final_code
        check_id = PHASE_CHECK.get(self.phase, "nccl-test.init")
        self.recorder.add(check_id, [Finding(Status.TIMEOUT, f"interrupted during {self.phase} "
                                             f"(time by phase: {self.clock.blame()})")], status=Status.TIMEOUT)
        self.finish("not run: the test was interrupted")
        return 2

    def last_words(self) -> int:
        """The watchdog's: what is known at the deadline, and which phase used the time."""
        if self.rank != 0:
            self.say(f"gave up at the {self.args.timeout:g} s bound while in {self.phase} "
                     f"(rank 0 {self.endpoint.addr}:{self.endpoint.port} reports the details; time by phase: "
                     f"{self.clock.blame()})")
            return 2
        if not self.final_lock.acquire(timeout=1.5):
            return 2
        if self.final_code is not None:  # the report is out: the bound came just after it
            return self.final_code
        phase = self.phase
        check_id = PHASE_CHECK.get(phase, "nccl-test.init")
        # What the phase had already concluded (the ranks that never arrived) is the cause; on a
        # loaded node the bound can come while its report is being written: keep it, first.
        prior = self.recorder.findings(check_id)
        hog = self.clock.hog()
        summary = f"{phase} did not finish within the {self.args.timeout:g} s bound"
        if prior:
            summary = f"{phase} had its answer, but the report was not out within the {self.args.timeout:g} s bound"
        if hog and hog[0] != phase:
            summary += f": {hog[0]} took {hog[1]:.1f} s of it"
        culprit = hog[0] if hog else phase
        if culprit in _LOCAL_PHASES:
            why = (f"{culprit} used the bound on this host before any network was involved (a slow shared "
                   "filesystem, a cold cache, many processes importing at once): give the test more time with "
                   "--timeout, or warm the Python environment first")
        elif hog and hog[0] != phase:
            why = f"{hog[0]} used most of the bound: give the test more time (--timeout) or look at what slows it"
        else:
            why = "a transport call hung past its own timeout; distdoctor ended the test at the bound"
        explanation = f"time by phase: {self.clock.blame()}. {why}"
        timeout = Finding(Status.TIMEOUT, summary, explanation=explanation,
                          fix="distdoctor nccl-test -v   # every rank logs its progress to stderr")
        self.recorder.add(check_id, [*prior, timeout], time.monotonic() - self.started, status=Status.TIMEOUT)
        code = report_mod.exit_code(self.recorder.runs(self.wanted, ""))
        channel = self.monitor or self.channel  # the main connection may be blocked in a call
        try:  # first, so that the other ranks can end with the same code while this one reports
            channel.put("final", {"code": code})
        except Exception:  # no store: the others end at their own bound
            pass
        others = [f["rank"] for f in self.fps if f["rank"] != 0]
        findings = [*prior, timeout] + self.reported_failures(channel, others)
        quiet = [r for r in others if not channel.store.check([f"res/{r}"])] if channel is not None else others
        states = {r: text for r, (_p, text) in self.rank_states(quiet).items()} if quiet else {}
        if states:
            findings.append(fail("; ".join(states.values()), subject=compare.rank_ranges(quiet),
                                 evidence={"ranks": {str(r): s for r, s in states.items()}}))
        self.recorder.add(check_id, findings, time.monotonic() - self.started, status=Status.TIMEOUT)
        self.render(self.recorder.runs(self.wanted, "not run: the test hit its time bound"))
        return code

    def reported_failures(self, channel, ranks: list[int]) -> list[Finding]:
        """Failures other ranks already published while this rank was stuck: often the cause
        (a peer's 'connection refused, remote=127.0.0.1' explains rank 0's hang)."""
        findings = []
        for r in ranks:
            try:
                if channel is None or not channel.store.check([f"res/{r}"]):
                    continue
                ops = store_mod.unseal(self.token, f"res/{r}", channel.store.get(f"res/{r}"))["ops"]
            except Exception:  # a rank's unreadable results are named as silent instead
                continue
            for op in ops:
                if not op["ok"]:
                    findings.append(fail(f"rank {r}: {op['name']} failed: {op['detail']}", subject=str(r)))
        return findings

    def rank_states(self, ranks: list[int]) -> dict[int, tuple[str, str]]:
        """For each silent rank: (its last phase, a sentence on where it was and whether it is
        still alive: its heartbeat counter moves). Uses the monitor connection so that a main
        connection blocked in a call cannot stall it."""
        channel = self.monitor or self.channel
        hosts = {f["rank"]: f"{f['host']} pid {f['pid']}" for f in self.fps}
        if channel is None:
            return {r: ("", f"rank {r} ({hosts.get(r, '?')}): state unknown") for r in ranks}
        store = channel.store

        def beats() -> dict[int, int]:
            return {r: store.add(f"hb/{r}", 0) for r in ranks}

        try:
            before = beats()
            time.sleep(HEARTBEAT_S * 3 + 0.1)
            after = beats()
            phases = {r: (store.get(f"phase/{r}").decode("utf-8", "replace")[:40] if store.check([f"phase/{r}"])
                          else "rendezvous") for r in ranks}
        except Exception as exc:
            return {r: ("", f"rank {r} ({hosts.get(r, '?')}): state unknown ({collectives.first_line(exc)})")
                    for r in ranks}
        return {r: (phases[r], f"rank {r} ({hosts.get(r, '?')}) " + (
            f"stopped responding during {phases[r]}: its process is gone or frozen" if after[r] == before[r]
            else f"is alive but still in {phases[r]}")) for r in ranks}
