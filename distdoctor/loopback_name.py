"""A node whose own name resolves to loopback (Debian's `127.0.1.1 node1` line in /etc/hosts):
Gloo binds there and NCCL's bootstrap may too, and the peers are told to connect to their own
127.x. The remedy is per node: the line that maps the name, rewritten to the node's cluster
address; GLOO_SOCKET_IFNAME works meanwhile. Pure: the caller gives the file's lines and the
address."""

from __future__ import annotations

import re

from distdoctor import remote
from distdoctor.remote import Fix
from distdoctor.parsers.etc_hosts import HostsLine

def _bre(text: str) -> str:
    """text as a literal in a sed basic regular expression (re.escape's `\\-` is not one)."""
    return re.sub(r"([.\[\]*^$\\/])", r"\\\1", text)


_LOCAL_NAMES = re.compile(r"^(localhost|ip6-localhost|ip6-loopback)(\.localdomain)?$", re.I)


def hosts_fix(node: str, line: HostsLine, name: str, address: str) -> Fix:
    """Shell for `node` that maps `name` to `address` instead of line's loopback address. The
    file is rewritten in place (`> /etc/hosts`), not replaced (`sed -i` renames a new file over
    it, which fails where /etc/hosts is a bind mount: containers, and Slurm's per-node mounts).
    The edit is tied to the line's number and its address, so a file changed since does not get
    a wrong line edited."""
    where = f"as root on {remote.shown([node])}: /etc/hosts line {line.number} maps {name} to {line.address}"
    if not remote.plain(address) or not remote.plain(name) or not remote.host_name(node):
        return Fix((), (), f"{where}; map {name} to its cluster address ({address}) there instead")
    old = _bre(line.address)
    others = [n for n in line.names if n.lower() not in (name.lower(), name.split(".", 1)[0].lower())]
    if not any(_LOCAL_NAMES.match(n) for n in others):
        # The line is the node's own (`127.0.1.1 node1 node1.cluster`): give it the real address.
        edit = f"{line.number}s/^\\([[:space:]]*\\){old}\\([[:space:]]\\)/\\1{address}\\2/"
        script = f"hosts=$(sed '{edit}' /etc/hosts) && printf '%s\\n' \"$hosts\" > /etc/hosts"
    else:
        # `127.0.0.1 localhost node1`: take the name off that line and add a line of its own.
        drop = f"{line.number}s/[[:space:]]{_bre(name)}\\([[:space:]]\\|$\\)/\\1/"
        script = (f"hosts=$(sed '{drop}' /etc/hosts) && printf '%s\\n%s\\n' \"$hosts\" '{address} {name}' "
                  "> /etc/hosts")
    return Fix((script,), (), where)
