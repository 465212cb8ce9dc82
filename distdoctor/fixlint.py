"""Lints a finding's fix: every fix must be shell that runs as printed, or a comment.

A fix is a record (remote.Fix): its nodes say where its commands run, so lint_record lints a
record for nodes as the script their shells run, and a record for here as the lines it prints;
nothing is guessed back from an `ssh` line. Fixes given as text (a pack's `fix="..."`, a report
read back) are linted as printed, `ssh`/`clush` lines unwrapped.

Pure: records and text in, problems out. The one question about the machine (does this path exist?) is a
function the caller passes. The suite runs this over every fix any scenario produces
(tests/conftest.py), so a new check cannot print prose as a command.

What it rejects, each seen in a real report:
- prose where a command should be (`run distdoctor on a GPU node: srun ...`): the first word of
  each command must be a known command, a shell builtin, an assignment, or a path;
- a variable set to an absolute path that does not exist (`export SLURM_CONF=/etc/slurm/slurm.conf` on a node
  without it), unless the fix itself creates it;
- loopback offered to NCCL or Gloo (`NCCL_SOCKET_IFNAME=eth0,lo`), and `NAME==value`;
- writing to a predictable /tmp path (another user can plant it): use mktemp;
- `nft add rule` / `iptables -A`, which append after the chain's drop rule and change nothing,
  and firewall commands that do not say which node they are for.
"""

from __future__ import annotations

import re
import shlex
from typing import Callable, Iterable

from distdoctor.remote import Fix, render, script

# Commands a fix may start with: tools a cluster user has, by name (PATH lookups would make the
# linter depend on the machine it runs on).
COMMANDS = frozenset("""
    show_gids nvidia-imex-ctl apt-get apt awk cat chmod chown cp curl df dmesg dnf docker du env ethtool findmnt free getent
    git grep head horovodrun hostname ibstat ibstatus ibv_devinfo ibv_devices id install ip
    iptables journalctl kill ldconfig ldd less ln ls lsmod lspci modprobe module mount mkdir mktemp
    mpiexec mpirun mv nc nft nproc numactl nvidia-smi nvidia-persistenced ompi_info pip pip3 ping
    podman printenv ps python python3 readlink rm salloc sbatch scancel scontrol sed sinfo singularity
    apptainer squeue srun ss ssh ssh-add ssh-copy-id ssh-keygen ssh-keyscan stat sudo sysctl
    systemctl tail tee timeout torchrun touch tr ulimit uname umount which xargs yum zypper
    distdoctor nvcc update-alternatives clush pdsh dirname basename sort uniq wc cut column diff find
    sacct sacctmgr sshare sstat dpkg rpm conda mamba uv tc py-spy gdb strace bash sh
    firewall-cmd ufw rdma ibdev2netdev mst mlxconfig lsof fuser tracepath traceroute nslookup dig
    host resolvectl hostnamectl ethtool nvidia-bug-report.sh dcgmi pgrep pkill sminfo
    systemd-machine-id-setup perfquery ibdiagnet nvidia-modprobe compute-sanitizer fi_info kubectl
""".split())
BUILTINS = frozenset("""
    export unset cd source . echo printf test [ true false read umask type command hash wait trap
    exec eval ulimit alias if then else elif fi for while until do done case esac { } !
""".split())
# Commands that run another command given as their arguments, possibly elsewhere.
WRAPPERS = frozenset("sudo env timeout nohup exec command xargs srun mpirun mpiexec torchrun ssh time".split())
FIREWALLS = frozenset("nft iptables ip6tables firewall-cmd ufw".split())
# Arguments of these commands name files the fix creates.
CREATES = frozenset("mkdir touch tee cp mv ln install".split())
LOOPBACK_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include",
                 "OMPI_MCA_oob_tcp_if_include")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_PLACEHOLDER = re.compile(r"<[A-Za-z][^<>|;&]*>")
_ARITHMETIC = re.compile(r"\$\(\([^()]*\)\)")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"}
_REDIRECTS = {">", ">>", "<", "<<", ">&", "<&", ">|"}
_SSH_OPTS_WITH_ARG = set("bcDEeFIiJLlmOopQRSWw")


def _live_substitutions(line: str) -> list[re.Match]:
    """The $(...) of line that the shell runs: not those inside single quotes (a quoted value,
    `pip install 'torch==$(x)'`, is a word), escaped ones, or those in a trailing comment."""
    quoted = [False] * (len(line) + 1)
    single = double = escaped = False
    for i, ch in enumerate(line):
        if ch == "#" and not (single or double or escaped) and (i == 0 or line[i - 1] in " \t;&|("):
            quoted[i:] = [True] * (len(line) + 1 - i)  # a comment: nothing after it runs
            break
        quoted[i] = single or escaped
        if escaped:
            escaped = False
        elif ch == "\\" and not single:
            escaped = True
        elif ch == "'" and not double:
            single = not single
        elif ch == '"' and not single:
            double = not double
    return [m for m in _SUBSTITUTION.finditer(line) if not quoted[m.start()]]


def _lo_offered(var: str, value: str) -> bool:
    value = value.strip()
    if not value or value.startswith("^"):
        return False  # an exclusion list: ^lo is the right thing to write
    items = [item.split(":")[0] for item in value.lstrip("=").split(",")]
    if var.startswith("OMPI_MCA_"):
        return any(item == "lo" or item.startswith("127.") for item in items)
    # NCCL matches prefixes: "lo" and "l" select lo; "lo0" does too on BSD-style names.
    return any(item and ("lo".startswith(item) or re.fullmatch(r"lo\d*", item)) for item in items)


def _words(line: str) -> list[str] | str:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError as exc:
        return f"does not parse as shell ({exc})"


def _commands(words: list[str]) -> Iterable[list[str]]:
    """Simple commands, each with its redirections (`> FILE`, `</dev/tcp/...`) kept as the
    operator joined to its target, so a leading redirection is not read as the command."""
    current: list[str] = []
    pending_redirect = ""
    for word in words:
        if word in _SEPARATORS:
            if current:
                yield current
            current, pending_redirect = [], ""
        elif word in _REDIRECTS:
            pending_redirect += word
        elif pending_redirect:
            current.append(pending_redirect + word)
            pending_redirect = ""
        else:
            current.append(word)
    if current:
        yield current


def _strip_ssh(cmd: list[str]) -> tuple[str, list[str]]:
    """ssh [options] host command... -> (host, command)."""
    i = 1
    while i < len(cmd) and cmd[i].startswith("-"):
        opt = cmd[i]
        i += 2 if len(opt) == 2 and opt[1] in _SSH_OPTS_WITH_ARG else 1
    return (cmd[i] if i < len(cmd) else ""), cmd[i + 1:]


def _strip_clush(cmd: list[str]) -> tuple[str, list[str]]:
    """clush -w NODES [options] [--] command... -> (nodes, command)."""
    if "--" in cmd:
        head, rest = cmd[:cmd.index("--")], cmd[cmd.index("--") + 1:]
    else:
        head, i = cmd[:1], 1
        while i < len(cmd) and cmd[i].startswith("-"):
            i += 2 if cmd[i] in ("-w", "-x", "-g", "-X", "-l", "-t", "-u", "-f") else 1
        head, rest = cmd[:i], cmd[i:]
    nodes = head[head.index("-w") + 1] if "-w" in head[:-1] else ""
    return nodes, rest


def _paths(cmd: list[str]) -> Iterable[tuple[str, bool]]:
    """(absolute path, created by this command) for each path-looking word."""
    creates = bool(cmd) and cmd[0] in CREATES
    last = cmd[-1] if cmd else ""
    for i, word in enumerate(cmd):
        value = word
        m = _ASSIGNMENT.match(word)
        if m:
            value = m.group(2)
        elif word.startswith("--") and "=" in word:
            value = word.split("=", 1)[1]
        for part in value.split(":"):
            if not part.startswith("/") or part.startswith("//") or any(c in part for c in "$*?[<{`"):
                continue
            redirected = i > 0 and cmd[i - 1] in (">", ">>", "&>", "2>")
            made = redirected or (creates and (cmd[0] in ("mkdir", "touch", "tee") or word == last))
            yield part.rstrip("/") or "/", made


def _logical_lines(fix: str) -> list[str]:
    """Lines as the shell reads them: a backslash-newline or an open quote joins the next line."""
    lines: list[str] = []
    pending = ""
    for raw in fix.replace("\\\n", " ").splitlines():
        pending = f"{pending}\n{raw}" if pending else raw.strip()
        if pending.startswith("#") or not isinstance(_words(pending), str) \
                or "quotation" not in _words(pending):
            lines.append(pending)
            pending = ""
    if pending:
        lines.append(pending)
    return [line for line in lines if line]


def _made_here(path: str, created: set[str]) -> bool:
    return path in created or any(path.startswith(c + "/") for c in created)


def lint(fix: str, path_exists: Callable[[str], bool] | None = None, on_node: bool = False) -> list[str]:
    """Problems with one fix (empty: it pastes and runs as printed). path_exists answers for
    the node the fix is for; None skips the path rule. on_node: fix is the script an ssh or
    clush line runs on the nodes it names."""
    problems: list[str] = []
    created: set[str] = set()
    node_named = on_node
    for line in _logical_lines(fix):
        if not line:
            continue
        if line.startswith("#"):
            if re.match(r"#\s*(on|as root on)\s+\S", line):
                node_named = True
            continue
        if re.search(r"(?:^|[\s;&|])[A-Z_][A-Z0-9_]*==", line):
            problems.append(f"{line!r}: `NAME==value` reads as a typo; write NAME=value (or quote '=value' "
                            f"for an exact match)")
        if re.search(r"(>>?|\b(?:tee|touch|mkdir|cp|mv|ln|install)\b[^;&|]*)\s*[\"']?/(var/)?tmp/[A-Za-z0-9_.-]", line):
            problems.append(f"{line!r}: a fixed path under /tmp can be planted by another user; use mktemp")
        for placeholder in _PLACEHOLDER.findall(line.split(" #")[0]):
            problems.append(f"{line!r}: {placeholder} is a placeholder, not shell; print the value, or "
                            f"a command that finds it")
        line = _PLACEHOLDER.sub("PLACEHOLDER", line)
        # $((...)) is a number and $(...) a command of its own: lint it as one, then read the
        # substitution as one word of the line around it.
        line = _ARITHMETIC.sub("0", line)
        while (found := _live_substitutions(line)):
            for match in reversed(found):
                problems += lint(match.group(1), path_exists)
                line = line[:match.start()] + "SUBSTITUTION" + line[match.end():]
        words = _words(line)
        if isinstance(words, str):
            problems.append(f"{line!r}: {words}")
            continue
        for cmd in _commands(words):
            remote = on_node
            while cmd:
                while cmd and _ASSIGNMENT.match(cmd[0]):
                    name, value = _ASSIGNMENT.match(cmd[0]).groups()  # type: ignore[union-attr]
                    if name in LOOPBACK_VARS and _lo_offered(name, value):
                        problems.append(f"{line!r}: offers loopback in {name}; other nodes cannot reach lo")
                    if not remote and path_exists is not None:
                        for path, _made in _paths([cmd[0]]):
                            if not _made_here(path, created) and not path_exists(path):
                                problems.append(f"{line!r}: {path} does not exist")
                    cmd = cmd[1:]
                if not cmd:
                    break
                redirects = [w for w in cmd if w[:1] in "<>"]
                cmd = [w for w in cmd if w[:1] not in "<>"]
                if not cmd:
                    break
                head = cmd[0]
                for word in cmd[1:]:
                    m = _ASSIGNMENT.match(word)
                    if m and m.group(1) in LOOPBACK_VARS and _lo_offered(*m.groups()):
                        problems.append(f"{line!r}: offers loopback in {m.group(1)}; other nodes cannot reach lo")
                if not (head in COMMANDS or head in BUILTINS or head.startswith(("/", "./", "$"))):
                    problems.append(f"{line!r}: {head!r} is not a command; a fix is shell or a # comment")
                    break
                if head in ("export", "unset") and any(not re.fullmatch(r"[A-Za-z_]\w*(=.*)?", w, re.S)
                                                       for w in cmd[1:] if not w.startswith("-")):
                    problems.append(f"{line!r}: {head} takes NAME or NAME=value words")
                for path, made in _paths(cmd if head in CREATES else []):
                    if made:
                        created.add(path)
                created.update(w.lstrip("<>&0123456789") for w in redirects if w.startswith(">"))
                if head in ("export", "env"):
                    for path, _made in _paths([w for w in cmd[1:] if _ASSIGNMENT.match(w)]):
                        if not remote and path_exists is not None and not _made_here(path, created) \
                                and not path_exists(path):
                            problems.append(f"{line!r}: {path} does not exist")
                if head in FIREWALLS:
                    args = " ".join(cmd[1:])
                    if head == "nft" and re.match(r"add rule\b", args):
                        problems.append(f"{line!r}: nft add rule appends after the chain's drop rule and "
                                        f"changes nothing; use nft insert rule")
                    if head in ("iptables", "ip6tables") and re.search(r"(^|\s)(-A|--append)\b", args):
                        problems.append(f"{line!r}: iptables -A appends after the drop rule; use -I")
                    if not remote and not node_named:
                        problems.append(f"{line!r}: a firewall change must name its node "
                                        f"(ssh NODE ..., or a '# on NODE' line before it)")
                if head in ("bash", "sh") and len(cmd) >= 3 and cmd[1] == "-c":
                    problems += lint(cmd[2], None if remote else path_exists)
                    break
                if head in ("ssh", "clush"):
                    host, rest = _strip_ssh(cmd) if head == "ssh" else _strip_clush(cmd)
                    if not host:
                        problems.append(f"{line!r}: {head} without the node it is for")
                    remote = remote or bool(host)
                    cmd = rest
                    if len(rest) == 1 and " " in rest[0]:  # ssh host 'one; quoted; script'
                        problems += lint(rest[0], None, on_node=True)
                        break
                elif head in WRAPPERS and head not in ("srun", "mpirun", "mpiexec", "torchrun", "xargs"):
                    rest = cmd[1:]
                    while rest and rest[0].startswith("-"):
                        rest = rest[1:]
                    if head == "timeout" and rest:
                        rest = rest[1:]
                    cmd = rest
                else:
                    break
    return problems


def lint_record(fix: Fix, path_exists: Callable[[str], bool] | None = None) -> list[str]:
    """Problems with one record. Its nodes say where its commands run, so nothing is guessed
    from the printed lines: a record for nodes has its script linted as run there (no path of
    this machine asked about, no `# on NODE` needed before a firewall change); a record for here
    is linted as the lines it prints."""
    problems: list[str] = []
    if not fix:
        return [f"{fix!r}: a record with neither a command nor a comment"]
    if "\n" in fix.comment:
        problems.append(f"{fix.comment!r}: a comment is one line (the next would run as a command)")
    if not fix.nodes:
        return problems + lint(render(fix), path_exists)
    for command in fix.commands:
        if "\n" in command:
            problems.append(f"{command!r}: one command per step; a newline in it ends the script on the node")
        if command.lstrip().startswith("#"):
            problems.append(f"{command!r}: a comment among a node's commands comments out the steps joined "
                            f"after it; give it as the record's comment")
        words = _words(command)
        if not isinstance(words, str) and words and words[0] in ("ssh", "clush", "pdsh") \
                or command.startswith("srun -w"):
            problems.append(f"{command!r}: addressed twice: the record's nodes already say where it runs")
    return problems + lint(script(fix), on_node=True)


def lint_any(fix: str | Fix, path_exists: Callable[[str], bool] | None = None) -> list[str]:
    """A record, or a fix given as text (a pack's own, or a report's `fix`)."""
    return lint_record(fix, path_exists) if isinstance(fix, Fix) else lint(fix, path_exists)


def lint_all(fixes: Iterable[str | Fix], path_exists: Callable[[str], bool] | None = None) -> dict[str | Fix, list[str]]:
    """{fix: problems} for the fixes (records or text) that have any."""
    found: dict[str | Fix, list[str]] = {}
    for fix in fixes:
        if fix and fix not in found:
            problems = lint_any(fix, path_exists)
            if problems:
                found[fix] = problems
    return found


def _flagged(doc: dict) -> Iterable[tuple[str, str, str, str]]:
    """(check id, subject, fix, summary) of each finding at WARN or worse in a JSON report."""
    for run in doc.get("checks", []) if isinstance(doc, dict) else []:
        for finding in run.get("findings", []) if isinstance(run, dict) else []:
            if isinstance(finding, dict) and finding.get("status") in ("warn", "fail", "error", "timeout"):
                yield (str(run.get("id")), str(finding.get("subject", "")), str(finding.get("fix", "")),
                       str(finding.get("summary", "")))


def persisting(before: dict, after: dict, applied: Iterable[str]) -> list[str]:
    """A fix must make its own finding go away: after the fixes in `applied` (printed in the
    report `before`, run as printed) and a re-run (`after`), each finding they were printed for
    that is still flagged, with the same check and subject, is a problem."""
    applied = {fix.strip() for fix in applied if fix.strip()}
    still = {(check_id, subject): summary for check_id, subject, _fix, summary in _flagged(after)}
    problems = []
    for check_id, subject, fix, summary in _flagged(before):
        if fix.strip() in applied and (check_id, subject) in still:
            problems.append(f"{check_id} [{subject}]: {still[(check_id, subject)]!r} is still reported after "
                            f"its fix {fix.strip()!r} was applied (before: {summary!r})")
    return problems
