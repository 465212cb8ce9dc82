"""The Python environment: installed distributions (read cheaply, without importlib.metadata), the interpreter and platform."""

from __future__ import annotations

import os
import platform
import re
import sys
from typing import Iterator, Mapping


from distdoctor.host.results import Distribution



# Installed distributions are found the way importlib.metadata's path finder finds them (the
# first *.dist-info on sys.path whose name before the first '-' normalizes to the one asked
# for), by a listing: importing importlib.metadata pulls in the email package, a fifth of a
# warm `distdoctor check`. Anything a listing cannot answer alike (an .egg-info or .egg, a zip
# on sys.path) is asked of importlib.metadata itself.
_DIST_SUFFIXES = (".dist-info", ".egg-info", ".egg")
_ASK_METADATA = object()


_DIST_INFO = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._]*?)-([0-9][^-]*?)\.(?:dist-info|egg-info)$")


class PythonEnv:
    env: Mapping[str, str]

    def distribution(self, name: str) -> Distribution | None:
        """An installed Python distribution, read from its metadata (no import)."""
        found = _dist_info(name)
        if found is _ASK_METADATA:
            dist = _metadata_distribution(name)
            if dist is None:
                return None
            files = tuple(str(f) for f in (dist.files or ()))
            return Distribution(dist.metadata["Name"] or name, dist.version, str(dist.locate_file("")), files)
        if found is None:
            return None
        location, folder = found
        headers = _metadata_headers(_read_text(os.path.join(folder, "METADATA")))
        return Distribution(headers.get("name") or name, headers.get("version", ""), location,
                            _record_paths(_read_text(os.path.join(folder, "RECORD"))))

    def distribution_names(self) -> list[str]:
        """Normalized names (nvidia_nccl_cu13) of every installed Python distribution, taken
        from the .dist-info folder names: reading each METADATA instead costs 0.1 s on a
        site-packages of a hundred packages, most of `distdoctor check`'s budget."""
        names = set()
        for folder, entry in metadata_folders():
            if entry is not None:
                names.add(normalize_name(_dist_stem(entry)))
                continue
            from importlib import metadata  # a zip on sys.path: only importlib.metadata sees into it

            for dist in metadata.distributions(path=[folder]):
                names.add(normalize_name(getattr(dist, "_normalized_name", None) or (dist.metadata["Name"] or "")))
        return sorted(n for n in names if n)

    def python_version(self) -> str:
        return ".".join(str(v) for v in sys.version_info[:3])

    def distribution_versions(self) -> dict[str, str]:
        """{normalized name: version} of every installed distribution, read from the
        `name-version.dist-info` folder names on sys.path (a listing, not a METADATA read per
        package). The first folder on the path wins, as for an import."""
        found: dict[str, str] = {}
        for _folder, entry in metadata_folders():
            m = _DIST_INFO.match(entry or "")
            if m:
                found.setdefault(normalize_name(m.group(1)), m.group(2))
        return found

    def python_executable(self) -> str:
        return sys.executable

    def platform_info(self) -> dict[str, str]:
        """uname, the C library and Python's platform string (what collect_env prints)."""
        uname = platform.uname()
        libc, libc_version = platform.libc_ver()
        return {"system": uname.system, "release": uname.release, "version": uname.version,
                "machine": uname.machine, "libc": f"{libc}-{libc_version}" if libc else "",
                "platform": platform.platform(),
                "python_implementation": platform.python_implementation()}

    def distribution_metadata(self, name: str) -> tuple[str, str, str] | None:
        """(version, location, METADATA text) of an installed distribution, without reading
        its file list: torch's RECORD has 15,000 lines and costs 0.1 s to parse."""
        found = _dist_info(name)
        if found is _ASK_METADATA:
            dist = _metadata_distribution(name)
            if dist is None:
                return None
            return dist.version, str(dist.locate_file("")), dist.read_text("METADATA") or ""
        if found is None:
            return None
        location, folder = found
        text = _read_text(os.path.join(folder, "METADATA"))
        return _metadata_headers(text).get("version", ""), location, text


def _metadata_distribution(name: str):
    from importlib import metadata

    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def normalize_name(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_stem(entry: str) -> str:
    return entry.rpartition(".")[0].partition("-")[0]


def metadata_folders() -> Iterator[tuple[str, str | None]]:
    """(sys.path folder, entry) for every *.dist-info, *.egg-info and *.egg in the sys.path
    folders, in path order (entries sorted within a folder); (path, None) for a sys.path entry
    that is a file, a zip that only importlib.metadata reads. Read anew on every call: a
    test, or a pip run beside a long check, may install something."""
    for folder in sys.path:
        if not isinstance(folder, str):  # a Path a sitecustomize added: importlib.metadata skips it too
            continue
        path = folder or "."
        try:
            entries = sorted(os.listdir(path))
        except NotADirectoryError:
            yield path, None
            continue
        except OSError:
            continue
        for entry in entries:
            if entry.lower().endswith(_DIST_SUFFIXES):
                yield path, entry


def _dist_info(name: str):
    """(sys.path folder, its *.dist-info folder) for name, None when not installed, or
    _ASK_METADATA."""
    want = normalize_name(name)
    for path, entry in metadata_folders():
        if entry is None:
            return _ASK_METADATA
        if normalize_name(_dist_stem(entry)) == want:
            if not entry.lower().endswith(".dist-info"):
                return _ASK_METADATA
            return os.path.abspath(path), os.path.join(os.path.abspath(path), entry)
    return None


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _metadata_headers(text: str) -> dict[str, str]:
    """Name and Version from a METADATA file's header block (lower-cased keys, first wins)."""
    headers: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the description follows the first blank line
        key, sep, value = line.partition(":")
        if sep and not line[:1].isspace() and key.lower() in ("name", "version"):
            headers.setdefault(key.lower(), value.strip())
    return headers


def _record_paths(text: str) -> tuple[str, ...]:
    """The paths a RECORD file lists; what follows a line csv refuses (a field over its limit) is
    left out, as an unreadable RECORD is: the distribution is still found."""
    import csv

    paths: list[str] = []
    try:
        for row in csv.reader(text.splitlines()):
            if row:
                paths.append(row[0])
    except csv.Error:
        pass
    return tuple(paths)

