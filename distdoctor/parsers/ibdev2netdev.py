"""`ibdev2netdev` (Mellanox OFED): each RDMA device's port and the network interface on it, with
that interface's state. `(Up)`/`(Down)` is the netdev's (IPoIB or the RoCE interface), not the
InfiniBand port's: a pure-IB fabric without IPoIB shows `(Down)` on healthy ports. Padded by
`column -t` or not; `# comments` after a line are the paster's."""

from __future__ import annotations

import re
from dataclasses import dataclass

from distdoctor.parsers import line_matches

_LINE = re.compile(r"^(?P<hca>[\w.-]+)\s+port\s+(?P<port>\d{1,3})\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>[A-Za-z]+)\)"
                   r"(?:\s+#.*)?\s*$")


@dataclass(frozen=True)
class Mapping:
    hca: str
    port: int
    netdev: str
    state: str  # Up, Down


def is_ibdev2netdev_line(line: str) -> bool:
    return bool(_LINE.match(line))


def parse_ibdev2netdev(text: str) -> list[Mapping]:
    return [Mapping(m["hca"], int(m["port"]), m["netdev"], m["state"])
            for m in line_matches(text, _LINE, "ibdev2netdev", "an ibdev2netdev line")]
