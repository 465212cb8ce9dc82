"""`ompi_info` in its parsable (`--parsable`, colon-separated) and human (right-aligned
`Key: value`) forms, whole or grep-filtered.

CUDA support is read only from `opal_built_with_cuda_support` / `mpi_built_with_cuda_support`
(printed with `--all`). The `cuda` entry in the MPI extensions list is not evidence: builds
without CUDA list it too (Debian's 4.1.4 does). The configure line and CUDA-only components
(btl smcuda, coll cuda) are kept as a hint for outputs that lack the keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from distdoctor.parsers import ParseError

CUDA_KEYS = ("mpi_built_with_cuda_support", "opal_built_with_cuda_support")

_PARSABLE = re.compile(r"^[a-z][a-z0-9_-]*:(?! )")
_HUMAN = re.compile(r"^(?P<indent>\s*)(?P<key>[^\s:][^:]*?): ?(?P<value>.*)$")
_HUMAN_PARAM = re.compile(r'^MCA (?P<fw>\S+) (?P<comp>\S+)$')
_HUMAN_PARAM_VALUE = re.compile(r'^(?:informational|parameter) "(?P<name>[^"]+)" \(current value: "(?P<value>[^"]*)"')
_COMPONENT = re.compile(r"^(?P<name>\S+) \(MCA v")
_CUDA_COMPONENTS = {("btl", "smcuda"), ("coll", "cuda"), ("rcache", "gpusm"), ("rcache", "rgpusm")}


@dataclass(frozen=True)
class OmpiInfo:
    format: str  # "parsable" or "human"
    version: str | None = None
    cuda_keys: dict[str, bool] = field(default_factory=dict)
    mpi_extensions: tuple[str, ...] = ()
    configure_options: str | None = None
    components: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def cuda_support(self) -> bool | None:
        """The build's CUDA support, or None when the output does not carry the keys."""
        for key in CUDA_KEYS:
            if key in self.cuda_keys:
                return self.cuda_keys[key]
        return None

    @property
    def cuda_hint(self) -> bool:
        """Signs of a CUDA build that are not the authoritative keys."""
        configured = "--with-cuda" in (self.configure_options or "") and "--with-cuda=no" not in (self.configure_options or "")
        return configured or any(comp in self.components.get(fw, ()) for fw, comp in _CUDA_COMPONENTS)


def _bool(value: str, number: int, line: str) -> bool:
    if value.strip().lower() in ("true", "1", "yes"):
        return True
    if value.strip().lower() in ("false", "0", "no"):
        return False
    raise ParseError("ompi_info", f"expected true/false, got {value!r}", number, line)


def parse_ompi_info(text: str) -> OmpiInfo:
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise ParseError("ompi_info", "empty output")
    if _PARSABLE.match(first):
        return _parsable(lines)
    if _HUMAN.match(first):
        return _human(lines)
    raise ParseError("ompi_info", "neither --parsable nor the default key/value layout", 1, first)


def _parsable(lines: list[str]) -> OmpiInfo:
    version = None
    cuda: dict[str, bool] = {}
    extensions: tuple[str, ...] = ()
    components: dict[str, list[str]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not _PARSABLE.match(line):
            raise ParseError("ompi_info", "not a --parsable line", number, line)
        parts = line.split(":")
        if parts[:3] == ["ompi", "version", "full"]:
            version = ":".join(parts[3:])
        elif parts[:2] == ["options", "mpi_ext"]:
            extensions = tuple(e.strip() for e in ":".join(parts[2:]).split(",") if e.strip())
        elif parts[0] == "mca" and len(parts) >= 7 and parts[3] == "param" and parts[4] in CUDA_KEYS \
                and parts[5] == "value":
            cuda[parts[4]] = _bool(parts[6], number, line)
        elif parts[0] == "mca" and len(parts) >= 4 and parts[3] == "version" and parts[2] != "base":
            names = components.setdefault(parts[1], [])
            if parts[2] not in names:
                names.append(parts[2])
    return OmpiInfo("parsable", version, cuda, extensions, None,
                    {k: tuple(v) for k, v in components.items()})


def _human(lines: list[str]) -> OmpiInfo:
    version = None
    cuda: dict[str, bool] = {}
    extensions: tuple[str, ...] = ()
    configure: list[str] | None = None
    components: dict[str, list[str]] = {}
    value_column = None
    last_key = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if value_column is not None and indent >= value_column:
            # a wrapped value (long configure lines, "Component v4.1.6)") continues the last key
            if last_key == "Configure command line" and configure is not None:
                configure.append(line.strip())
            continue
        m = _HUMAN.match(line)
        if not m:
            raise ParseError("ompi_info", "not a 'Key: value' line", number, line)
        key, value = m["key"].strip(), m["value"].strip()
        value_column = len(m["indent"]) + len(m["key"]) + 2
        last_key = key
        if key == "Open MPI":
            version = value
        elif key == "MPI extensions":
            extensions = tuple(e.strip() for e in value.split(",") if e.strip())
        elif key == "Configure command line":
            configure = [value]
        elif pm := _HUMAN_PARAM.match(key):
            if pv := _HUMAN_PARAM_VALUE.match(value):
                if pv["name"] in CUDA_KEYS:
                    cuda[pv["name"]] = _bool(pv["value"], number, line)
                for synonym in re.findall(r"synonyms?: ([\w, ]+)", value):
                    for name in synonym.replace(",", " ").split():
                        if name in CUDA_KEYS and pv["name"] in CUDA_KEYS:
                            cuda.setdefault(name, cuda[pv["name"]])
            elif cm := _COMPONENT.match(value):
                names = components.setdefault(pm["fw"], [])
                if cm["name"] not in names:
                    names.append(cm["name"])
        elif key.startswith("MCA ") and (cm := _COMPONENT.match(value)):
            names = components.setdefault(key[4:].strip(), [])
            if cm["name"] not in names:
                names.append(cm["name"])
    return OmpiInfo("human", version, cuda, extensions, " ".join(configure) if configure else None,
                    {k: tuple(v) for k, v in components.items()})
