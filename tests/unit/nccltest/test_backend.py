"""gloo's address, judged from the ranks' fingerprints (nccltest/backend.py)."""

from distdoctor.nccltest import backend


def _fp(rank, host, address, interface, **extra):
    return {"rank": rank, "host": host, "address": address, "interface": interface,
            "hostname_addrs": [address], "addresses": [address], **extra}


def test_rank0_whose_name_is_loopback_gets_its_cluster_address_not_127():
    """Rank 0 reaches MASTER_ADDR (its own name) through the loopback, so its route says
    127.0.0.1; the fix must still map its name to the address the other nodes reach (live: the
    /etc/hosts rewrite once printed `127.0.0.1 node1`, leaving the name on loopback)."""
    lead = _fp(0, "node1", "127.0.0.1", "lo", hostname_addrs=["127.0.1.1"],
               addresses=["10.143.132.11", "172.17.0.1", "fe80::1%eth0"], nccl_interface="eth0",
               nccl_address="10.143.132.11",
               hosts_lines=[{"line": 2, "text": "127.0.1.1\tnode1", "address": "127.0.1.1", "names": ["node1"]}])
    other = _fp(1, "node2", "10.143.132.12", "eth0")
    found = backend.gloo_address_problem([lead, other])
    assert found is not None
    assert "127.0.0.1" not in found.fix.replace("127\\.0\\.1\\.1", ""), found.fix
    assert "\\110.143.132.11\\2" in found.fix and "# as root on node1:" in found.fix, found.fix
    # the interface holding that address is eth0 on both: one setting for every node
    assert found.fix.splitlines()[1] == "export GLOO_SOCKET_IFNAME=eth0", found.fix


def test_a_loopback_rank_with_no_address_near_the_others_gets_no_guess():
    lead = _fp(0, "node1", "127.0.0.1", "lo", hostname_addrs=["127.0.1.1"], addresses=["10.1.0.1", "192.168.9.1"],
               hosts_lines=[{"line": 2, "text": "127.0.1.1 node1", "address": "127.0.1.1", "names": ["node1"]}])
    found = backend.gloo_address_problem([lead])
    assert found is None or "127.0.0.1\\2" not in found.fix


# Which backend: seen on an H100 with `--local 2`: rank 1's cuda:1 does not exist, its init failed
# at once, and NCCL's init on rank 0 waited for it until the 50 s bound.
def _gpu_rank(rank, local_rank, gpus, visible=None):
    return {"rank": rank, "local_rank": local_rank, "cuda_available": True, "nccl.version": "2.28.9",
            "gpu.count": gpus, "cuda_visible_devices": visible}


def test_every_rank_with_a_gpu_of_its_own_is_nccl():
    assert backend.choose([_gpu_rank(0, 0, 2), _gpu_rank(1, 1, 2)], None) == ("nccl", [])


def test_a_rank_beyond_its_nodes_gpus_makes_it_gloo_with_a_note():
    chosen, notes = backend.choose([_gpu_rank(0, 0, 1), _gpu_rank(1, 1, 1)], None)
    assert chosen == "gloo" and len(notes) == 1
    assert "only ranks 0 have CUDA, NCCL and a GPU of their own" in notes[0].summary


def test_forcing_nccl_with_a_rank_beyond_the_gpus_is_not_run():
    blocker = backend.nccl_missing([_gpu_rank(0, 0, 1), _gpu_rank(1, 1, 1)])
    assert blocker is not None and "rank 1 would use a GPU their node does not have (local rank 1 of 1" in blocker.summary
    assert backend.nccl_missing([_gpu_rank(0, 0, 1)]) is None


def test_no_cuda_at_all_still_names_the_build():
    blocker = backend.nccl_missing([{"rank": 0, "local_rank": 0, "cuda_available": False, "torch.version": "2.13.0+cpu"}])
    assert blocker is not None and "no usable CUDA GPU with NCCL: torch 2.13.0+cpu" in blocker.summary


def test_a_fingerprint_with_garbled_numbers_does_not_crash_the_choice():
    odd = {**_gpu_rank(1, 1, 2), "gpu.count": "two", "local_rank": [1]}
    assert backend.choose([_gpu_rank(0, 0, 2), odd], None)[0] == "nccl"
