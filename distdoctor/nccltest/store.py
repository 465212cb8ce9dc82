"""The rendezvous store: where it listens, and how what ranks publish is sealed and read.

torch's TCPStore server binds every interface unless it is handed a listening socket
(`master_listen_fd`): rank 0 binds one itself, on the address MASTER_ADDR names, so the store
is not offered on interfaces the job does not use.

Anyone who reaches the port can still write to the store (TCPStore has no authentication), so
every value a rank publishes is sealed with an HMAC of the job's token and the key it is
written under; a value that does not open is a finding about whoever wrote it, never a
KeyError. The token is DISTDOCTOR_JOB_TOKEN when the launcher exports one (`--local` makes a
random one for its ranks); otherwise it is derived from the job's seed (distdoctor.launch.job:
Open MPI job id, Slurm job and step, torchrun run id) and the rendezvous address and port,
which tells this job's data from another job's on the same port and from garbage, but not from
a user who can read the job's environment: export a random DISTDOCTOR_JOB_TOKEN for that.

Arrival is one shared roll (TCPStore.append) that every rank adds one sealed line to, and a
counter: rank 0 reads the roll once, whatever the world size, and sees in it every process
that claimed a rank, including two that claim the same one, a rank from a job of another
size, and a stranger's line.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from distdoctor import launch

TOKEN_ENV = "DISTDOCTOR_JOB_TOKEN"
ROLL = "roll"
ARRIVED = "arrived"
# A line on the roll bigger than this is not a fingerprint: it is cut, and named as garbage.
MAX_LINE = 256 << 10
# Lines rank 0 reads from the roll besides one per rank: past this, a stranger's flood of short
# lines is counted, not parsed, so reading the roll stays bounded whatever was appended to it.
MAX_EXTRA_LINES = 1000
WAIT_SLICE_S = 1.0


class Unsealed(ValueError):
    """A value that is not this job's: malformed, or sealed with another token or key."""


def job_token(env: Mapping[str, str], addr: str, port: int) -> tuple[str, str]:
    """(token, where it came from)."""
    given = (env.get(TOKEN_ENV) or "").strip()
    if given:
        return given, f"{TOKEN_ENV} from the environment"
    # launch.job's seed, not Slurm's variables as this rank sees them: under mpirun inside an
    # allocation the ranks on mpirun's node and the others are in different Slurm steps
    seed = "\0".join(["distdoctor-nccl-test", launch.job(env).seed, addr, str(port)])
    return hashlib.sha256(seed.encode()).hexdigest(), "derived from the job's identity and rendezvous address"


def _mac(token: str, key: str, body: str) -> str:
    return hmac.new(token.encode(), f"{key}\0{body}".encode(), hashlib.sha256).hexdigest()


def seal(token: str, key: str, value: Any) -> str:
    body = json.dumps(value, separators=(",", ":"), sort_keys=True)
    return json.dumps({"v": body, "mac": _mac(token, key, body)}, separators=(",", ":"))


def unseal(token: str, key: str, raw: bytes | str) -> Any:
    """The value sealed under key, or Unsealed saying what is wrong with it."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        outer = json.loads(text)
        body, mac = outer["v"], outer["mac"]
        if not isinstance(body, str) or not isinstance(mac, str):
            raise TypeError("not a sealed value")
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        raise Unsealed(f"not a distdoctor value ({type(exc).__name__})") from None
    if not hmac.compare_digest(mac, _mac(token, key, body)):
        raise Unsealed("sealed with another job's token (a second job on this port, or a stranger)")
    try:
        return json.loads(body)
    except ValueError:
        raise Unsealed("sealed but not JSON") from None


def roll_line(token: str, fp: Mapping[str, Any]) -> str:
    """One rank's line on the roll; newlines on both sides so that a stranger's bytes without
    one spoil only themselves."""
    return "\n" + seal(token, ROLL, dict(fp)) + "\n"


@dataclass
class Roll:
    """What the roll says: one fingerprint per rank of this world, and the rest named."""

    fps: dict[int, dict[str, Any]] = field(default_factory=dict)
    duplicates: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # rank -> every claimant
    other_world: list[dict[str, Any]] = field(default_factory=list)  # sealed, but another world size
    foreign: list[str] = field(default_factory=list)  # why each unreadable line was rejected
    foreign_hints: list[dict[str, Any]] = field(default_factory=list)  # what a foreign line claims, unverified


def read_roll(token: str, raw: bytes, world: int) -> Roll:
    """The roll's fingerprints. Only lines that look sealed (`{"v":`) are parsed, found with
    bytes.find, so a stranger's flood of other lines costs one pass in C and is named by its
    size; at most `world * 4 + MAX_EXTRA_LINES` sealed-looking lines are opened (each costs an
    HMAC), so reading the roll stays bounded whatever was appended to it."""
    roll = Roll()
    budget = 4 * world + MAX_EXTRA_LINES
    if raw.count(b"\n") <= 2 * budget + 2:
        # an ordinary roll: every line read and each stranger's line named on its own
        for line in raw.split(b"\n"):
            if line.strip():
                _read_line(token, line, world, roll)
        return roll
    pos = opened = sealed_bytes = 0
    read_to = len(raw)
    while True:
        start = raw.find(_SEALED, pos)
        if start < 0:
            break
        if opened >= budget:
            read_to = start
            roll.foreign.append(f"more than {budget} sealed-looking lines: the rest of the roll "
                                f"({len(raw) - start} bytes) was not read (a flood on the rendezvous port)")
            break
        end = raw.find(b"\n", start)
        end = len(raw) if end < 0 else end
        sealed_bytes += end - start
        opened += 1
        _read_line(token, raw[start:end], world, roll)
        pos = end + 1
    # what is neither a sealed-looking line nor a line break: a stranger's text
    other = read_to - sealed_bytes - raw.count(b"\n", 0, read_to)
    if other > 0:
        lines = raw.count(b"\n", 0, read_to) - opened
        roll.foreign.insert(0, f"{other} bytes in about {lines} lines that are not distdoctor values")
    return roll


_SEALED = b'{"v":'


def _read_line(token: str, line: bytes, world: int, roll: Roll) -> None:
    if len(line) > MAX_LINE:
        roll.foreign.append(f"a {len(line)}-byte line that is not a fingerprint")
        return
    try:
        fp = unseal(token, ROLL, line)
        if not isinstance(fp, dict) or not isinstance(fp.get("rank"), int) \
                or not isinstance(fp.get("world_size"), int) or not isinstance(fp.get("host"), str):
            raise Unsealed("a sealed value without rank, world_size and host")
    except Unsealed as exc:
        roll.foreign.append(str(exc))
        hint = _claims(line)
        if hint:
            roll.foreign_hints.append(hint)
        return
    rank = fp["rank"]
    if fp["world_size"] != world or not 0 <= rank < world:
        roll.other_world.append(fp)
    elif rank in roll.fps:
        roll.duplicates.setdefault(rank, [roll.fps[rank]]).append(fp)
    else:
        roll.fps[rank] = fp


def _claims(line: bytes) -> dict[str, Any]:
    """What an unverified line says about its writer (host, pid, rank), to help find it."""
    try:
        body = json.loads(json.loads(line)["v"])
    except (ValueError, TypeError, KeyError):
        return {}
    if not isinstance(body, dict):
        return {}
    return {k: body[k] for k in ("host", "pid", "rank", "world_size") if isinstance(body.get(k), (str, int))}


def listen(address: str, port: int, backlog: int = 4096) -> socket.socket:
    """A listening socket on address:port only, for TCPStore's master_listen_fd. Raises OSError
    (EADDRINUSE when another listener holds the port)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


class Channel:
    """One connection to the store with the job's token: what this rank publishes is sealed,
    what it reads is opened. `tampered` collects what rank 0 had to ignore."""

    def __init__(self, store: Any, token: str):
        self.store = store
        self.token = token
        self.tampered: list[str] = []
        self.foreign = ""  # why a value this rank waited for did not open, if one did not

    def put(self, key: str, value: Any) -> None:
        self.store.set(key, seal(self.token, key, value))

    def missing(self, keys: list[str], deadline: float) -> list[str]:
        """Wait for keys until the deadline; the keys still missing. The wait is cut into slices
        of a second: a signal (Ctrl-C) reaches Python only between C++ calls."""
        if not keys:
            return []
        while True:
            left = deadline - time.monotonic()
            try:
                self.store.wait(keys, datetime.timedelta(seconds=max(0.01, min(WAIT_SLICE_S, left))))
                return []
            except Exception:  # DistStoreError on timeout; the check below says which keys
                if left <= WAIT_SLICE_S:
                    return [k for k in keys if not self.store.check([k])]

    def take(self, key: str, deadline: float) -> Any:
        """The sealed value under key, None if it never came. A value that does not open (a
        stranger's, planted before the real one) is waited past until the deadline, then
        raised as Unsealed."""
        while True:
            if self.missing([key], deadline):
                return None
            try:
                return unseal(self.token, key, self.store.get(key))
            except Unsealed as exc:
                self.foreign = str(exc)
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def opened(self, key: str, rank: int) -> Any:
        """What a rank published under key, or None with a note naming the rank when the value
        is not this job's (overwritten by a stranger, or garbage)."""
        try:
            return unseal(self.token, key, self.store.get(key))
        except Unsealed as exc:
            self.tampered.append(f"{key} (rank {rank}): {exc}")
            return None

    def take_tampered(self) -> list[str]:
        seen, self.tampered = self.tampered, []
        return seen
