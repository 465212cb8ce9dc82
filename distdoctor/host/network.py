"""Names and sockets: resolving, connecting, binding, the interfaces and routes."""

from __future__ import annotations

import errno as errno_mod
import socket
import time
from typing import Any, Mapping

from distdoctor import bounded
from distdoctor.host.results import ConnectResult, ResolveResult, classify_errno


class Network:
    env: Mapping[str, str]

    def hostname(self) -> str:
        return socket.gethostname()

    def resolve(self, name: str, timeout: float = 3.0) -> ResolveResult:
        """Every address a name resolves to. getaddrinfo has no timeout of its own, so it runs
        on a daemon thread that is abandoned if the resolver hangs."""
        start = time.monotonic()

        def work() -> tuple[tuple[str, ...], str]:
            try:
                infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
            except socket.gaierror as exc:
                return (), exc.strerror or str(exc)
            except (OSError, UnicodeError) as exc:
                return (), str(exc)
            seen: list[str] = []
            for info in infos:
                addr = str(info[4][0])
                if addr not in seen:
                    seen.append(addr)
            return tuple(seen), ""

        answer = bounded.call(work, timeout, name=f"resolve-{name}")
        duration = time.monotonic() - start
        if isinstance(answer, bounded.TimedOut):
            return ResolveResult(name, error=f"resolver did not answer within {timeout:g} s", duration=duration)
        return ResolveResult(name, answer[0], answer[1], duration)

    def connect(self, host: str, port: int, timeout: float = 3.0) -> ConnectResult:
        start = time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return ConnectResult(host, port, True, latency=time.monotonic() - start)
        except socket.timeout:
            return ConnectResult(host, port, False, "timeout", errno_mod.ETIMEDOUT, time.monotonic() - start)
        except socket.gaierror as exc:
            return ConnectResult(host, port, False, f"name not resolved: {exc.strerror}", None,
                                 time.monotonic() - start)
        except OSError as exc:
            return ConnectResult(host, port, False, classify_errno(exc.errno, exc.strerror or str(exc)),
                                 exc.errno, time.monotonic() - start)

    def converse(self, host: str, port: int, lines: list[str], timeout: float = 5.0,
                 max_bytes: int = 16 * 1024 * 1024) -> tuple[list[str], str]:
        """A line protocol over TCP (NCCL RAS): send each line, read one reply line after each
        but the last, then everything until the peer closes. The whole exchange is bounded by
        `timeout`, the last reply by max_bytes. (the replies, "" or why it stopped)."""
        deadline = time.monotonic() + timeout
        replies: list[str] = []
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                pending = bytearray()  # read past a reply line: the start of the next
                for i, line in enumerate(lines):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return replies, f"no answer within {timeout:g} s"
                    sock.settimeout(left)
                    sock.sendall(line.encode() + b"\n")
                    if i < len(lines) - 1:
                        # Each recv is given only what is left of the bound: a peer that trickles a
                        # byte at a time cannot stretch one reply line past it.
                        while b"\n" not in pending and len(pending) < 4096:
                            left = deadline - time.monotonic()
                            if left <= 0:
                                return replies, f"no answer within {timeout:g} s"
                            sock.settimeout(left)
                            chunk = sock.recv(4096)
                            if not chunk:
                                break
                            pending += chunk
                        cut = pending.find(b"\n") + 1 or min(len(pending), 4096)
                        replies.append(bytes(pending[:cut]).decode("utf-8", "replace"))
                        del pending[:cut]
                        if not replies[-1]:
                            return replies, "the peer closed the connection"
                chunks, size = [bytes(pending)], len(pending)
                while size <= max_bytes:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return replies + [b"".join(chunks).decode("utf-8", "replace")], f"no answer within {timeout:g} s"
                    sock.settimeout(left)
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                replies.append(b"".join(chunks)[:max_bytes].decode("utf-8", "replace"))
                return replies, "" if size <= max_bytes else f"answered more than {max_bytes} bytes"
        except socket.timeout:
            return replies, f"no answer within {timeout:g} s"
        except OSError as exc:
            return replies, classify_errno(exc.errno, exc.strerror or str(exc))

    def can_bind(self, address: str, port: int) -> str:
        """'' if a TCP listener could bind address:port now, else why not."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((address, port))
            return ""
        except OSError as exc:
            return classify_errno(exc.errno, exc.strerror or str(exc))

    def net_if_addrs(self) -> dict[str, list[dict[str, Any]]]:
        """psutil's per-interface addresses as plain dicts: family ('inet', 'inet6', 'link'),
        address, netmask."""
        import psutil

        out: dict[str, list[dict[str, Any]]] = {}
        for name, addrs in psutil.net_if_addrs().items():
            rows = []
            for a in addrs:
                fam = {socket.AF_INET: "inet", socket.AF_INET6: "inet6"}.get(a.family, "link")
                rows.append({"family": fam, "address": a.address, "netmask": a.netmask})
            out[name] = rows
        return out

    def net_if_stats(self) -> dict[str, dict[str, Any]]:
        import psutil

        return {
            name: {"isup": s.isup, "speed": s.speed, "mtu": s.mtu, "duplex": int(s.duplex),
                   "flags": getattr(s, "flags", "")}
            for name, s in psutil.net_if_stats().items()
        }

    def gateways(self) -> dict[str, list[tuple[str, str]]]:
        """Default gateways by family ('inet', 'inet6'): [(gateway, interface)]."""
        try:
            import netifaces
        except ImportError:
            return {}
        result: dict[str, list[tuple[str, str]]] = {}
        gws = netifaces.gateways()
        for fam, name in ((netifaces.AF_INET, "inet"), (netifaces.AF_INET6, "inet6")):
            # Entries are (gateway, interface, is_default); routes to other subnets are not defaults.
            for entry in gws.get(fam, []):
                if len(entry) < 3 or entry[2]:
                    result.setdefault(name, []).append((entry[0], entry[1]))
        return result

