"""The MPI, Horovod and ldconfig parsers: what their captures show beyond the golden runner's
comparison (tests/unit/core/test_golden.py compares every capture with its .parsed.json), and
the bad input a sick node produces."""

import gzip

import pytest

from distdoctor.parsers import ParseError
from distdoctor.parsers.horovod import parse_check_build
from distdoctor.parsers.ldconfig import parse_ldconfig_cache
from distdoctor.parsers.mpirun import parse_mpirun_version
from distdoctor.parsers.ompi_info import parse_ompi_info
from tests.conftest import data_path


def read(*parts):
    path = data_path(*parts)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return fh.read()


def test_hydra_details_keep_trailing_spaces_out_and_device():
    parsed = parse_mpirun_version(read("mpirun_version/mpiexec-version_mpich_4.1.2_source_build.txt"))
    assert parsed.details["CC"] == "gcc"
    assert parsed.details["Process Manager"] == "pmi"
    assert "--with-hwloc=embedded" in parsed.details["Configure options"]


def test_mvapich_recognised_in_hydra_banner():
    text = ("HYDRA build details:\n    Version:                                 3.2.1\n"
            "    Configure options:                       '--prefix=/opt/mvapich2-2.3.7' '--with-device=ch3:mrail'\n")
    assert parse_mpirun_version(text).implementation == "MVAPICH"


@pytest.mark.parametrize("text", ["", "mpirun: command not found\n", "HYDRA build details:\n    CC: gcc\n",
                                  "\x00\x01garbage"])
def test_mpirun_unknown_shapes_raise(text):
    with pytest.raises(ParseError) as info:
        parse_mpirun_version(text)
    assert info.value.tool == "mpirun"


def test_ompi_info_all_has_both_cuda_keys_and_components():
    info = parse_ompi_info(read("lab_mpi/ompi_info_parsable_all.txt.gz"))
    assert info.cuda_keys == {"opal_built_with_cuda_support": False, "mpi_built_with_cuda_support": False}
    assert info.components["btl"] == ("ofi", "openib", "tcp", "vader", "self")
    assert "ucx" in info.components["pml"]


def test_ompi_info_human_synonym_gives_mpi_key():
    info = parse_ompi_info(read("ompi_info/ompi_info-a_grep_cuda_opal_base_params_false.txt"))
    assert info.cuda_keys == {"opal_built_with_cuda_support": False, "mpi_built_with_cuda_support": False}


def test_ompi_info_human_wrapped_lines():
    info = parse_ompi_info(read("ompi_info/ompi_info_4.1.6_cuda_ucx_gcp_4xT4.txt"))
    assert info.configure_options == "'--with-cuda=/usr/local/cuda/' '--with-ucx=/usr/local/'"
    assert "smcuda" in info.components["btl"] and "cuda" in info.components["coll"]
    assert "monitoring" in info.components["coll"]  # its "Component v4.1.6)" wrapped onto the next line


def test_ompi_info_lab_cuda_grep_without_comment_lines():
    text = "".join(line for line in read("lab_mpi/ompi_info_cuda.txt").splitlines(True) if not line.startswith("#"))
    info = parse_ompi_info(text)
    assert info.cuda_support is False and "cuda" in info.mpi_extensions


@pytest.mark.parametrize("text", ["", "mca:mpi:base:param:mpi_built_with_cuda_support:value:maybe\n",
                                  "ompi:version:full:4.1.4\n   garbage in the middle\n", "\x00\x00\n"])
def test_ompi_info_unknown_shapes_raise(text):
    with pytest.raises(ParseError) as info:
        parse_ompi_info(text)
    assert info.value.tool == "ompi_info"


def test_horovod_built_lists_the_checked_boxes_in_printed_order():
    build = parse_check_build(read("horovod_check_build", "horovod-0.28.1_pytorch_only_trailing_space.txt"))
    assert build.built("frameworks") == ["PyTorch"] and build.built("operations") == ["NCCL", "MPI", "Gloo"]


@pytest.mark.parametrize("text", ["", "Traceback (most recent call last):\n  File x\nImportError: y\n",
                                  "    [X] NCCL\n", "Horovod v0.28.1:\n\nAvailable Frameworks:\n    [X] PyTorch\nboom\n"])
def test_horovod_unknown_shapes_raise(text):
    with pytest.raises(ParseError) as info:
        parse_check_build(text)
    assert info.value.tool == "horovodrun"


def test_ldconfig_cache_debian12():
    entries = parse_ldconfig_cache(read("ldconfig_p_debian12.txt"))
    header = read("ldconfig_p_debian12.txt").splitlines()[0]
    assert len(entries) == int(header.split()[0])
    mpi = [e for e in entries if e.name == "libmpi.so.40"]
    assert mpi and mpi[0].path.endswith("libmpi.so.40") and mpi[0].flags == "libc6,x86-64"


def test_ldconfig_hwcap_entries_and_garbage():
    entries = parse_ldconfig_cache("2 libs found in cache `/etc/ld.so.cache'\n"
                                   "\tlibnccl.so.2 (libc6,x86-64, OS ABI: Linux 3.2.0) => /usr/lib/libnccl.so.2\n"
                                   "\tlibfoo.so.1 (libc6,x86-64, hwcap: 0x0000000000000004) => /opt/foo/libfoo.so.1\n")
    assert [(e.name, e.path) for e in entries] == [("libnccl.so.2", "/usr/lib/libnccl.so.2"),
                                                    ("libfoo.so.1", "/opt/foo/libfoo.so.1")]
    with pytest.raises(ParseError):
        parse_ldconfig_cache("ldconfig: Can't open cache file /etc/ld.so.cache\n: No such file or directory\n")
