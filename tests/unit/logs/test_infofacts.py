from distdoctor.logs.analysis import analyse
from distdoctor.model import Status

from .stub_catalogue import STUB


def _setup(tmp_path, text):
    (tmp_path / "job.out").write_text(text)
    runs, _ok = analyse([str(tmp_path / "job.out")], matcher=STUB)
    return {r.id: r for r in runs}["log.nccl-setup"]


def _rank(r, host, version="2.21.5+cuda12.4", socket="[0]ens5:10.0.0.{n}<0>"):
    pre = f"{r}: {host}:{100 + r}:{100 + r} [0] NCCL INFO "
    return (f"{pre}NCCL version {version}\n{pre}Bootstrap : Using ens5:10.0.0.{r}<0>\n"
            f"{pre}NET/Socket : Using {socket.format(n=r)}\n{pre}Using network Socket\n"
            f"{pre}Channel 00/0 : {r}[0] -> {(r + 1) % 4}[0] via NET/Socket/0\n")


def test_a_rank_on_another_nccl_version_fails_and_names_its_host(tmp_path):
    text = "".join(_rank(r, f"gpu{r}") for r in range(3)) + _rank(3, "gpu3", version="2.18.1+cuda12.1")
    setup = _setup(tmp_path, text)
    bad = [f for f in setup.findings if f.status == Status.FAIL]
    assert len(bad) == 1
    assert bad[0].summary == ("NCCL version differs: 2.18.1+cuda12.1 on rank 3 on gpu3 "
                              "(the other 3 ranks have 2.21.5+cuda12.4)")
    # the one table's fix (crosscheck/rules.py), addressed to the rank's host
    assert bad[0].fix == "# install NCCL 2.21.5+cuda12.4 on gpu3 (or run every node from one image)"


def test_the_cuda_driver_a_log_shows_is_published_as_the_inventory_writes_it(tmp_path):
    pre = "{r}: gpu{r}:10{r}:10{r} [0] NCCL INFO "
    text = "".join(_rank(r, f"gpu{r}") + pre.format(r=r) + f"cudaDriverVersion {12040 if r < 2 else 12020}\n"
                   for r in range(3))
    setup = _setup(tmp_path, text)
    (driver,) = [f for f in setup.findings if f.subject == "cuda.driver"]
    assert driver.status is Status.WARN
    assert driver.summary == "CUDA version the driver supports differs: 12.2 on rank 2 on gpu2 (the other 2 ranks have 12.4)"
    assert driver.fix == "# upgrade the NVIDIA driver on gpu2 to one that supports CUDA 12.4 (or run every node from one image)"


def test_the_version_in_torchs_error_summary_is_not_a_setup_fact(tmp_path):
    # torch ends "NCCL error in: ..." with "NCCL version 2.19.3", without NCCL's "+cuda12.3":
    # ranks that printed only that summary must not read as running another NCCL
    text = "".join(_rank(r, f"gpu{r}", version="2.19.3+cuda12.3") for r in range(2)) + (
        "2: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/"
        "c10d/ProcessGroupNCCL.cpp:1727, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3\n")
    setup = _setup(tmp_path, text)
    assert not [f for f in setup.findings if f.status == Status.FAIL]


def test_one_rank_over_a_veth(tmp_path):
    text = "".join(_rank(r, f"gpu{r}") for r in range(3)) + _rank(
        3, "gpu3", socket="[0]ens5:10.0.0.{n}<0> [1]veth75fa783:fe80::1%veth75fa783<0>")
    setup = _setup(tmp_path, text)
    warn = [f for f in setup.findings if f.status == Status.WARN]
    # judged by its address (link-local), as the live checks do, not by its name
    assert [f.summary for f in warn] == ["NCCL's socket on rank 3 on gpu3 uses veth75fa783 (link-local address)"]
    assert warn[0].fix.splitlines() == ["# on gpu3: keep NCCL on ens5", "export NCCL_SOCKET_IFNAME='=ens5'"]


def test_transports_and_gdr_in_the_summary(tmp_path):
    pre = "0: g1:1:1 [0] NCCL INFO "
    text = (f"{pre}NCCL version 2.21.5+cuda12.4\n{pre}Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
            f"{pre}Channel 01/0 : 7[7] -> 0[0] [receive] via NET/IB/0/GDRDMA\n")
    ok = next(f for f in _setup(tmp_path, text).findings if f.status == Status.OK)
    assert "GDR on" in ok.summary and "transports NET/IB/GDRDMA,P2P/IPC" in ok.summary
