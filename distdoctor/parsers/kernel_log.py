"""The kernel log, as /dev/kmsg, `journalctl -k`, `dmesg` (raw, -T, --time-format iso, --decode) or
a paste without timestamps: the hardware events distdoctor judges a node by.

Events: NVIDIA Xid (`NVRM: Xid (PCI:0000:3b:00): 79, ...`, with the line's own "Fatal"/"Nonfatal"
word and the Xid an Xid 45 names as its cause), NVSwitch SXid
(`nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, ...`), a GPU that fell off the bus without an
Xid (newer drivers print it over three lines), a GPU the driver could not initialise
(`NVRM: GPU 0000:09:00.0: RmInitAdapter failed!`), a GSP that stopped answering without an Xid
(`NVRM: GPU6 _kgspLogRpcTimeout: ***** GSP Timeout *****`), PCIe AER reports, RDMA/Ethernet link changes of
mlx5 ports (`mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN`, `... enp157s0f1np1: Link down`,
`ib0: lost carrier`), and an mlx5 adapter's own lines about its health (kind "mlx5": firmware health,
command timeouts, module and slot-power events, its PCIe link; hardware/mlx5.toml judges them).

A log of a million lines must read in well under a second, so one regex over the whole text finds
the few lines worth a look, and only those are split into time and message.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timezone

# Words that mark a line worth a look; each is found with str.find (a memchr-speed scan), which is
# many times faster over a long log than one regex alternation.
# Few, each one pass over the text. CPython's search skips by the needle's last character, so a
# longer needle that ends in a rarer one scans faster ("ost carrier" in 0.03 s where "carrier"
# takes 0.09 s over a million lines; bench/kernel_log_speed.py). "Xid (" covers SXid; "fallen off
# the bus" finds the three-line form, whose first line (naming the GPU) is looked up behind it;
# "AER: " is the one line per PCIe error that names its severity; " Link " the mlx5 port and
# Ethernet link changes; "ost carrier" both "lost carrier" and "Lost carrier"; "dapter failed" both
# "RmInitAdapter failed" and "rm_init_adapter failed"; "GSP Timeout" the banner the driver prints once
# per GSP RPC timeout; "mlx5_" every line of the ConnectX/BlueField driver (a few dozen per adapter at
# boot), among them its firmware-health and command-timeout lines.
_KEYWORDS = ("Xid (", "fallen off the bus", "AER: ", " Link ", "ost carrier", "dapter failed", "GSP Timeout",
             "mlx5_")


# Time prefixes, tried in order on a candidate line.
_KMSG = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")  # prio,seq,usec,flags;message
_RAW = re.compile(r"^<(\d+)>\[\s*(\d+\.\d+)\]\s?(.*)$")  # dmesg -r / pstore
_UPTIME = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")  # dmesg
_RELATIVE = re.compile(r"^\[\s*[+-]\d+\.\d+\]\s?(.*)$")  # dmesg -H: time since the previous line only
_CTIME = re.compile(r"^\[(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(.*)$")  # dmesg -T
# dmesg --decode: "kern  :warn  : ". Only syslog's facility and level names: a pasted "kernel: NVRM:
# Xid ..." (a syslog line grep'd without its time and host) is no prefix to strip.
_DECODE = re.compile(r"^(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
                     r"\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*: (.*)$")
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d\d:?\d\d|Z)?)\s(.*)$")
# the same with its parts and an optional --decode prefix, in one match: what a flood's lines cost
_ISO_LINE = re.compile(r"^(?:[a-z]+\s*:\s*[a-z]+\s*: )?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[.,](\d+))?"
                       r"((?:[+-]\d\d:?\d\d|Z)?)\s(.*)$")
_JOURNAL_HOST = re.compile(r"^\S+ kernel: (.*)$")  # after an ISO time: "host kernel: msg"
# journalctl short, syslog; SONiC's syslog adds microseconds and a level word ("21:05:38.106121 host INFO kernel:");
# a paste may drop the host ("Mar 29 15:38:59 kernel: NVRM: ...", NVIDIA's forum, tests/data/kernel_log)
_SYSLOG = re.compile(r"^(\w{3} [ \d]\d \d\d:\d\d:\d\d)(?:\.\d+)? (?:\S+ )?(?:[A-Z]+ )?kernel: (.*)$")
# a syslog line whose time and host a paste or a log shipper dropped ("kernel: [   17.98] mlx5_core ...",
# NVIDIA NVSentinel's syslog lines), and dmesg run through pdsh/clush ("b1360: [14280.44] ...")
_BARE_KERNEL = re.compile(r"^(?:kernel|[A-Za-z0-9][\w.-]*): (\[\s*\d+\.\d+\]\s?.*)$")

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (\d+)")
_SXID = re.compile(r"(nvidia-nvswitch\d+): SXid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)(?:, (Non-fatal|Fatal))?")
# NVLink5 Xids (144-150) carry the driver's severity after their unit name: "149, NETIR_LINK_EVT Fatal".
_XID_SEVERITY = re.compile(r", \S+ (Nonfatal|Non-fatal|Fatal)\b")
_XID_CAUSE = re.compile(r"caused by previous Xid (\d+)")  # an Xid 45 naming the error it cleans up after
# Xid 154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
_XID_RECOVERY = re.compile(r"recovery action changed from 0x[0-9A-Fa-f]+ \([^)]*\) to 0x([0-9A-Fa-f]+)")
_INIT_FAILED = re.compile(r"NVRM: GPU ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?): "
                          r"(?:RmInitAdapter|rm_init_adapter) failed")
_GPU_LINE = re.compile(r"NVRM: The NVIDIA GPU ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)")
_AER = re.compile(r"AER: (?:Multiple )?(Correct(?:ed|able)|Uncorrect(?:ed|able) \((?:Non-Fatal|Fatal)\)) error")
_AER_DEVICE = re.compile(r"^(\S+ [0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]): (?:AER|PCIe Bus Error)")
_IB_PORT = re.compile(r"mlx5_core ([0-9A-Fa-f:.]+) (\S+): Port: (\d+) Link (DOWN|INIT|ARMED|ACTIVE)")
_ETH_LINK = re.compile(r"mlx5_core ([0-9A-Fa-f:.]+) (\S+): Link (down|up)\b")
_CARRIER = re.compile(r"(?<!\S)(\S+): [Ll]ost carrier")  # from the start of a word: linear
_PCI = re.compile(r"\b([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\b")
# The driver numbers GPUs itself in these lines ("GPU6"); the PCI address is not on them.
_GSP_TIMEOUT = re.compile(r"NVRM: (GPU\d+) _kgspLogRpcTimeout: \*+ GSP Timeout \*+")
_MLX5_DEVICE = re.compile(r"mlx5_core ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
# "... limited by 32.0 GT/s PCIe x8 link at 0000:97:01.0 (capable of 504.112 Gb/s with 32.0 GT/s PCIe x16 link)"
_PCIE_LIMITED = re.compile(r"limited by \S+ GT/s PCIe x(\d{1,2}) link at \S+ "
                           r"\(capable of \S+ Gb/s with \S+ GT/s PCIe x(\d{1,2}) link")
# The mlx5 lines worth an event: what hardware/mlx5.toml has rules for (a unit test holds the two in
# step), and a PCIe "limited by" line. The rest of an adapter's boot chatter (dozens of lines each)
# is skipped here, where it costs least.
_MLX5_WORDS = ("health compromised", "unrecoverable hardware error", "Fatal error ", "leak of a command resource",
               "No done completion", "Port module event", "insufficient power", "transmit queue", "ACCESS_REG(",
               "limited by")
_MLX5_NOTABLE = re.compile("|".join(re.escape(w) for w in _MLX5_WORDS))

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                       "Nov", "Dec"), 1)}


@dataclass(frozen=True)
class KernelEvent:
    kind: str  # "xid", "sxid", "fallen-off-bus", "init-failed", "gsp-timeout", "aer", "link", "mlx5"
    message: str  # the line as the kernel wrote it, without the time prefix
    device: str = ""  # PCI address (0000:3b:00) for GPUs and AER; the port or interface for links
    code: int | None = None  # Xid/SXid number
    # AER severity; link state (DOWN, ACTIVE, down, up, lost-carrier); SXid fatality; an Xid's own
    # "fatal"/"nonfatal" word, "after-xid-N" for an Xid 45 naming the Xid it follows, "recovery-N" for
    # an Xid 154 naming the recovery action (NVML's number) the GPU needs now; for an mlx5 line whose
    # PCIe link trained narrower than the adapter can: "x8<x16"
    detail: str = ""
    time: float | None = None  # epoch seconds, when the line carries a wall-clock time
    uptime: float | None = None  # seconds since boot, when the line carries those instead
    line: int = 0  # 1-based line number in the input


@dataclass(frozen=True)
class KernelLog:
    events: tuple[KernelEvent, ...]
    lines: int  # lines read
    timed: str  # "wall", "uptime", "none" or "mixed": what the times in it are
    year_guessed: bool = False  # syslog-style times carry no year; the caller's year was assumed


_TZ_COLONLESS = re.compile(r"[+-]\d{4}$")
_ISO_PARTS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[.,](\d+))?(.*)$")


@functools.lru_cache(maxsize=4096)
def _iso_seconds(base: str, zone: str) -> float | None:
    text = base + (zone[:-2] + ":" + zone[-2:] if _TZ_COLONLESS.match(zone) else "+00:00" if zone in ("", "Z") else zone)
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _iso(text: str) -> float | None:
    # A flood of Xid lines shares its seconds: the date is parsed once per second and zone, the
    # fraction added.
    m = _ISO_PARTS.match(text)
    if not m:
        return None
    seconds = _iso_seconds(m.group(1), m.group(3))
    if seconds is None:
        return None
    return seconds + (int(m.group(2)) / 10 ** len(m.group(2)) if m.group(2) else 0.0)


def _ctime(text: str) -> float | None:
    # dmesg -T prints local time without a zone; read as UTC, which is what a server usually runs.
    try:
        return datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y").replace(
            tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def _syslog(text: str, year: int) -> float | None:
    parts = text.split()
    try:
        month = _MONTHS[parts[0]]
        hour, minute, second = (int(p) for p in parts[2].split(":"))
        return datetime(year, month, int(parts[1]), hour, minute, second, tzinfo=timezone.utc).timestamp()
    except (KeyError, ValueError, IndexError):
        return None


def split_time(line: str, year: int = 1970) -> tuple[float | None, float | None, str]:
    """(wall time, uptime, message) of one kernel-log line in any of the formats above."""
    first = line[:1]
    if first in "*>":
        # a pasted line in Markdown bold (`**Nov 22 ... kernel: ...**`) or a mail/issue quote (`> [  416.09] ...`)
        bare = line.lstrip("*>").lstrip()
        if bare and bare != line:
            return split_time(bare.removesuffix("**"), year)
    if first.isdigit():
        m = _KMSG.match(line)
        if m:
            return None, int(m.group(3)) / 1e6, m.group(4)
    elif first == "<":
        m = _RAW.match(line)
        if m:
            return None, float(m.group(2)), m.group(3)
    elif first == "[":
        m = _UPTIME.match(line)
        if m:
            return None, float(m.group(1)), m.group(2)
        m = _CTIME.match(line)
        if m:
            return _ctime(m.group(1)), None, m.group(2)
        m = _RELATIVE.match(line)
        if m:
            return None, None, m.group(1)
    m = _ISO_LINE.match(line)  # dmesg --time-format iso (--decode or not), journalctl -o short-iso
    if m:
        rest = m.group(4)
        host = _JOURNAL_HOST.match(rest) if "kernel: " in rest else None
        seconds = _iso_seconds(m.group(1), m.group(3))
        if seconds is not None and m.group(2):
            seconds += int(m.group(2)) / 10 ** len(m.group(2))
        return seconds, None, host.group(1) if host else rest
    m = _DECODE.match(line) if first.isalpha() else None
    if m:
        line = m.group(1)
    m = _ISO.match(line)
    if m:
        rest = m.group(2)
        host = _JOURNAL_HOST.match(rest)
        return _iso(m.group(1)), None, host.group(1) if host else rest
    m = _SYSLOG.match(line)
    if m:
        # Syslog files often keep the kernel's own uptime stamp after "kernel:".
        rest = _UPTIME.match(m.group(2))
        return _syslog(m.group(1), year), float(rest.group(1)) if rest else None, rest.group(2) if rest else m.group(2)
    m = _BARE_KERNEL.match(line) if first.isalnum() else None
    if m:
        rest = _UPTIME.match(m.group(1))
        if rest:
            return None, float(rest.group(1)), rest.group(2)
    return None, None, line


def _event(message: str, wall: float | None, up: float | None, number: int) -> KernelEvent | None:
    found = _classify(message)
    if found is None:
        return None
    return KernelEvent(found[0], message, found[1], found[2], found[3], wall, up, number)


@functools.lru_cache(maxsize=4096)
def _classify(message: str) -> tuple[str, str, int | None, str] | None:
    """(kind, device, code, detail) of one message. Cached: a flood repeats the same few messages
    under different times (a program's Xid 13 on every SM)."""
    found = _match_event(message)
    return None if found is None else (found.kind, found.device, found.code, found.detail)


def _match_event(message: str, wall: float | None = None, up: float | None = None,
                 number: int = 0) -> KernelEvent | None:
    if "Xid" in message:
        m = _XID.search(message)
        if m:
            said = _XID_SEVERITY.match(message, m.end())
            cause = _XID_CAUSE.search(message, m.end()) if said is None else None
            target = _XID_RECOVERY.search(message, m.end()) if said is None and cause is None else None
            detail = (said.group(1).lower().replace("-", "") if said else
                      f"after-xid-{int(cause.group(1))}" if cause else
                      f"recovery-{int(target.group(1), 16)}" if target else "")
            return KernelEvent("xid", message, m.group(1).lower(), int(m.group(2)), detail, wall, up, number)
        m = _SXID.search(message)
        if m:
            return KernelEvent("sxid", message, m.group(2).lower(), int(m.group(3)), (m.group(4) or "").lower(),
                               wall, up, number)
        return None
    if "dapter failed" in message:
        m = _INIT_FAILED.search(message)
        return None if m is None else KernelEvent("init-failed", message, m.group(1).lower(), None, "", wall, up,
                                                  number)
    if "GSP Timeout" in message:
        m = _GSP_TIMEOUT.search(message)
        return None if m is None else KernelEvent("gsp-timeout", message, m.group(1), None, "", wall, up, number)
    m = _AER_DEVICE.search(message)
    if m:
        # One report per error: the "AER: ... error received" line; the "PCIe Bus Error:
        # severity=" line that follows repeats it.
        severity = _AER.search(message)
        if severity:
            word = severity.group(1)
            level = "non-fatal" if "Non-Fatal" in word else "fatal" if "Fatal" in word else "corrected"
            device = m.group(1).split()[-1].lower()
            return KernelEvent("aer", message, device, None, level, wall, up, number)
    m = _IB_PORT.search(message)
    if m:
        return KernelEvent("link", message, f"{m.group(2)}/{m.group(3)}", None, m.group(4).lower(), wall, up, number)
    m = _ETH_LINK.search(message)
    if m:
        return KernelEvent("link", message, m.group(2), None, m.group(3).lower(), wall, up, number)
    m = _CARRIER.search(message)
    if m:
        return KernelEvent("link", message, m.group(1), None, "lost-carrier", wall, up, number)
    if "mlx5_" in message and _MLX5_NOTABLE.search(message):
        device = _MLX5_DEVICE.search(message)
        limited = _PCIE_LIMITED.search(message) if "limited by" in message else None
        width = (f"x{limited.group(1)}<x{limited.group(2)}"
                 if limited and int(limited.group(1)) < int(limited.group(2)) else "")
        return KernelEvent("mlx5", message, device.group(1).lower() if device else "", None, width, wall, up, number)
    return None


def _candidate_starts(text: str) -> list[int]:
    """Where each line holding one of the keywords starts, in order, once per line."""
    starts: set[int] = set()
    for word in _KEYWORDS:
        at = text.find(word)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            if word != "mlx5_" or _MLX5_NOTABLE.search(text, start, end if end >= 0 else len(text)):
                starts.add(start)
            if word == "fallen off the bus":  # the GPU is named up to two lines before
                before = start
                for _ in range(2):
                    if before <= 0:
                        break
                    before = text.rfind("\n", 0, before - 1) + 1
                    if "NVRM: The NVIDIA GPU" in text[before:start]:
                        starts.add(before)
                        break
            if end < 0:
                break
            at = text.find(word, end)
    return sorted(starts)


def parse_kernel_log(text: str, year: int = 1970) -> KernelLog:
    """The hardware events in a kernel log. `year` dates syslog-style lines, which carry none
    (pass the current year; the result says it was assumed). Lines it does not understand are
    skipped: a kernel log is mostly about other things."""
    events: list[KernelEvent] = []
    kinds: set[str] = set()
    pending_gpu: tuple[str, int] | None = None  # "NVRM: The NVIDIA GPU <pci>" awaiting "fallen off the bus"
    guessed = False
    counted_to = 0
    number = 1
    for start in _candidate_starts(text):
        line_end = text.find("\n", start)
        if line_end < 0:
            line_end = len(text)
        number += text.count("\n", counted_to, start)
        counted_to = start
        line = text[start:line_end].rstrip("\r")
        wall, up, message = split_time(line, year)
        kinds.add("wall" if wall is not None else "uptime" if up is not None else "none")
        if wall is not None and not guessed and line[:3] in _MONTHS and _SYSLOG.match(line):
            guessed = True
        gpu = _GPU_LINE.search(message) if "NVIDIA GPU" in message else None
        if gpu:
            pending_gpu = (gpu.group(1).lower(), number)
            if "fallen off the bus" not in message:
                continue
        if "fallen off the bus" in message and not _XID.search(message):
            # The multi-line form names the GPU two lines above; "NVRM: GPU 0000:02:00.0: GPU has
            # fallen off the bus." names it on the line; a bare line names none.
            own = _PCI.search(message)
            device = own.group(1).lower() if own else (
                pending_gpu[0] if pending_gpu and number - pending_gpu[1] <= 3 else "")
            events.append(KernelEvent("fallen-off-bus", message.strip(), device, 79, "", wall, up, number))
            pending_gpu = None
            continue
        event = _event(message, wall, up, number)
        if event is not None:
            events.append(event)
    # the newlines before the last candidate are counted already: count only the rest
    total = (number - 1) + text.count("\n", counted_to) + (0 if text.endswith("\n") or not text else 1)
    if len(kinds) > 1:
        kinds.discard("none")  # a continuation line without a time does not make the log untimed
    timed = "mixed" if len(kinds) > 1 else (kinds.pop() if kinds else "none")
    return KernelLog(tuple(events), total, timed, guessed)


def short_pci(bus_id: str) -> str:
    """'00000000:3B:00.0' (nvidia-smi) or '0000:3b:00.0' -> '0000:3b:00', the form Xid lines use."""
    text = bus_id.strip().lower()
    if text.count(":") == 2:
        domain, bus, rest = text.split(":")
        return f"{domain[-4:]}:{bus}:{rest.split('.')[0]}"
    return text
