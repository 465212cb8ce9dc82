"""`ibstat` and `ibv_devinfo` (-v or not): each HCA port's state, physical state, rate and link
layer. Tolerates what pastes do to them: tabs turned to spaces, leading indentation, elided
blocks, `ibstat`'s bare-number rates ("Rate: 56") and ibv_devinfo's "PORT_ACTIVE (4)" forms."""

from __future__ import annotations

import re
from dataclasses import dataclass

from distdoctor.parsers import ParseError


@dataclass(frozen=True)
class IbPortState:
    hca: str
    port: int
    state: str = ""       # ACTIVE, DOWN, INIT, ARMED (sysfs's words)
    phys_state: str = ""  # LinkUp, Polling, Disabled ...
    rate: str = ""        # as printed: "56", "400", "100 Gb/sec (4X EDR)"
    link_layer: str = ""  # InfiniBand or Ethernet


_CA = re.compile(r"^\s*CA '(?P<ca>[^']+)'")
_HCA_ID = re.compile(r"^\s*hca_id:\s*(?P<ca>\S+)")
_PORT_IBSTAT = re.compile(r"^\s*Port (?P<n>\d+):\s*$")
_PORT_DEVINFO = re.compile(r"^\s*port:\s*(?P<n>\d+)\s*$")
# Words of the key separated by spaces, and a value that ends on a non-blank: each blank can
# belong to one part only (the lazy key and value each shared blanks with \s*: cubic in a run).
_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z_]+(?: +[A-Za-z_]+)*)\s*:\s*(?P<value>(?:.*\S)?)\s*$")
_PHYS_WORDS = {"5": "LinkUp", "3": "Disabled", "2": "Polling", "1": "Sleep", "4": "PortConfigurationTraining",
               "6": "LinkErrorRecovery", "7": "PhyTest"}


def _state(value: str) -> str:
    # "Active" (ibstat), "PORT_ACTIVE (4)" (ibv_devinfo) -> ACTIVE
    word = value.split("(")[0].strip().upper()
    return word.removeprefix("PORT_")


def _phys(value: str) -> str:
    word = value.split("(")[0].strip()
    m = re.search(r"\((\d+)\)", value)
    if word.upper() == "LINK_UP" or word == "LinkUp":
        return "LinkUp"
    if word.isdigit():
        return _PHYS_WORDS.get(word, word)
    if m and not word:
        return _PHYS_WORDS.get(m.group(1), "")
    return word.replace("_", " ").title().replace(" ", "") if "_" in word else word


def looks_like(text: str) -> bool:
    return bool(re.search(r"(?m)^\s*(CA '[^']+'|hca_id:\s*\S+)", text))


def parse_ibstat(text: str) -> list[IbPortState]:
    """Both tools' outputs, in any mix. Raises ParseError when no HCA header is found."""
    ports: list[IbPortState] = []
    ca = ""
    port: dict | None = None

    def close() -> None:
        nonlocal port
        if port is not None:
            ports.append(IbPortState(ca, port["n"], port.get("state", ""), port.get("phys", ""),
                                     port.get("rate", ""), port.get("ll", "")))
            port = None

    seen_ca = False
    for line in text.splitlines():
        if (m := _CA.match(line) or _HCA_ID.match(line)):
            close()
            ca = m.group("ca")
            seen_ca = True
            continue
        if not ca:
            continue
        if (m := _PORT_IBSTAT.match(line) or _PORT_DEVINFO.match(line)):
            close()
            port = {"n": int(m.group("n"))}
            continue
        f = _FIELD.match(line)
        if not f:
            continue
        key, value = f.group("key").strip().lower(), f.group("value")
        if key == "state" and value.upper().startswith("PORT_") and (port is None or "state" in port):
            # ibv_devinfo grep'd for its port lines keeps `state:` and drops `port:`: the HCA's
            # ports in their order (the tool prints them from 1)
            n = port["n"] + 1 if port is not None else 1 + sum(1 for p in ports if p.hca == ca)
            close()
            port = {"n": n}
        if port is None:
            continue
        if key == "state":
            port["state"] = _state(value)
        elif key in ("physical state", "phys_state"):
            port["phys"] = _phys(value)
        elif key == "rate" or key == "active_speed":
            port.setdefault("rate", value)
        elif key in ("link layer", "link_layer"):
            port["ll"] = value.split("(")[0].strip()
    close()
    if not seen_ca:
        raise ParseError("ibstat", "no `CA '...'` or `hca_id:` header", 1, text.splitlines()[0] if text else "")
    return ports
