"""Ask the real NCCL library which interface it picks, for many settings at once.

Run as a script inside a network namespace:

    ip netns exec NS python nccl_oracle.py /path/libnccl.so.2 '[{"NCCL_SOCKET_IFNAME": "^lo"}, {}]'

It prints one JSON object per settings dict, in order: {"rc", "interface", "address", "log"}.
`ncclGetUniqueId` runs NCCL's bootstrap interface selection without a GPU and caches it for
the life of the process, so each settings dict gets its own forked child. The children run in
parallel: the whole matrix costs about one library load.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile

# NCCL >= 2.25 writes "Bootstrap: Using"; older releases "Bootstrap : Using".
_USING = re.compile(r"Bootstrap ?: Using (?P<if>[^:\s]+):(?P<addr>\S+?)<\d+>")
# Variables that change NCCL's choice: the children must not inherit them from the test run.
_CLEARED = ("NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_COMM_ID", "NCCL_CONF_FILE", "NCCL_DEBUG_FILE",
            "NCCL_DEBUG_SUBSYS")


def _child(lib: str, settings: dict, log_path: str) -> None:
    import ctypes

    for name in _CLEARED:
        os.environ.pop(name, None)
    os.environ.update(settings)
    os.environ["NCCL_DEBUG"] = "INFO"
    os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,BOOTSTRAP,NET,ENV"
    # NCCL reads ~/.nccl.conf when NCCL_CONF_FILE is unset: point HOME at an empty place so
    # only the settings under test count.
    os.environ.setdefault("HOME", os.path.dirname(log_path))
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    nccl = ctypes.CDLL(lib)
    uid = ctypes.create_string_buffer(128)
    rc = nccl.ncclGetUniqueId(uid)
    # NCCL logs through C stdio, buffered when stdout is a file; os._exit would drop it.
    ctypes.CDLL(None).fflush(None)
    sys.stdout.write(f"\nORACLE-RC={rc}\n")
    sys.stdout.flush()
    os._exit(0)


def run(lib: str, matrix: list[dict]) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory(prefix="dd-nccl-oracle-") as tmp:
        children = []
        for i, settings in enumerate(matrix):
            log_path = os.path.join(tmp, f"{i}.log")
            pid = os.fork()
            if pid == 0:
                try:
                    os.environ["HOME"] = tmp
                    _child(lib, settings, log_path)
                finally:
                    os._exit(3)
            children.append((pid, log_path))
        for pid, log_path in children:
            os.waitpid(pid, 0)
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                log = fh.read()
            rc = re.search(r"ORACLE-RC=(\d+)", log)
            using = _USING.search(log)
            results.append({
                "rc": int(rc.group(1)) if rc else None,
                "interface": using.group("if") if using else None,
                "address": using.group("addr") if using else None,
                "log": [line for line in log.splitlines() if "NCCL" in line and ("WARN" in line or "Using" in line)],
            })
    return results


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.loads(sys.argv[2]))))
