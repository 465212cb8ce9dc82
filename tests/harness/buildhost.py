"""FakeHost pieces for the build checks: captured launcher outputs, pip distributions, and a
stand-in for the NCCL probe subprocess that answers per library."""

from __future__ import annotations

import ast
import json
import re

from distdoctor.host import CommandResult, Distribution
from distdoctor.testing import FakeHost, fixture_text
from tests.conftest import data_path

OMPI_VERSION = fixture_text(data_path("lab_mpi", "mpirun_version.txt"))
OMPI_MPIEXEC = "mpiexec (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
MPICH_VERSION = fixture_text(data_path("lab_mpi", "mpiexec.mpich_version.txt"))
INTEL_VERSION = fixture_text(data_path("mpirun_version", "mpiexec-version_intelmpi_2021.8_apptainer.txt"))
GPU_DIRS = {"/proc/driver/nvidia/gpus": ["0000:07:00.0", "0000:0f:00.0"]}


def nccl_package(name: str, version: str, location: str = "/venv/lib/python3.11/site-packages") -> Distribution:
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    return Distribution(name, version, location, ("nvidia/nccl/include/nccl.h", "nvidia/nccl/lib/libnccl.so.2",
                                                  f"{dist_info}/METADATA"))


def torch_package(version: str, requires: str = "", cmake_defines: str | None = "USE_DISTRIBUTED;USE_C10D_GLOO",
                  location: str = "/venv/lib/python3.11/site-packages") -> tuple[Distribution, dict[str, str]]:
    """torch's distribution and the files the build facts read: METADATA and Caffe2Targets.cmake."""
    info = f"torch-{version}.dist-info/METADATA"
    files = {f"{location}/{info}": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n{requires}"}
    if cmake_defines is not None:
        files[f"{location}/torch/share/cmake/Caffe2/Caffe2Targets.cmake"] = (
            'set_target_properties(torch_cpu PROPERTIES\n'
            f'  INTERFACE_COMPILE_DEFINITIONS "{cmake_defines}"\n)\n')
    return Distribution("torch", version, location, (info, "torch/__init__.py")), files


def nccl_probe(answers: dict[str, object]):
    """A stand-in for `python -c <NCCL probe>`: answers[target] is a version code, an error
    string, "crash" or "hang"; "file" entries name what dlopen resolved to."""
    def run(argv):
        code = argv[-1]
        literal = re.search(r"targets = json\.loads\((.*)\)\n", code)
        if not literal:
            return CommandResult(tuple(argv), 0, "")
        targets = json.loads(ast.literal_eval(literal.group(1)))
        out = []
        for index, target in enumerate(targets):
            out.append(f"@@dd-begin {index}")
            answer = answers.get(target, "cannot load: not found")
            if answer == "crash":
                return CommandResult(tuple(argv), -11, "\n".join(out) + "\n", "")
            if answer == "hang":
                return CommandResult(tuple(argv), None, "\n".join(out) + "\n", "", 20.0, True)
            result = {"target": target}
            if isinstance(answer, tuple):
                result["code"], result["file"] = answer
            elif isinstance(answer, int):
                result["code"], result["file"] = answer, target
            else:
                result["error"] = answer
            out.append("@@dd-result " + json.dumps(result))
        return CommandResult(tuple(argv), 0, "\n".join(out) + "\n", "")
    return run


def build_host(commands=None, python=None, **kw) -> FakeHost:
    cmds = dict(commands or {})
    if python is not None:
        cmds["python"] = python
    return FakeHost(commands=cmds, **kw)
