"""The nvidia-smi and torch/version.py parsers: the shapes the captures show beyond the golden
runner's comparison (tests/unit/core/test_golden.py), and the bad input a sick node produces."""


import pytest

from distdoctor.parsers import ParseError
from distdoctor.parsers.nvidia_smi import (
    BASIC_QUERY_FIELDS, link_rank, parse_cpu_list, parse_list_gpus, parse_query_gpu, parse_table,
    parse_topo_matrix,
)
from distdoctor.parsers.torch_version import parse_version_py
from distdoctor.testing import fixture_text
from tests.conftest import data_path

def test_topo_legacy_soc_reads_as_sys():
    m = parse_topo_matrix(fixture_text(data_path("nvidia_smi_topo", "topo_nimbix_2xK80_mlx5_SOC_legacy.txt")))
    assert m.link("GPU0", "GPU2") == "SYS"
    assert m.link("GPU2", "mlx5_0") == "PHB"
    assert any("SOC" in n for n in m.notes)
    assert m.legend["SOC"].startswith("Connection traversing PCIe")


def test_topo_nic_legend_and_numa():
    m = parse_topo_matrix(fixture_text(data_path("nvidia_smi_topo", "topo_dgxa100_40g_10nic_tabs_numa_affinity.txt")))
    assert m.nic_legend["NIC9"] == "mlx5_9"
    assert m.device("GPU4").numa_node == 7
    assert m.device("GPU4").cpus[:2] == (112, 113) and len(m.device("GPU4").cpus) == 32
    assert m.link("GPU6", "NIC7") == "PXB" and m.link("NIC8", "NIC9") == "PIX"


def test_topo_affinity_with_single_space():
    m = parse_topo_matrix(fixture_text(data_path("nvidia_smi_topo", "topo_hgxa100_pleiades_mlx5_0_named_col_8numa.txt")))
    assert (m.device("GPU4").cpu_affinity, m.device("GPU4").numa_node) == ("112-127", 7)


def test_topo_embedded_and_indented_in_other_output():
    original = fixture_text(data_path("nvidia_smi_topo", "topo_8xH100_NV18_8nic_gpu_numa_id.txt"))
    embedded = ("Python: 3.10.12\nCUDA available: True\nGPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3\n"
                "NVIDIA Topology: \n" + "".join("\t" + line + "\n" for line in original.splitlines())
                + "\nulimit soft: 1048576\n")
    a, b = parse_topo_matrix(original), parse_topo_matrix(embedded)
    assert a.links == b.links and a.devices == b.devices and b.nic_legend["NIC7"] == "mlx5_7"


def test_topo_prose_starting_with_gpu0_above_the_matrix():
    original = fixture_text(data_path("nvidia_smi_topo", "topo_4xA10_allSYS_2nic.txt"))
    m = parse_topo_matrix("GPU0 was reset at 03:12 (Xid 79)\n" + original)
    assert m.links == parse_topo_matrix(original).links


def test_topo_single_gpu():
    m = parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-63\t0\t\tN/A\n")
    assert [g.label for g in m.gpus] == ["GPU0"] and m.links == {}
    assert m.gpus[0].cpus == tuple(range(64)) and m.gpus[0].gpu_numa_id == "N/A"


def test_topo_nic_legend_with_more_nics_than_columns():
    text = fixture_text(data_path("nvidia_smi_topo", "topo_2xRTX6000Ada_workstation_PHB_2nic.txt")) + "  NIC2: mlx5_2\n"
    m = parse_topo_matrix(text)
    assert [n.name for n in m.nics] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert m.link("GPU0", "NIC2") is None
    assert any("NIC2 (mlx5_2)" in n for n in m.notes)


def test_topo_na_affinity():
    text = ("        GPU0    GPU1    CPU Affinity    NUMA Affinity\n"
            "GPU0     X      NV2     N/A     N/A\nGPU1    NV2      X      N/A     N/A\n")
    m = parse_topo_matrix(text)
    assert m.gpus[0].cpus == () and m.gpus[0].numa_node is None and m.link("GPU0", "GPU1") == "NV2"


def test_link_rank_order():
    words = ["SYS", "NV12", "PHB", "NODE", "PIX", "PXB", "SOC"]
    assert sorted(words, key=link_rank) == ["NV12", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC"]
    assert link_rank("C2C") > link_rank("SYS")


def test_cpu_list():
    assert parse_cpu_list("0-2,8") == (0, 1, 2, 8)
    assert parse_cpu_list("N/A") == () and parse_cpu_list(None) == ()


H100 = data_path("nvidia_smi_topo", "topo_8xH100_NV18_8nic_gpu_numa_id.txt")


def test_topo_truncated_inside_gpu_rows():
    lines = fixture_text(H100).splitlines()
    with pytest.raises(ParseError) as info:
        parse_topo_matrix("\n".join(lines[:4]) + "\n")
    assert "GPU3" in str(info.value) and "truncated" in str(info.value)


def test_topo_truncated_after_gpu_rows_keeps_gpu_nic_links():
    lines = fixture_text(H100).splitlines()
    m = parse_topo_matrix("\n".join(lines[:11]) + "\n")  # header, 8 GPU rows, NIC0, NIC1
    assert m.link("GPU7", "NIC7") == "PIX" and len(m.gpus) == 8
    assert any("NIC2" in n and "missing" in n for n in m.notes)


def test_topo_cut_mid_row_is_ragged():
    lines = fixture_text(H100).splitlines()
    with pytest.raises(ParseError) as info:
        parse_topo_matrix("\n".join(lines[:3]) + "\n" + lines[3][:30] + "\n")
    assert info.value.line == 4 and "GPU2" in str(info.value)


def test_topo_ragged_column_misalignment():
    lines = fixture_text(H100).splitlines()
    lines[2] = lines[2].replace("NV18     X", " X", 1)  # GPU1 row loses a cell: X shifts left
    with pytest.raises(ParseError) as info:
        parse_topo_matrix("\n".join(lines))
    assert info.value.line == 3


def test_topo_unknown_link_word():
    text = fixture_text(H100).replace("NV18", "C2C", 1)
    m = parse_topo_matrix(text)
    assert m.unknown_words == ("C2C",) and m.link("GPU0", "GPU1") == "C2C"


def test_topo_non_utf8_bytes():
    raw = open(H100, "rb").read().replace(b"NODE", b"N\xffDE", 1)
    m = parse_topo_matrix(raw.decode("utf-8", "replace"))
    assert m.unknown_words == ("N\ufffdDE",)


@pytest.mark.parametrize("text", ["", "\n\n", "No devices were found\n", "GPU0\tGPU1\n"])
def test_topo_empty_or_garbage(text):
    with pytest.raises(ParseError):
        parse_topo_matrix(text)


def test_table_without_header_is_an_error():
    with pytest.raises(ParseError):
        parse_table("Failed to initialize NVML: Unknown Error\n")


def test_list_error_lines_are_kept():
    text = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n"
            "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n")
    listed = parse_list_gpus(text)
    assert len(listed.gpus) == 1 and "3B:00.0" in listed.errors[0]
    with pytest.raises(ParseError):
        parse_list_gpus("")


def test_query_gpu_rows():
    text = ("0, NVIDIA H100 80GB HBM3, GPU-aaaa, 00000000:18:00.0, 81559, Enabled, Disabled, 0, 0x0000000000000000\n"
            "1, NVIDIA A10, GPU-bbbb, 00000000:2A:00.0, 23028, Disabled, [N/A], [N/A], 0x0000000000000048\n")
    a, b = parse_query_gpu(text)
    assert (a.index, a.memory_total_mib, a.persistence_mode, a.mig_mode, a.ecc_uncorrected, a.throttle_reasons) == \
        (0, 81559, True, False, 0, 0)
    assert (b.persistence_mode, b.mig_mode, b.ecc_uncorrected, b.throttle_reasons) == (False, None, None, 0x48)
    basic = parse_query_gpu("3, Tesla K80, GPU-cccc, 0000:05:00.0, 11441, Disabled\n", BASIC_QUERY_FIELDS)
    assert basic[0].index == 3 and basic[0].ecc_uncorrected is None


@pytest.mark.parametrize("text", ["", "0, NVIDIA H100\n", "x, a, b, c, 1, On, Off, 0, 0x0\n",
                                  "0, H100, GPU-a, 0:1:0.0, lots, On, Off, 0, 0x0\n"])
def test_query_gpu_bad_rows(text):
    with pytest.raises(ParseError):
        parse_query_gpu(text)


def test_torch_version_file_of_the_installed_torch():
    from importlib import metadata

    dist = metadata.distribution("torch")
    parsed = parse_version_py(open(dist.locate_file("torch/version.py")).read())
    # Some builds (NVIDIA's images, a GPU machine's 2.11.0+cu130) record no local tag in their
    # metadata while version.py keeps it: the public part is what both must agree on.
    assert parsed.version.split("+")[0] == dist.version.split("+")[0]


def test_torch_version_cuda_and_rocm_builds():
    cuda = parse_version_py("from typing import Optional\n__version__ = '2.5.1+cu124'\ndebug = False\n"
                            "cuda: Optional[str] = '12.4'\nhip: Optional[str] = None\n")
    assert (cuda.version, cuda.cuda, cuda.hip) == ("2.5.1+cu124", "12.4", None)
    rocm = parse_version_py("__version__ = '2.5.1+rocm6.2'\ncuda = None\nhip = '6.2.41133-dd7f95766'\n")
    assert (rocm.cuda, rocm.hip) == (None, "6.2.41133-dd7f95766")
    for bad in ("cuda = '12.4'\n", "__version__ = (\n"):
        with pytest.raises(ParseError):
            parse_version_py(bad)
