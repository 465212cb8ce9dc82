"""The README's two Quick start commands, and the Python they must work on.

    python3 .ci/quickstart.py install          # the command that installs and runs `check`
    python3 .ci/quickstart.py test-head        # the test command up to the suite itself
    python3 .ci/quickstart.py managed-python   # a system python3 that refuses `pip install`, or nothing

.ci/run runs the test command's head verbatim with `python3` being the managed Python when the
machine has one (Debian 12's and Ubuntu 24.04's /usr/bin/python3 carry PEP 668's
EXTERNALLY-MANAGED marker), then the suite in the venv it made; .ci/test_layouts.py runs the
install command the same way. Only the standard library: it runs before any venv exists.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = " && .venv/bin/pytest"


def commands(readme: str = os.path.join(REPO, "README.md")) -> list[str]:
    with open(readme, encoding="utf-8") as fh:
        quick_start = fh.read().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```console\n(.*?)\n```", quick_start, re.S)


def test_head(test_command: str) -> str:
    """The test command up to the suite, which .ci/run starts itself (with --durations)."""
    head, sep, rest = test_command.partition(SUITE)
    if not sep or rest:
        raise ValueError(f"the README's test command does not end with{SUITE}: {test_command!r}")
    return head


def managed_python() -> str | None:
    for path in ["/usr/bin/python3", *sorted(glob.glob("/usr/bin/python3.[0-9]*"))]:
        if not os.access(path, os.X_OK):
            continue
        stdlib = subprocess.run([path, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
        if stdlib and os.path.isfile(os.path.join(stdlib, "EXTERNALLY-MANAGED")):
            return path
    return None


def main(argv: list[str]) -> int:
    what = argv[1] if len(argv) == 2 else ""
    if what == "install":
        print(commands()[0])
    elif what == "test-head":
        print(test_head(commands()[1]))
    elif what == "managed-python":
        print(managed_python() or "")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
