"""What every rank runs after the rendezvous: its address, its mesh listener, its fingerprint,
then rank 0's sequence (lead.py) or the others' (follow.py). Kept apart from session.py, which
lead and follow read their shared state from, so that no module imports its own importer."""

from __future__ import annotations

from typing import Any

from distdoctor.nccltest import fingerprint, follow, interface, lead, mesh
from distdoctor.nccltest.session import Rank
from distdoctor.parsers.etc_hosts import loopback_lines


def execute(rank: Rank) -> int:
    """The launch phase every rank shares (its address, its mesh listener, its fingerprint),
    then rank 0's sequence or the others'."""
    rank.set_phase("launch")
    if_addrs = rank.host.net_if_addrs()
    choice = interface.choose(rank.endpoint.addr, if_addrs, interface.route_source(rank.endpoint.addr))
    try:
        listener = mesh.Listener(choice.address or "0.0.0.0", rank.rank)
    except OSError as exc:
        listener = None
        rank.log(f"mesh listener could not bind {choice.address}: {exc}")
    fp = fingerprint.collect(rank.host, rank.ident, choice, rank.torch)
    fp["mesh_port"] = listener.port if listener else 0
    fp["route"] = choice.how
    fp["hostname_addrs"] = list(rank.host.resolve(fp["host"], timeout=2).addresses)
    # Every address of this host: one a peer sees it arrive from is not NAT when it is its own.
    fp["addresses"] = sorted(interface.local_addresses(if_addrs) - {"127.0.0.1", "::1"})[:32]
    try:  # the MTU of the interface toward rank 0: what a path MTU finding tells to change
        fp["mtu"] = int((rank.host.net_if_stats().get(str(fp.get("interface") or "")) or {}).get("mtu") or 0)
    except (OSError, ValueError, TypeError):
        fp["mtu"] = 0
    if fp["hostname_addrs"] and all(a.startswith("127.") or a == "::1" for a in fp["hostname_addrs"]):
        fp["hosts_lines"] = _loopback_hosts_lines(rank.host, fp["host"])
    if rank.rank == 0:
        return lead.run(rank, fp, listener, if_addrs)
    return follow.run(rank, fp, listener)


def _loopback_hosts_lines(host, name: str) -> list[dict[str, Any]]:
    """The /etc/hosts lines that map this host's name to loopback, for the fix on this node."""
    try:
        text = host.read_text("/etc/hosts", max_bytes=1 << 20) or ""
    except OSError:
        return []
    return [{"line": line.number, "text": line.text[:200], "address": line.address, "names": list(line.names[:8])}
            for line in loopback_lines(text, name)[:4]]
