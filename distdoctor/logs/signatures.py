"""The failure-signature catalogue: what a line in a failed job's log means.

The catalogue is data (signatures.toml, next to this module), reviewed like code: each entry
names the public issue thread where its cause was established. This module loads and
validates it, and answers one question fast: which signature does this line show?

Matching is two-stage because a failed job's log is mostly INFO chatter. Each signature
lists literal keywords; one alternation of every keyword (PREFILTER) rejects almost every line
before any signature's own regexes run. Among the signatures whose patterns match, the one
earliest in the file wins: the file is ordered most specific first.

`severity` says how a diagnosis should weigh a match: "root" (a cause), "consequence"
(what follows when another rank or component already failed: a watchdog timeout, a reset
connection) and "info" (worth reporting, not a failure by itself). `consequence_of` names the
signatures whose presence earlier in the log explains this one.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
from dataclasses import dataclass

from distdoctor import fixes, remote

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CATEGORIES = ("nccl", "nvshmem", "torch", "gloo", "mpi", "horovod", "slurm", "cuda")
SEVERITIES = ("root", "consequence", "info")
DEFAULT_PATH = os.path.join(os.path.dirname(__file__), "signatures.toml")

_ID = re.compile(r"^({})\.[a-z0-9]+(-[a-z0-9]+)*$".format("|".join(CATEGORIES)))
_SOURCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*#[1-9][0-9]*$")
_CHECK_ID = re.compile(r"^[a-z]+\.[a-z0-9]+(-[a-z0-9]+)*$")
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Words a reader must replace before pasting: IMAGE, COMMAND, slurm-JOBID.out, <node>, ...
_PLACEHOLDER = re.compile(r"^(IMAGE|COMMAND|CMD|ARGS|NODE|HOST|JOBID)$|JOBID|<[a-z_ -]+>|\.\.\.$")
# What a fix line may start with. A line that starts with anything else is prose posing as a
# command; extend this list when a fix genuinely needs another tool.
FIX_COMMANDS = frozenset({
    "export", "unset", "ulimit", "echo", "cat", "grep", "ls", "df", "mount", "sysctl", "hostname",
    "ip", "ss", "ping", "nft", "iptables", "ethtool", "ibstat", "ibv_devinfo", "ibv_devices",
    "rdma", "nvidia-smi", "dmesg", "journalctl", "ldconfig", "docker", "kubectl", "ssh",
    "srun", "sbatch", "salloc", "scontrol", "sinfo", "squeue", "sacct", "scancel", "seff",
    "mpirun", "ompi_info", "horovodrun", "torchrun", "python3", "pip", "distdoctor", "getent",
    "sudo", "free", "lsmod", "modprobe", "ldd", "id", "env", "sacctmgr",
})


# The peer's address in NCCL's and gloo's connect errors: "Connect to 10.0.0.4<56849>",
# "Connection closed by peer [10.1.2.3]:35523", "remote address 10.0.0.4<1778>".
_PEER = re.compile(r"(?:Connect to|by peer|remote address|peer)\s+\[?(?P<addr>[0-9a-fA-F.:%\w]+?)\]?(?:<\d+>|:\d+\b)")
# An address as NCCL prints it (10.0.0.4, fe80::1%ib0): what may go into a command.
_SAFE_ADDRESS = re.compile(r"^[0-9A-Fa-f][0-9A-Fa-f.:]{0,63}(%[A-Za-z0-9._-]{1,32})?$")
# Placeholders a fix may use; the diagnosis fills them for the rank or node the line came from,
# `peer` with the address the message names (peer_address), `port` from a pattern's
# (?P<port>...) group (the TCP port it names) and `job` from a (?P<job>...) group. Each: (an example value, for checking the
# catalogue's fixes; what it is, in words; its stand-in when the log does not name it).
PLACEHOLDERS = {
    "host": ("gpu042", "the node", "THAT_NODE"),
    "rank": ("17", "the rank", "RANK"),
    "peer": ("10.0.0.4", "the address", "THE_ADDRESS_IN_THE_MESSAGE"),
    "port": ("29500", "the port", "THE_PORT_IN_THE_MESSAGE"),
    "job": ("3756240", "the job id", "THE_JOB_ID"),
}
PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
# A fix line may hold only where the log shows a launcher, a library or a kind of message:
# "[slurm] export MASTER_PORT=..." is printed only for a log with Slurm in it, "[not vllm] ..."
# only without vLLM. The context comes from the whole log (scan.Scan.context); "denied" from the
# matched line itself. A fix must fit the launcher, library and error the log shows.
CONTEXTS = ("slurm", "torchrun", "vllm", "ray", "mpirun", "deepspeed", "horovod", "container", "denied")
_CONDITION = re.compile(r"^\[(?P<neg>not )?(?P<flag>[a-z]+)\] ")
_DENIED = re.compile(r"Permission denied|Operation not permitted|EACCES")


def line_context(line: str) -> frozenset[str]:
    """The context flags a matched line itself gives."""
    return frozenset({"denied"}) if _DENIED.search(line) else frozenset()


def condition(fix_line: str) -> tuple[str, str, bool]:
    """(the fix line without its condition, the flag or "", whether the flag is negated)."""
    m = _CONDITION.match(fix_line)
    if not m:
        return fix_line, "", False
    return fix_line[m.end():], m.group("flag"), bool(m.group("neg"))


def addressable(host: str) -> bool:
    """Whether a host name from a log may go into a command as `ssh HOST` (remote.host_name:
    a plain name, and not `localhost`, which torchrun reports on a single node)."""
    return remote.host_name(host)


def peer_address(line: str) -> str:
    """The peer address a connect error names, or "" (also "" when it is not plainly one)."""
    m = _PEER.search(line)
    return m.group("addr") if m and _SAFE_ADDRESS.match(m.group("addr")) else ""


# Matching is on normalised text: runs of blanks are one space, a blank before a colon is
# dropped ("failed : No" and "failed: No" read alike), markdown's ** and ` are ignored. A pasted
# line's spacing varies with the tool, the release and the paste; the catalogue's wording does not.
_BLANKS = re.compile(r"[ \t]{2,}|\t")
_BEFORE_COLON = re.compile(r"(?<![ \t])[ \t]+:(?=[ \t]|$)")  # from a run's start: linear
_BOLD = re.compile(r"(?<!\*)\*\*(?!\*)")  # markdown bold, not slurmstepd's ***


def normal(text: str) -> str:
    """The text as signatures are matched against it (cheap when there is nothing to do)."""
    if "  " in text or "\t" in text:
        text = _BLANKS.sub(" ", text)
    if " :" in text:
        text = _BEFORE_COLON.sub(":", text)
    if "**" in text:
        text = _BOLD.sub("", text)
    if "`" in text:
        text = text.replace("`", "")
    return text


def _normal_pattern(source: str) -> str:
    """A catalogue pattern written against NCCL's own spacing, as it reads normalised text."""
    return source.replace(" : ", ": ").replace("  ", " ")


class _Unfilled(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


class CatalogueError(ValueError):
    """The catalogue file is invalid; the message names the entry and the field."""


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    category: str
    patterns: tuple[re.Pattern, ...]
    keywords: tuple[str, ...]
    meaning: str
    fix: tuple[str, ...]
    confirm: str
    sources: tuple[str, ...]
    severity: str
    consequence_of: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    remedy: str = ""  # a named remedy (distdoctor/fixes.py NAMED), added after fix for the node

    def matches(self, line: str) -> bool:
        return self.matches_normal(normal(line))

    def matches_normal(self, line: str) -> bool:
        return any(k in line for k in self.keywords) and any(p.search(line) for p in self.patterns)

    def fix_for(self, host: str = "", rank: str | int = "", line: str = "",
                context: frozenset[str] = frozenset()) -> tuple[str, ...]:
        """The fix lines that fit the log's context (see CONTEXTS), with {host}, {rank}, {peer}
        and {port} (from the matched line) filled in; a placeholder that cannot be filled is left
        visible rather than silently emptied. The values come from a log, which anyone can
        write: only a plain host name, rank number or address goes into a command."""
        host, rank = str(host), str(rank)
        values = _Unfilled(host=host if addressable(host) else "{host}",
                           rank=rank if rank.isdigit() else "{rank}")
        peer = peer_address(line)
        if peer:
            values["peer"] = peer
        port = self.field(line, "port")
        if port.isdigit() and 0 < int(port) < 65536:
            values["port"] = str(int(port))
        job = self.field(line, "job")
        if job.isdigit():
            values["job"] = job
        flags = frozenset(context) | line_context(line)
        kept = []
        for fix_line in self.fix:
            text, flag, negated = condition(fix_line)
            if not flag or (flag in flags) != negated:
                kept.append(text.format_map(values))
        return tuple(kept)

    def field(self, line: str, name: str) -> str:
        """The named group `name` of the first pattern that matches line with it, or ""."""
        line = normal(line)
        for pattern in self.patterns:
            if name in pattern.groupindex:
                found = pattern.search(line)
                if found and found.group(name):
                    return found.group(name)
        return ""


def fix_problem(line: str) -> str | None:
    """Why a fix line would not work pasted into a shell, or None when it would."""
    line, flag, _negated = condition(line)
    if flag and flag not in CONTEXTS:
        return f"unknown condition [{flag}] (one of {', '.join(CONTEXTS)})"
    if not line.strip():
        return "empty line"
    if line.startswith("# "):
        return None
    try:
        filled = line.format_map({name: example for name, (example, _, _) in PLACEHOLDERS.items()})
    except (KeyError, IndexError, ValueError) as exc:
        return f"unknown placeholder {exc}"
    try:
        words = shlex.split(filled, comments=True)
    except ValueError as exc:
        return f"not shell: {exc}"
    if not words:
        return "no command"
    first = 0
    while first < len(words) and _ENV_ASSIGN.match(words[first]):
        first += 1
    if first == len(words):
        return None  # plain assignments
    if words[first] not in FIX_COMMANDS:
        return f"{words[first]!r} is not a known command (prose as a command?)"
    for word in words[first + 1:]:
        if _PLACEHOLDER.search(word):
            return f"placeholder {word!r} left in a command (write it as a comment)"
    for word in words:
        if word.startswith(("NCCL_SOCKET_IFNAME=", "GLOO_SOCKET_IFNAME=")):
            value = word.split("=", 1)[1]
            if not value.startswith("^") and "lo" in (v.lstrip("=") for v in value.split(",")):
                return "offers lo as the network interface"
    return None


def _field(entry: dict, name: str, where: str, kind=str, required: bool = True):
    value = entry.get(name)
    if value is None:
        if required:
            raise CatalogueError(f"{where}: missing {name!r}")
        return kind()
    if not isinstance(value, kind):
        raise CatalogueError(f"{where}: {name!r} must be {kind.__name__}")
    return value


def _strings(entry: dict, name: str, where: str, required: bool = True) -> tuple[str, ...]:
    value = _field(entry, name, where, list, required)
    if not all(isinstance(v, str) for v in value):
        raise CatalogueError(f"{where}: {name!r} must be a list of strings")
    if required and not value:
        raise CatalogueError(f"{where}: {name!r} is empty")
    return tuple(value)


def parse(text: str, origin: str = "signatures.toml") -> list[Signature]:
    """Validate and build the catalogue from TOML text. Raises CatalogueError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{origin}: {exc}") from None
    entries = data.get("signature")
    if not isinstance(entries, list) or not entries:
        raise CatalogueError(f"{origin}: no [[signature]] entries")
    out: list[Signature] = []
    seen: set[str] = set()
    for n, entry in enumerate(entries, 1):
        where = f"{origin}: signature {n}"
        sid = _field(entry, "id", where)
        where = f"{origin}: {sid}"
        if not _ID.match(sid):
            raise CatalogueError(f"{where}: id must be <category>.<kebab-name>")
        if sid in seen:
            raise CatalogueError(f"{where}: duplicate id")
        seen.add(sid)
        category = _field(entry, "category", where)
        if category not in CATEGORIES or not sid.startswith(category + "."):
            raise CatalogueError(f"{where}: category {category!r} unknown or not the id's prefix")
        severity = _field(entry, "severity", where)
        if severity not in SEVERITIES:
            raise CatalogueError(f"{where}: severity {severity!r} not one of {SEVERITIES}")
        patterns = []
        for source in _strings(entry, "patterns", where):
            try:
                patterns.append(re.compile(_normal_pattern(source)))
            except re.error as exc:
                raise CatalogueError(f"{where}: pattern {source!r}: {exc}") from None
        keywords = tuple(normal(k) for k in _strings(entry, "keywords", where))
        sources = _strings(entry, "sources", where)
        for s in sources:
            if not _SOURCE.match(s):
                raise CatalogueError(f"{where}: source {s!r} is not owner/repo#N")
        fix = _strings(entry, "fix", where)
        for line in fix:
            problem = fix_problem(line)
            if problem:
                raise CatalogueError(f"{where}: fix line {line!r}: {problem}")
        remedy = _field(entry, "remedy", where, required=False)
        if remedy and remedy not in fixes.NAMED:
            raise CatalogueError(f"{where}: remedy {remedy!r} is not one of {', '.join(sorted(fixes.NAMED))}")
        confirm = _field(entry, "confirm", where)
        if not (_CHECK_ID.match(confirm) or fix_problem(confirm) is None):
            raise CatalogueError(f"{where}: confirm {confirm!r} is neither a check id nor a command")
        examples = _strings(entry, "examples", where)
        for ex in map(normal, examples):
            if not any(k in ex for k in keywords):
                raise CatalogueError(f"{where}: example has none of the keywords: {ex!r}")
            if not any(p.search(ex) for p in patterns):
                raise CatalogueError(f"{where}: no pattern matches example {ex!r}")
        out.append(Signature(
            id=sid, title=_field(entry, "title", where), category=category,
            patterns=tuple(patterns), keywords=keywords, meaning=_field(entry, "meaning", where),
            fix=fix, confirm=confirm, sources=sources, severity=severity,
            consequence_of=_strings(entry, "consequence_of", where, required=False),
            examples=examples, remedy=remedy,
        ))
    for sig in out:
        for other in sig.consequence_of:
            if other not in seen:
                raise CatalogueError(f"{origin}: {sig.id}: consequence_of names unknown {other!r}")
    return out


@functools.lru_cache(maxsize=8)
def _load(path: str) -> tuple[Signature, ...]:
    with open(path, encoding="utf-8") as fh:
        return tuple(parse(fh.read(), origin=os.path.basename(path)))


def load(path: str | None = None) -> list[Signature]:
    """The catalogue at path (default: the built-in one), parsed once per path."""
    return list(_load(os.path.abspath(path or DEFAULT_PATH)))


def by_id(path: str | None = None) -> dict[str, Signature]:
    return {s.id: s for s in load(path)}


def keyword_pattern(words) -> str:
    """One regex matching any of the literal words, shaped as a trie: Python's engine tries
    far fewer branches per position than with a flat alternation (about 3x faster on INFO
    chatter), which is what the per-line fallback spends its time on."""
    trie: dict = {}
    for word in words:
        if not word:
            raise ValueError("empty keyword")
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        alts = [re.escape(ch) + build(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        if "" in node:  # a word ends here: the rest is optional
            return "(?:" + "|".join(alts) + ")?"
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return build(trie)


class Matcher:
    """One catalogue compiled for scanning: a keyword pre-filter, then per-signature regexes
    in catalogue order."""

    def __init__(self, signatures: list[Signature]):
        self.signatures = tuple(signatures)
        self.keywords = frozenset(k for s in self.signatures for k in s.keywords)
        self.prefilter = re.compile(keyword_pattern(self.keywords))
        self._folded: list | None = None

    def match(self, line: str) -> Signature | None:
        line = normal(line)
        if not self.prefilter.search(line):
            return None
        for sig in self.signatures:
            if sig.matches_normal(line):
                return sig
        return None

    def match_folded(self, line: str) -> Signature | None:
        """The catalogue matched ignoring case, for the few lines that already look like errors
        and matched nothing: a message's capitalisation varies between releases, wrappers and
        pastes ("no route to host", "CONNECTION REFUSED"). Compiled on first use."""
        if self._folded is None:
            self._folded = [(sig, tuple(k.lower() for k in sig.keywords),
                             tuple(re.compile(p.pattern, p.flags | re.IGNORECASE) for p in sig.patterns))
                            for sig in self.signatures]
        text = normal(line)
        low = text.lower()
        for sig, keywords, patterns in self._folded:
            if any(k in low for k in keywords) and any(p.search(text) for p in patterns):
                return sig
        return None

    def all_matches(self, line: str) -> list[Signature]:
        """Every signature the line shows, in priority order (for tests and explanations)."""
        line = normal(line)
        if not self.prefilter.search(line):
            return []
        return [s for s in self.signatures if s.matches_normal(line)]


@functools.lru_cache(maxsize=8)
def _matcher(path: str) -> Matcher:
    return Matcher(list(_load(path)))


def matcher(path: str | None = None) -> Matcher:
    return _matcher(os.path.abspath(path or DEFAULT_PATH))


def match_line(text: str, path: str | None = None) -> Signature | None:
    """The most specific signature this line shows, or None (most lines)."""
    return matcher(path).match(text)


def remedy_lines(sig: Signature, host: str) -> str:
    """The signature's named remedy for host, "" when it has none. A host a command cannot name
    (the log gave none, or not a plain one) gets the remedy as comments for that node."""
    name = getattr(sig, "remedy", "")  # a catalogue of another shape (a test's stand-in) may have none
    if not name:
        return ""
    if addressable(host):
        return remote.render_all(fixes.named(name, [host]))
    text = remote.render_all(fixes.named(name))
    return "\n".join(remote.comment(f"on {host or 'that node'}: {line.lstrip('# ')}") for line in text.splitlines())


def _remedy_shown(sig: Signature) -> list[str]:
    """The remedy's lines as the reference shows fix lines: for {host}."""
    example = PLACEHOLDERS["host"][0]
    return remedy_lines(sig, example).replace(example, "{host}").splitlines()


def markdown(path: str | None = None) -> str:
    """The catalogue as a reference page (docs/log-signatures.md), in catalogue order."""
    catalogue = load(path)
    lines = ["# Failure signatures", "",
             "Generated by `python -m distdoctor.docgen signatures` from distdoctor/logs/signatures.toml;",
             "do not edit by hand. `distdoctor log` matches each line of a log against these, earliest",
             "entry first. Severity: **root** (a cause), **consequence** (what follows when something",
             "else failed first), **info** (worth knowing, not a failure).", ""]
    for category in CATEGORIES:
        lines += [f"## {category}", ""]
        for sig in (s for s in catalogue if s.category == category):
            lines += [f"### `{sig.id}` — {sig.title}", "",
                      f"Severity: **{sig.severity}**"
                      + (f" (after {', '.join(f'`{c}`' for c in sig.consequence_of)})" if sig.consequence_of else ""),
                      "", sig.meaning, "", "Matches: " + ", ".join(f"`{p.pattern}`" for p in sig.patterns), "",
                      "Fix:", "", "```sh", *sig.fix, *_remedy_shown(sig), "```", "",
                      f"Confirm: `{sig.confirm}` · Sources: "
                      + ", ".join(f"[{s}](https://github.com/{s.replace('#', '/issues/')})" for s in sig.sources), ""]
    return "\n".join(lines).rstrip() + "\n"
