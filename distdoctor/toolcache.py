"""A cache of tool outputs that only change when the tool or its environment changes.

`ompi_info --parsable --all` takes 0.2-0.3 s (it loads every component) and answers the same
until Open MPI is reinstalled: on the critical path of `distdoctor check`, a second run reads
the answer from here. An entry is keyed on everything that can change the answer:

- the command line, and the binary's resolved path, size, mtime and inode;
- the files the answer is read from (`ldconfig -p` prints /etc/ld.so.cache), by the same stat;
- the environment variables the tool reads (OMPI_*, OPAL_PREFIX, PATH, LD_LIBRARY_PATH, ...);
- distdoctor's version and this format.

A changed binary, file or variable is a different key, so a stale answer is never read; old
entries are simply not found again (and pruned past MAX_ENTRIES). Only answers that ended in
time with exit code 0 are stored. The directory ($XDG_CACHE_HOME/distdoctor, else
~/.cache/distdoctor) is created 0700 and each entry written 0600 through a temp file and a
rename; an entry that cannot be read or parsed is a miss. `distdoctor check --no-cache` skips it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any, Iterable, Mapping, Sequence

FORMAT = 2  # 2: entries hold {"key", "value"}
MAX_ENTRIES = 200
# Variables that change what the cached tools print (Open MPI reads its MCA parameters and
# prefix from the environment; PATH and LD_LIBRARY_PATH pick the libraries and components).
ENV_PREFIXES = ("OMPI_", "OPAL_", "PMIX_MCA_", "PRTE_MCA_")
ENV_NAMES = ("PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "OPAL_PREFIX", "SLURM_CONF", "LANG", "LC_ALL")


def directory_for(env: Mapping[str, str], home: str) -> str:
    base = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "distdoctor")


def file_state(path: str) -> list[Any]:
    """What changes when a file is replaced or rewritten: its resolved path, size, mtime, inode."""
    try:
        st = os.stat(path)
    except OSError:
        return [path, None]
    return [os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino]


def relevant_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}


class ToolCache:
    def __init__(self, directory: str, version: str):
        self.directory = directory
        self.version = version

    def key(self, argv: Sequence[str], exe: str, env: Mapping[str, str], depends_on: Iterable[str] = ()) -> str:
        return self.key_for({"argv": list(argv), "exe": file_state(exe), "files": [file_state(p) for p in depends_on],
                             "env": relevant_env(env)})

    def key_for(self, material: Mapping[str, Any]) -> str:
        """The key of an answer that depends on exactly this (JSON-safe) material."""
        material = {**material, "format": FORMAT, "version": self.version}
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.json")

    def _private(self, path: str) -> bool:
        st = os.stat(path)
        return st.st_uid == os.getuid() and not st.st_mode & 0o077

    def has(self, key: str) -> bool:
        """Whether an entry is stored under key, without reading it (get() may still find it
        unusable)."""
        try:
            return self._private(self.directory) and self._private(self._path(key))
        except OSError:
            return False

    def get(self, key: str) -> dict[str, Any] | None:
        """A tool's stored answer: returncode, stdout, stderr; None on a miss."""
        entry = self.get_value(key)
        if not isinstance(entry, dict) or not isinstance(entry.get("stdout"), str) \
                or not isinstance(entry.get("stderr"), str) or not isinstance(entry.get("returncode"), int):
            return None
        return entry

    def put(self, key: str, returncode: int, stdout: str, stderr: str) -> None:
        self.put_value(key, {"returncode": returncode, "stdout": stdout, "stderr": stderr})

    def get_value(self, key: str) -> Any:
        """Any JSON value stored under key (the caller checks its shape); None on a miss."""
        try:
            if not self._private(self.directory):
                return None  # another user could have planted answers there
            with open(self._path(key), encoding="utf-8") as fh:
                if not self._private(self._path(key)):
                    return None
                entry = json.load(fh)
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        try:  # pruning drops the least recently used: an answer still read stays
            os.utime(self._path(key))
        except OSError:
            pass
        return entry.get("value")

    def put_value(self, key: str, value: Any) -> None:
        """Best effort: a cache that cannot be written costs the next run the tool's time."""
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            if not self._private(self.directory):
                return  # not ours alone: another user could plant answers there
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=self.directory)
        except OSError:
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:  # mkstemp creates it 0600
                json.dump({"key": key, "value": value}, fh)
            os.replace(tmp, self._path(key))
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
        self._prune()

    def _prune(self) -> None:
        try:
            entries = [e for e in os.scandir(self.directory) if e.name.endswith(".json")]
            if len(entries) <= MAX_ENTRIES:
                return
            entries.sort(key=lambda e: e.stat().st_mtime)
            for entry in entries[:len(entries) - MAX_ENTRIES]:
                os.unlink(entry.path)
        except OSError:
            pass
