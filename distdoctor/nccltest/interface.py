"""Which interface and address this rank talks to the others from.

The kernel's route to the rendezvous address (a UDP "connect" sends nothing, then getsockname
gives the source address), mapped to an interface name: the interface that really reaches
rank 0, which the mesh and gloo use. What NCCL itself would pick is predicted separately
(fingerprint.nccl_prediction, the net area's model) and compared with this route.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Choice:
    name: str  # "" when no interface holds the address
    address: str
    how: str


def route_source(addr: str, timeout: float = 2.0) -> tuple[str, str]:
    """(source address the kernel would use to reach addr, error)."""
    try:
        infos = socket.getaddrinfo(addr, 9, type=socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        return "", f"cannot resolve {addr}: {getattr(exc, 'strerror', None) or exc}"
    last = ""
    for family, _type, _proto, _name, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.settimeout(timeout)
                sock.connect(sockaddr)
                return sock.getsockname()[0], ""
        except OSError as exc:
            last = exc.strerror or str(exc)
    return "", f"no route to {addr}: {last}"


def interface_for_address(address: str, if_addrs: Mapping[str, Sequence[dict]]) -> str:
    """The interface holding address ('' when none); for 127.x that is the loopback."""
    for name, rows in if_addrs.items():
        for row in rows:
            if row.get("address", "").split("%")[0] == address:
                return name
    try:
        if ipaddress.ip_address(address).is_loopback:
            return next((n for n, rows in if_addrs.items()
                         if any(r.get("address") in ("127.0.0.1", "::1") for r in rows)), "lo")
    except ValueError:
        pass
    return ""


def local_addresses(if_addrs: Mapping[str, Sequence[dict]]) -> set[str]:
    return {row.get("address", "").split("%")[0] for rows in if_addrs.values() for row in rows
            if row.get("family") in ("inet", "inet6")}


def choose(master_addr: str, if_addrs: Mapping[str, Sequence[dict]], source: tuple[str, str]) -> Choice:
    address, error = source
    if not address:
        return Choice("", "", error)
    name = interface_for_address(address, if_addrs)
    return Choice(name, address, f"the kernel's route to {master_addr}")
