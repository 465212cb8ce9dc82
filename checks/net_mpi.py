"""Open MPI's TCP interface selection (OMPI_MCA_btl_tcp_if_include / _exclude and the oob_tcp
variants) against the interfaces this node has. Interfaces are judged as in checks/net.py, whose
Network suggests the one to name."""

from __future__ import annotations

import shlex

from distdoctor.api import Context, check, fail, ok, warn
from distdoctor.checks.net import Network
from distdoctor.facts.net import InterfaceTable

_q = shlex.quote  # a value from the machine, as one shell word in a fix


def _mpi_item(item: str, table: InterfaceTable) -> tuple[list[str], str]:
    """Interfaces an Open MPI if_include/if_exclude item selects, and a problem if any."""
    import ipaddress

    if "/" in item:
        try:
            net = ipaddress.ip_network(item, strict=False)
        except ValueError:
            return [], f"{item!r} is neither an interface name nor a valid CIDR"
        hits = [i.name for i in table.interfaces if any(a.ip is not None and a.ip in net for a in i.addresses)]
        return hits, "" if hits else f"no interface has an address in {item}"
    iface = table.get(item)
    if iface is None:
        return [], f"no interface named {item!r} (names are exact)"
    return [item], ""


@check("net.mpi-tcp-interface", title="Open MPI's TCP interface selection matches real interfaces",
       tags=("net", "mpi"), timeout=5)
def mpi_tcp_interface(ctx: Context):
    """OMPI_MCA_btl_tcp_if_include / _exclude (and the oob_tcp variants) take interface names or
    CIDRs. Names that do not exist make mpirun fail or, for exclude, silently select a bridge or
    loopback; setting both is an error in Open MPI."""
    table: InterfaceTable = ctx.facts.interfaces
    env = ctx.env
    best = Network.of(ctx).suggest()
    found = False
    for layer in ("btl_tcp", "oob_tcp"):
        inc = env.get(f"OMPI_MCA_{layer}_if_include")
        exc = env.get(f"OMPI_MCA_{layer}_if_exclude")
        if inc is None and exc is None:
            continue
        found = True
        fix = f"export OMPI_MCA_{layer}_if_include={_q(best.name)}" if best else ""
        if inc is not None and exc is not None:
            yield fail(f"both OMPI_MCA_{layer}_if_include and _if_exclude are set", subject=layer,
                       explanation="Open MPI refuses to start with both; keep one.",
                       fix=f"unset OMPI_MCA_{layer}_if_exclude")
            continue
        name = "include" if inc is not None else "exclude"
        value = inc if inc is not None else exc
        items = [x.strip() for x in value.split(",") if x.strip()]
        problems, selected = [], []
        for item in items:
            hits, problem = _mpi_item(item, table)
            selected += hits
            if problem:
                problems.append(problem)
        evidence = {"variable": f"OMPI_MCA_{layer}_if_{name}", "value": value, "matches": selected}
        if not items:
            yield fail(f"OMPI_MCA_{layer}_if_{name} is empty", subject=layer, evidence=evidence, fix=fix)
        elif name == "include" and not selected:
            yield fail(f"OMPI_MCA_{layer}_if_include={value} selects no interface: {'; '.join(problems)}",
                       subject=layer, evidence=evidence, fix=fix,
                       explanation="mpirun fails or hangs when no TCP interface is left.")
        elif problems:
            yield warn(f"OMPI_MCA_{layer}_if_{name}={value}: {'; '.join(problems)}", subject=layer,
                       evidence=evidence, fix=fix,
                       explanation="Names and CIDRs that match nothing are usually a copy from another node.")
        elif name == "exclude" and not any(x in ("lo", "127.0.0.1/8", "127.0.0.0/8") for x in items):
            yield warn(f"OMPI_MCA_{layer}_if_exclude={value} does not exclude loopback", subject=layer,
                       evidence=evidence, fix=f"export OMPI_MCA_{layer}_if_exclude={_q(value + ',lo')}",
                       explanation="Setting the exclude list replaces Open MPI's default (127.0.0.1/8,sppp), so "
                                   "loopback becomes a candidate.")
        else:
            yield ok(f"OMPI_MCA_{layer}_if_{name}={value} selects {', '.join(selected) or 'interfaces'}",
                     subject=layer, evidence=evidence)
    if not found:
        yield ok("Open MPI's TCP interfaces are not restricted (OMPI_MCA_btl_tcp_if_include unset)",
                 explanation="Open MPI then uses every interface except loopback, bridges included; set "
                             "btl_tcp_if_include if mpirun hangs between nodes.")


# ---------------------------------------------------------------------------------------------
# InfiniBand


CHECKS = [mpi_tcp_interface]
