"""Apply a printed fix as printed, so that a test can re-run and see the finding gone.

Environment fixes (`export NAME=value`, `unset NAME`) are run by bash and the environment they
leave is read back: the exact text the user would paste, not a parse of it. Commands for a node
(`ssh node2 ip link set ...`, `# as root on node1` followed by commands) are run in that node's
namespace by the caller's `on(node)` prefix, with the `ssh NODE` wrapper taken off (the test's
nodes are namespaces, not ssh hosts)."""

from __future__ import annotations

import re
import shlex
import subprocess
from typing import Callable, Mapping, Sequence

from distdoctor import fixlint


def env_after(fix: str, env: Mapping[str, str]) -> dict[str, str]:
    """The environment `fix`, run by bash from `env`, leaves."""
    done = subprocess.run(["bash", "-c", f"{fix}\nenv -0"], env=dict(env), capture_output=True, timeout=30)
    assert done.returncode == 0, (fix, done.stderr.decode(errors="replace"))
    pairs = (item.split(b"=", 1) for item in done.stdout.split(b"\0") if b"=" in item)
    out = {k.decode(): v.decode(errors="replace") for k, v in pairs}
    for noise in ("PWD", "SHLVL", "_", "OLDPWD"):
        if noise not in env:
            out.pop(noise, None)
    return out


def run_on_nodes(fix: str, on: Callable[[str], Sequence[str]], here: str) -> list[subprocess.CompletedProcess]:
    """Run each command line of `fix` where it says: `ssh NODE cmd...` on NODE, a block under
    `# as root on NODE` / `# on NODE` on NODE, anything else on `here`. Comments are skipped."""
    done = []
    node = here
    for line in fix.splitlines():
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            named = re.match(r"#\s*(?:as root )?on ([A-Za-z0-9._-]+)[:,]", text)
            if named:
                node = named.group(1)
            continue
        argv = shlex.split(text, comments=True)
        target = node
        if argv and argv[0] == "ssh":
            argv = argv[1:]
            while argv and argv[0].startswith("-"):
                argv = argv[2:] if argv[0] in ("-p", "-o", "-i", "-l") else argv[1:]
            target, argv = argv[0], argv[1:]
            if len(argv) == 1:
                argv = ["sh", "-c", argv[0]]
        proc = subprocess.run([*on(target), "sh", "-c", shlex.join(argv)] if argv and argv[0] != "sh" else
                              [*on(target), *argv], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, (target, text, proc.stderr)
        done.append(proc)
    return done


def assert_cleared(before: dict, after: dict, applied: Sequence[str]) -> None:
    problems = fixlint.persisting(before, after, applied)
    assert not problems, "\n".join(problems)
