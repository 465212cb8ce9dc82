"""An IMEX domain (`nvidia-imex-ctl -N`) judged: every node READY, every pair Connected, the
domain UP, one driver version. What each connectivity letter means is nvidia-imex-ctl's own
legend (I invalid, N never connected, R recovering, D disconnected, A authenticating, !V! version
mismatch, !M! node map mismatch, C connected)."""

from __future__ import annotations

from distdoctor.api import fail, ok
from distdoctor.model import Finding
from distdoctor.parsers.nvidia_imex import ImexDomain
from distdoctor.text import plural

LEGEND = {"I": "not reachable", "N": "never connected", "R": "recovering", "D": "disconnected",
          "A": "authenticating", "!V!": "driver version mismatch", "!M!": "node map mismatch"}
FIX = "systemctl restart nvidia-imex && nvidia-imex-ctl -N   # on the nodes named; check /etc/nvidia-imex/nodes_config.cfg"


def judge_imex(domain: ImexDomain) -> list[Finding]:
    out = []
    evidence = {"state": domain.state, "nodes": [[n.index, n.address, n.state, n.version] for n in domain.nodes][:128]}
    down = [n for n in domain.nodes if n.state != "READY"]
    if down:
        out.append(fail(f"IMEX: {plural(len(down), 'node')} not READY: "
                        + ", ".join(f"#{n.index} {n.address} {n.state}" for n in down[:8]),
                        subject=",".join(n.address for n in down[:8]), action="fix-config", evidence=evidence,
                        explanation="A node whose IMEX daemon is not READY cannot import or export GPU memory across "
                                    "the NVLink domain: multi-node NVLink jobs fail on it.", fix=FIX))
    broken = sorted(link for link in domain.links if link[2] != "C")
    if broken:
        words = sorted({LEGEND.get(c, c) for _a, _b, c in broken})
        out.append(fail(f"IMEX: {plural(len(broken), 'node pair')} not connected ({', '.join(words)}): "
                        + ", ".join(f"{a}->{b} {c}" for a, b, c in broken[:12]),
                        subject="imex", action="fix-config", evidence={**evidence, "pairs": broken[:256]},
                        explanation="IMEX daemons exchange memory handles over the network between every pair of "
                                    "nodes; a pair that is not Connected cannot share GPU memory.", fix=FIX))
    versions = sorted({n.version for n in domain.nodes if n.version})
    if len(versions) > 1:
        out.append(fail(f"IMEX: the nodes run different drivers ({', '.join(versions)})", subject="imex",
                        action="fix-config", evidence=evidence,
                        explanation="IMEX daemons of different driver versions refuse each other (!V!).",
                        fix="# install one NVIDIA driver version on every node of the NVLink domain"))
    if domain.state and domain.state != "UP" and not out:
        out.append(fail(f"IMEX: domain state {domain.state}", subject="imex", action="fix-config", evidence=evidence,
                        explanation="The IMEX domain is not fully up.", fix=FIX))
    if not out:
        out.append(ok(f"IMEX: domain {domain.state or 'state not shown'}, {plural(len(domain.nodes), 'node')} READY, "
                      "every pair connected", evidence=evidence))
    return out
