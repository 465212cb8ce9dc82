from distdoctor.model import Status
from distdoctor.nccltest.compare import compare, fingerprint_table, ifname_covering, rank_ranges


def fp(rank, host, **kw):
    base = {"rank": rank, "host": host, "local_rank": rank % 2, "torch.version": "2.3.0", "nccl.version": "2.20.5",
            "torch.cuda": "12.1", "gpu.driver": "535.104.05", "python.version": "3.11.7", "pip.distdoctor": "0.1.0",
            "limits.memlock": "unlimited", "gpu.model": "NVIDIA H100", "gpu.count": 2,
            "gpu_uuid": f"GPU-{host}-{rank % 2}", "interface": "ens5", "address": f"10.0.0.{rank}"}
    base.update(kw)
    return base


def job(**overrides_by_rank):
    fps = [fp(0, "n1"), fp(1, "n1"), fp(2, "n2"), fp(3, "n2")]
    for rank, changes in overrides_by_rank.items():
        fps[int(rank[1:])].update(changes)
    return fps


def test_identical_job_is_ok():
    findings = compare(job())
    assert [f.status for f in findings] == [Status.OK]
    assert "4 ranks on 2 hosts" in findings[0].summary


def test_torch_version_mismatch_fails_naming_ranks_and_hosts():
    findings = compare(job(r2={"torch.version": "2.2.1"}, r3={"torch.version": "2.2.1"}))
    bad = [f for f in findings if f.subject == "torch.version"]
    assert len(bad) == 1 and bad[0].status is Status.FAIL
    assert "2.3.0 on ranks 0-1 (n1)" in bad[0].summary and "2.2.1 on ranks 2-3 (n2)" in bad[0].summary


def test_interface_names_per_node_give_one_ifname_for_all():
    findings = compare(job(r2={"interface": "ens14f0"}, r3={"interface": "ens14f0"}))
    (iface,) = [f for f in findings if f.subject == "interface"]
    assert iface.status is Status.WARN
    assert iface.fix == "export NCCL_SOCKET_IFNAME='=ens14f0,ens5'"


def test_the_interface_fix_applied_clears_its_own_warning():
    """The fix exported on every rank (as printed, the same value everywhere): the names still
    differ, but NCCL_SOCKET_IFNAME now selects each node's own interface, so no warning again."""
    (iface,) = [f for f in compare(job(r2={"interface": "ens14f0"}, r3={"interface": "ens14f0"}))
                if f.subject == "interface"]
    value = iface.fix.split("=", 1)[1].strip("'")
    applied = job(**{f"r{r}": {"env.NCCL_SOCKET_IFNAME": value} for r in range(4)})
    for r in (2, 3):
        applied[r]["interface"] = "ens14f0"
    assert [f.status for f in compare(applied)] == [Status.OK], compare(applied)
    # A value that leaves one node's interface out still warns.
    partial = job(**{f"r{r}": {"env.NCCL_SOCKET_IFNAME": "=ens5"} for r in range(4)})
    for r in (2, 3):
        partial[r]["interface"] = "ens14f0"
    assert "interface" in {f.subject for f in compare(partial)}


def test_loopback_is_never_offered_to_nccl():
    """Ranks on rank 0's host route to it over lo: neither a difference nor part of the fix."""
    findings = compare(job(r1={"interface": "lo"}, r2={"interface": "ens14f0"}, r3={"interface": "ens14f0"}))
    (iface,) = [f for f in findings if f.subject == "interface"]
    assert iface.fix == "export NCCL_SOCKET_IFNAME='=ens14f0,ens5'" and "lo" not in iface.summary
    assert ifname_covering(["lo", "lo0"]) == ""
    assert [f.status for f in compare(job(r1={"interface": "lo"}))] == [Status.OK]


def test_memlock_difference_fix_targets_the_short_nodes_slurmd_and_asks_for_unlimited():
    slurm = {"job": "42"}
    fps = job(r0={"slurm": slurm}, r1={"slurm": slurm}, r2={"slurm": slurm, "limits.memlock": 8388608},
              r3={"slurm": slurm, "limits.memlock": 8388608})
    (mem,) = [f for f in compare(fps) if f.subject == "limits.memlock"]
    (record,) = mem.remedy
    assert record.nodes == ("n2",) and any("LimitMEMLOCK=infinity" in c for c in record.commands)
    assert mem.fix.startswith("ssh n2 'mkdir -p ")
    plain = [f for f in compare(job(r3={"limits.memlock": 8388608})) if f.subject == "limits.memlock"][0]
    assert "memlock unlimited" in plain.fix and plain.fix.startswith("ssh n2 'echo ")


def test_environment_set_on_one_node_only():
    findings = compare(job(r2={"env.NCCL_IB_DISABLE": "1"}, r3={"env.NCCL_IB_DISABLE": "1"}))
    (env,) = [f for f in findings if f.subject == "NCCL_IB_DISABLE"]
    assert env.status is Status.WARN and "(unset) on ranks 0-1" in env.summary and "1 on ranks 2-3" in env.summary


def test_gpu_facts_across_nodes():
    findings = compare(job(r1={"gpu_uuid": "GPU-n1-0"}, r2={"gpu.model": "NVIDIA A100", "gpu.count": 1},
                           r3={"gpu.model": "NVIDIA A100", "gpu.count": 1, "limits.memlock": 8388608}))
    subjects = {f.subject: f.status for f in findings}
    assert subjects["n1"] is Status.FAIL  # two ranks on one GPU
    # the one table's severities (crosscheck/rules.py): a node with fewer GPUs fails
    assert subjects["gpu.model"] is Status.WARN and subjects["gpu.count"] is Status.FAIL
    assert subjects["limits.memlock"] is Status.WARN


def test_helpers():
    assert rank_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert ifname_covering(["eth0", "ib0", "eth0"]) == "=eth0,ib0"
    table = fingerprint_table(job())
    assert table["columns"][0] == "rank" and [r[0] for r in table["rows"]] == [0, 1, 2, 3]


def test_socket_ifname_naming_each_nodes_own_interface_is_not_a_difference():
    per_node = job(r0={"env.GLOO_SOCKET_IFNAME": "ens5"}, r1={"env.GLOO_SOCKET_IFNAME": "ens5"},
                   r2={"interface": "ens14f0", "env.GLOO_SOCKET_IFNAME": "ens14f0"},
                   r3={"interface": "ens14f0", "env.GLOO_SOCKET_IFNAME": "ens14f0"})
    assert "GLOO_SOCKET_IFNAME" not in {f.subject for f in compare(per_node)}
    wrong = job(r0={"env.NCCL_SOCKET_IFNAME": "ens"}, r1={"env.NCCL_SOCKET_IFNAME": "ens"},
                r2={"interface": "ib0", "env.NCCL_SOCKET_IFNAME": "eth"},
                r3={"interface": "ib0", "env.NCCL_SOCKET_IFNAME": "eth"})
    (finding,) = [f for f in compare(wrong) if f.subject == "NCCL_SOCKET_IFNAME"]
    assert finding.fix.startswith("# set NCCL_SOCKET_IFNAME to one value for every rank")


def test_fixes_are_ready_to_paste():
    findings = {f.subject: f for f in compare(job(r3={"torch.version": "2.2.1", "env.NCCL_IB_DISABLE": "1"}))}
    assert findings["torch.version"].fix.startswith("ssh n2 python3 -m pip install torch==2.3.0")
    assert findings["NCCL_IB_DISABLE"].fix.startswith("export NCCL_IB_DISABLE=1")


def test_cuda_visible_devices_narrowed_per_rank():
    """CUDA_VISIBLE_DEVICES=$LOCAL_RANK: every rank sees one GPU, so local rank 1 has no cuda:1."""
    fps = [fp(r, "n1" if r < 2 else "n2", cuda_available=True, cuda_visible_devices=str(r % 2),
              gpu_uuid=f"GPU-{r}", **{"gpu.count": 1}) for r in range(4)]
    findings = {f.subject: f for f in compare(fps)}
    beyond = findings["local_rank"]
    assert beyond.status is Status.FAIL and beyond.summary.startswith("ranks 1,3 would use GPU 1")
    assert findings["n1"].status is Status.WARN and "each of the 2 ranks on n1 sees one GPU" in findings["n1"].summary
    # all GPUs visible to every rank: neither finding
    healthy = [fp(r, "n1" if r < 2 else "n2", cuda_available=True, cuda_visible_devices="0,1", **{"gpu.count": 2})
               for r in range(4)]
    assert {"local_rank", "n1", "n2"}.isdisjoint(f.subject for f in compare(healthy))
    assert beyond.fix.startswith("unset CUDA_VISIBLE_DEVICES")


def test_more_ranks_than_gpus_on_a_node_says_so_not_cuda_visible_devices():
    """Seen on an H100: `--local 2` on a one-GPU node, no CUDA_VISIBLE_DEVICES anywhere."""
    fps = [fp(r, "n1", cuda_available=True, gpu_uuid="GPU-0", **{"gpu.count": 1}) for r in range(2)]
    beyond = {f.subject: f for f in compare(fps)}["local_rank"]
    assert beyond.summary.startswith("rank 1 would use GPU 1")
    assert "more ranks than GPUs on the node" in beyond.fix and "CUDA_VISIBLE_DEVICES" not in beyond.fix


def test_nccl_prediction_findings_from_fingerprints():
    from distdoctor.nccltest.compare import compare as compare_fps

    base = {"torch.version": "2.13.0"}
    fps = [
        {**base, "rank": 0, "host": "a", "host.boot_id": "1", "interface": "eth0", "nccl_interface": "eth0", "nccl_error": ""},
        {**base, "rank": 1, "host": "b", "host.boot_id": "2", "interface": "eth0", "nccl_interface": "docker0",
         "nccl_address": "172.17.0.1", "nccl_suspect": "bridge", "nccl_error": ""},
        {**base, "rank": 2, "host": "c", "host.boot_id": "3", "interface": "eth0", "nccl_interface": "",
         "nccl_error": "no socket interface found"},
    ]
    by_subject = {}
    for f in compare_fps(fps):
        by_subject.setdefault(f.subject, []).append(f)
    summaries = {f.summary: f for f in by_subject["NCCL_SOCKET_IFNAME"]}
    [suspect] = [f for s, f in summaries.items() if "advertise" in s]
    [missing] = [f for s, f in summaries.items() if "no usable" in s]
    assert suspect.status.value == "warn" and "b: docker0 (bridge)" in suspect.summary
    assert missing.status.value == "fail" and "rank(s) 2" in missing.summary
    assert suspect.fix == missing.fix == "export NCCL_SOCKET_IFNAME='=eth0'"
