"""One report per job: `distdoctor check` under srun, mpirun or torchrun with several tasks.

Roles, from the launcher's environment (distdoctor.launch):

    alone     no launcher, one task, or --each-task: the report as before
    quiet     local rank > 0: the node's checks run once, in its local rank 0; exit at once
    leader    local rank 0 of a node other than rank 0's: run the checks, hand the node's report
              to rank 0, print nothing
    gatherer  rank 0: run the checks, gather the other nodes' reports (bounded), print one
              report for the whole job
    solo      local rank 0 when every task is on one node: the node's report, printed once

Wire: rank 0 listens on the address of the job's rendezvous host and on a port derived from the
job's seed, both as every node derives them (distdoctor.launch.job); the address is checked
to be one of this host's own, never 0.0.0.0. A message is a 4-byte big-endian length, then a
32-byte HMAC-SHA256 of the body, then the body (UTF-8 JSON). The key is HMAC(secret, the job's
seed): the secret is $DISTDOCTOR_JOB_SECRET when the launcher passes it, else a random
per-user file ~/.config/distdoctor/job-secret (mode 0600, made on first use), which every node
of the job reads on a shared home. What this does not protect against: anyone who can read
that file (root, or the user's other jobs) can forge a report; a home that is not shared gives
each node another key, and rank 0 then names those nodes ("report failed authentication").
Like nccl-test's mesh, the socket code lives here, not in host.py: it is the protocol itself.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from distdoctor import launch
from distdoctor.model import RunContext
from distdoctor.remote import Fix

MAX_FRAME = 16 * 1024 * 1024  # a node report is tens of KiB; this bounds what a stranger makes rank 0 hold
MAX_CONNECTIONS = 64  # served at once: a stranger opening thousands gets them closed, not a thread each
MAX_REJECTED = 100  # strangers named in the report; the rest are counted
PEER_SECONDS = 10.0  # for one whole message: a report is tens of KiB; a silent stranger frees its slot
PORT_BASE = 30000  # nccl-test derives from 20000-29999; a check and an nccl-test of one step never collide
PORT_SPAN = 2000
SECRET_FILE = os.path.join("~", ".config", "distdoctor", "job-secret")


class Unauthentic(ValueError):
    """A message whose HMAC does not match; `claimed` is the node it says it is from (only a
    label for the finding: nothing in it is trusted)."""

    def __init__(self, message: str, claimed: str = ""):
        super().__init__(message)
        self.claimed = claimed


class Refused(Exception):
    """Rank 0 could not authenticate this node's report. Rank 0 says so unsigned (it shares no
    key with the sender): it only stops the sender's retries, which a stranger able to break
    the connection could do anyway."""


REFUSAL = struct.pack(">I", 0) + bytes(32)


class GatherError(Exception):
    """The job cannot be gathered into one report (no rendezvous, no key): each node prints its own."""


@dataclass(frozen=True)
class Plan:
    role: str                 # alone, quiet, leader, gatherer, solo
    nodes: int = 1            # nodes in the job, as the launcher tells
    expected: tuple[str, ...] = ()  # node names when the launcher lists them (Slurm)
    address: str = ""         # rank 0's rendezvous host
    port: int = 0
    seed: str = ""            # launch.job's seed: what the port and the key are bound to
    node: str = ""            # this node's name


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = (env.get(name) or "").strip()
        if value.isdigit():
            return int(value)
    return None


def node_name(env: Mapping[str, str], hostname: str) -> str:
    return (env.get("SLURMD_NODENAME") or hostname).strip() or hostname


def plan(ctx: RunContext, env: Mapping[str, str], hostname: str, each_task: bool = False) -> Plan:
    """Pure: what this task does, from its launcher context and environment."""
    me = node_name(env, hostname)
    if each_task or ctx.kind not in ("slurm-step", "mpirun", "torchrun") or not ctx.world_size or ctx.world_size < 2:
        return Plan("alone", node=me)
    job = launch.job(env, ctx)
    hosts = job.nodes
    nodes = _int(env, "SLURM_STEP_NUM_NODES") if ctx.kind == "slurm-step" else None
    if nodes is None and ctx.local_world_size:
        nodes = max(1, ctx.world_size // ctx.local_world_size)
    if nodes is None:
        nodes = len(hosts) or 1
    # The nodes to name when they do not answer: Slurm's list, when it is this job's nodes
    # (mpirun -np 2 in a 4-node allocation uses only some of them).
    expected = hosts if len(hosts) == nodes else ()
    local = ctx.local_rank if ctx.local_rank is not None else ctx.rank
    if local:
        return Plan("quiet", nodes, expected, node=me)
    if nodes == 1:
        return Plan("solo", nodes, expected, node=me)
    raw = (env.get("DISTDOCTOR_GATHER_PORT") or "").strip()
    port = int(raw) if raw.isdigit() and 0 < int(raw) < 65536 else launch.derived_port(job.seed, PORT_BASE, PORT_SPAN)
    role = "gatherer" if ctx.rank == 0 else "leader"
    return Plan(role, nodes, expected, job.rank0_host, port, job.seed, me)


def plan_problem(p: Plan) -> str:
    """Why a multi-node plan cannot gather, '' when it can."""
    if p.role not in ("gatherer", "leader"):
        return ""
    if not p.address:
        return "rank 0's host is unknown (set MASTER_ADDR)"
    if not p.seed:
        return "the launcher gives no job id to bind the reports to"
    return ""


def bind_address(host, name: str) -> str:
    """The address rank 0 listens on: its rendezvous name as resolved here, and only if that is
    one of this host's own, non-loopback addresses (peers on other nodes must reach it)."""
    resolved = host.resolve(name, timeout=5.0)
    if not resolved.addresses:
        raise GatherError(f"rank 0's host {name} does not resolve: {resolved.error or 'no address'}")
    mine = {a.get("address", "").split("%")[0] for addrs in host.net_if_addrs().values() for a in addrs}
    for addr in resolved.addresses:
        if addr in mine and not addr.startswith("127.") and addr != "::1":
            return addr
    own = {host.hostname(), host.hostname().split(".", 1)[0], (host.env.get("SLURMD_NODENAME") or "").strip()} - {""}
    if name in own and all(a.startswith("127.") or a == "::1" for a in resolved.addresses):
        # This node's own name on loopback here (Debian's 127.0.1.1 line): the other nodes resolve
        # it for themselves, to this node's address. Listen on every address: reports are
        # authenticated; the loopback line is net.gloo-socket-interface's finding, with its fix.
        return "::" if all(a == "::1" for a in resolved.addresses) else "0.0.0.0"
    raise GatherError(f"rank 0's host {name} resolves to {', '.join(resolved.addresses)}, not to an "
                      f"address of this host that other nodes can reach")


# --- keys ---------------------------------------------------------------------------------------

def job_key(secret: bytes, seed: str) -> bytes:
    return hmac.new(secret, f"distdoctor check gather {seed}".encode(), hashlib.sha256).digest()


def read_secret(env: Mapping[str, str], wait: float = 5.0) -> bytes:
    """$DISTDOCTOR_JOB_SECRET, else the per-user secret file, made (atomically) if missing."""
    given = (env.get("DISTDOCTOR_JOB_SECRET") or "").strip()
    if given:
        return given.encode()
    path = os.path.expanduser(SECRET_FILE)
    end = time.monotonic() + wait
    while True:
        try:
            with open(path, "rb") as fh:
                data = fh.read(4096).strip()
            if len(data) >= 32:
                return data
        except FileNotFoundError:
            _make_secret(path)
            continue
        except OSError as exc:
            raise GatherError(f"cannot read {path}: {exc.strerror or exc}") from None
        if time.monotonic() > end:  # another node is writing it on a shared home: it appears whole
            raise GatherError(f"{path} is shorter than a secret: remove it and run again")
        time.sleep(0.05)


def _make_secret(path: str) -> None:
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(32).hex().encode() + b"\n")
        try:
            os.link(tmp, path)  # first writer wins, on every node of a shared home
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    except OSError as exc:
        raise GatherError(f"cannot make the job secret {path}: {exc.strerror or exc}") from None


# --- frames -------------------------------------------------------------------------------------

def frame(key: bytes, body: dict[str, Any]) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    return struct.pack(">I", len(data)) + hmac.new(key, data, hashlib.sha256).digest() + data


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("peer too slow")
        sock.settimeout(left)
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed mid-message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket, key: bytes, deadline: float) -> dict[str, Any]:
    """One authenticated message; ValueError when it is not one."""
    (length,) = struct.unpack(">I", _recv_exact(sock, 4, deadline))
    if length > MAX_FRAME:
        raise ValueError(f"message of {length} bytes is over the limit")
    mac = _recv_exact(sock, 32, deadline)
    if length == 0 and mac == bytes(32):
        raise Refused("rank 0 could not authenticate this node's report: its job secret differs")
    data = _recv_exact(sock, length, deadline)
    if not hmac.compare_digest(mac, hmac.new(key, data, hashlib.sha256).digest()):
        claimed = ""
        try:
            said = json.loads(data)
            claimed = str(said.get("node", ""))[:64] if isinstance(said, dict) else ""
        except ValueError:
            pass
        raise Unauthentic("report failed authentication (another job, or a node without this job's secret)",
                          claimed)
    body = json.loads(data)
    if not isinstance(body, dict):
        raise ValueError("message is not a JSON object")
    return body


# --- rank 0 -------------------------------------------------------------------------------------

class Gatherer:
    """Rank 0's listener: accepts the node leaders' reports while rank 0 runs its own checks."""

    def __init__(self, p: Plan, key: bytes, bind_address: str):
        self.plan = p
        self.key = key
        self.reports: dict[str, dict[str, Any]] = {}
        self.rejected: dict[str, str] = {}  # node (as it claims, else its address) -> why
        self.unnamed = 0  # rejected past MAX_REJECTED, or connections refused past MAX_CONNECTIONS
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        family = socket.AF_INET6 if ":" in bind_address else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((bind_address, p.port))
            self.sock.listen(128)
        except OSError as exc:
            self.sock.close()
            raise GatherError(f"cannot listen on {bind_address}:{p.port}: {exc.strerror or exc}") from None
        self.sock.settimeout(0.5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="gather-accept")
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                conn.close()
                with self._changed:
                    self.unnamed += 1
                continue
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True, name="gather-conn").start()

    def _serve(self, conn: socket.socket, peer) -> None:
        try:
            self._serve_one(conn, peer)
        finally:
            self._slots.release()

    def _serve_one(self, conn: socket.socket, peer) -> None:
        with conn:
            try:
                body = read_frame(conn, self.key, time.monotonic() + PEER_SECONDS)
                if body.get("seed") != self.plan.seed or not isinstance(body.get("report"), dict):
                    raise ValueError("message is not a report of this job step")
                node = str(body.get("node") or peer[0])
                with self._changed:
                    self.reports[node] = body["report"]
                    self._changed.notify_all()
                conn.settimeout(5)
                conn.sendall(frame(self.key, {"ok": True, "node": node}))
            except (OSError, ValueError, TimeoutError) as exc:
                claimed = getattr(exc, "claimed", "")
                if isinstance(exc, Unauthentic):
                    try:
                        conn.settimeout(2)
                        conn.sendall(REFUSAL)
                    except OSError:
                        pass
                with self._changed:
                    if len(self.rejected) < MAX_REJECTED:
                        self.rejected[claimed or peer[0]] = f"{exc} (from {peer[0]})"
                    else:
                        self.unnamed += 1
                    self._changed.notify_all()

    def wait(self, others: int, deadline: float) -> dict[str, dict[str, Any]]:
        """The reports received by the deadline, or sooner when `others` nodes answered."""
        with self._changed:
            # Only authenticated reports count: a stranger's garbage frame (or a forged claim to
            # be a node) once counted as that node's answer and made rank 0 stop waiting early
            # and report a healthy node as "no report". A node refused for its secret is waited
            # for until the deadline and then named with why.
            while len(self.reports) < others:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.5))
            return dict(self.reports)

    def close(self) -> None:
        self._stop.set()
        try:
            self.sock.close()
        except OSError:
            pass


def send_report(p: Plan, key: bytes, report: dict[str, Any], deadline: float) -> str:
    """A node leader hands its report to rank 0, retrying until rank 0 listens; '' once rank 0
    confirmed, else why not."""
    message = frame(key, {"seed": p.seed, "node": p.node, "report": report})
    last = "rank 0 never listened"
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((p.address, p.port), timeout=min(5.0, max(0.1, deadline - time.monotonic()))) as sock:
                sock.sendall(message)
                reply = read_frame(sock, key, min(deadline, time.monotonic() + 10))
                return "" if reply.get("ok") else "rank 0 refused the report"
        except Refused as exc:
            return str(exc)
        except (OSError, ValueError, TimeoutError) as exc:
            last = str(exc) or type(exc).__name__
            time.sleep(0.2)
    return f"could not hand the report to rank 0 at {p.address}:{p.port}: {last}"


def _stale_name(name: str, resolved: Sequence[str], slurm_address: str) -> bool:
    import ipaddress

    try:
        wanted = ipaddress.ip_address(slurm_address)
        got = {ipaddress.ip_address(a.split("%")[0]) for a in resolved}
    except ValueError:
        return False  # NodeAddr a name (or none): nothing to compare addresses with
    return bool(got) and wanted not in got and not any(a.is_loopback for a in got)


def _stale_fix(p: Plan, resolved: Sequence[str], slurm_address: str, hosts_text: str) -> tuple[Fix, ...]:
    from distdoctor import loopback_name, remote
    from distdoctor.parsers.etc_hosts import parse_etc_hosts

    short = p.address.split(".", 1)[0].lower()
    lines = [line for line in parse_etc_hosts(hosts_text) if line.address in resolved
             and any(n.lower() in (p.address.lower(), short) for n in line.names)]
    look = Fix((f"getent hosts {p.address}",), (), f"on {p.node}: it should say {slurm_address}") \
        if remote.plain(p.address) else Fix()
    if lines and remote.plain(p.node):
        return (look, loopback_name.hosts_fix(p.node, lines[0], p.address, slurm_address))
    return (look, Fix(comment=f"map {remote.shown([p.address])} to {slurm_address} in DNS or /etc/hosts on "
                              f"{remote.shown([p.node])}"))


def network_toward(target: str, if_addrs: Mapping[str, Any]) -> str:
    """The network (10.0.0.0/24) of this host's interface on target's subnet, '' when none is:
    what a firewall on the target must let in for this host to reach it."""
    import ipaddress

    try:
        wanted = ipaddress.ip_address(target.split("%")[0])
    except ValueError:
        return ""
    for rows in if_addrs.values():
        for row in rows:
            try:
                net = ipaddress.ip_interface(f"{str(row.get('address', '')).split('%')[0]}/{row.get('netmask')}").network
            except ValueError:
                continue
            if wanted in net and net.prefixlen < net.max_prefixlen:
                return str(net)
    return ""


def undelivered(p: Plan, why: str, network: str, resolved: Sequence[str] = (), slurm_address: str = "",
                hosts_text: str = "") -> tuple[str, str, tuple[Fix, ...]]:
    """(summary, explanation, fix) for a node whose report could not reach rank 0: the report is
    printed here instead, and says which node's firewall to open when the connection timed out
    (rank 0 drops inbound traffic) or what refused means. When rank 0's name resolves here to
    none of the address Slurm reaches that node at (slurm_address, its NodeAddr), the name is
    the cause, not a firewall: this node's /etc/hosts line (hosts_text) for it is rewritten."""
    from distdoctor import fixes, remote

    summary = f"this node's report could not reach rank 0 ({p.address}, port {p.port}): {why}"
    stale = _stale_name(p.address, resolved, slurm_address)
    if stale:
        return (f"{summary}: {p.address} resolves here to {', '.join(resolved)}, but Slurm reaches it at "
                f"{slurm_address}",
                "This node's /etc/hosts (or DNS) maps rank 0's node to an address that node does not have (a stale "
                "entry, an old address): the rendezvous and NCCL look it up the same way and fail alike.",
                _stale_fix(p, resolved, slurm_address, hosts_text))
    lowered = why.lower()
    if "timed out" in lowered or "timeout" in lowered:
        explanation = (f"Connections to {p.address} time out: its firewall drops inbound traffic (or the network "
                       "between drops it). The job's rendezvous and NCCL need every node to reach rank 0's node.")
        note = Fix(comment=f"on rank 0's node {p.address}: let the cluster network in, ahead of the drop rule")
        if network and remote.plain(network):
            return summary, explanation, (note, fixes.firewall_allow_from(p.address, [network]))
        return summary, explanation, (note, Fix(("nft list ruleset",), [p.address]))
    if "refused" in lowered:
        return (summary, f"{p.address} answers but nothing listens on port {p.port}: rank 0 ended before it gathered "
                "the reports, or a REJECT rule there refuses the port.",
                (Fix((f"ss -ltn 'sport = :{p.port}'",), [p.address]),))
    return summary, "Rank 0 did not confirm the report.", (Fix(("python3 -m distdoctor check -v",), [p.address]),)
