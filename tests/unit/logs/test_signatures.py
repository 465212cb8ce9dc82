"""The failure-signature catalogue: valid, cited, pasteable, and each entry proven on the real
lines it was written from."""

import re

import pytest

from distdoctor import registry
from distdoctor.logs import signatures as sigs

CATALOGUE = sigs.load()
IDS = [s.id for s in CATALOGUE]


def test_catalogue_loads_and_ids_are_unique():
    assert len(IDS) >= 40
    assert len(IDS) == len(set(IDS))
    assert all(re.match(r"^[a-z]+\.[a-z0-9-]+$", i) for i in IDS)


def test_every_category_is_covered():
    assert {s.category for s in CATALOGUE} == set(sigs.CATEGORIES)
    for category in sigs.CATEGORIES:
        assert any(s.severity == "root" for s in CATALOGUE if s.category == category), category


def test_old_and_new_nccl_formats_both_match():
    """The 2.0-era format has no NCCL token before WARN; today's has one; both name the cause."""
    cause = "Socket creation failed : Address family not supported by protocol"
    old = f"e66aa18dc444:3171:3171 [0] include/socket.h:311 WARN {cause}"
    new = f"e66aa18dc444:3171:3171 [0] misc/socket.cc:311 NCCL WARN {cause}"
    assert sigs.match_line(old).id == sigs.match_line(new).id == "nccl.socket-family-unsupported"


def test_every_entry_is_cited_with_owner_repo_number():
    for s in CATALOGUE:
        assert s.sources, s.id
        for src in s.sources:
            assert re.match(r"^[\w.-]+/[\w.-]+#\d+$", src), (s.id, src)


@pytest.mark.parametrize("sig", CATALOGUE, ids=IDS)
def test_examples_match_and_are_not_stolen(sig):
    """Each real line matches its own entry, and no entry earlier in the file takes it."""
    assert sig.examples
    for line in sig.examples:
        assert sig.matches(line), line
        assert sigs.match_line(line) is sig, (line, sigs.match_line(line))


@pytest.mark.parametrize("sig", CATALOGUE, ids=IDS)
def test_fix_lines_are_pasteable(sig):
    for line in sig.fix:
        assert sigs.fix_problem(line) is None, (sig.id, line)
    filled = sig.fix_for(host="gpu042", rank=17)
    assert not any("{host}" in line or "{rank}" in line for line in filled)


def test_confirm_names_a_real_check_or_a_command():
    known = {info.id for info in registry.load(env={}).sorted()}
    assert "net.nccl-socket-interface" in known
    for s in CATALOGUE:
        if re.match(r"^[a-z]+\.[a-z0-9-]+$", s.confirm):
            assert s.confirm in known, (s.id, s.confirm)
        else:
            assert sigs.fix_problem(s.confirm) is None, (s.id, s.confirm)


def test_consequences_point_at_existing_entries_and_are_marked():
    ids = set(IDS)
    for s in CATALOGUE:
        assert set(s.consequence_of) <= ids
    assert sigs.by_id()["torch.watchdog-timeout"].severity == "consequence"


def test_info_chatter_matches_nothing():
    chatter = [
        "gpu01:1234:1290 [3] NCCL INFO Channel 00/04 :    0   1   2   3",
        "gpu01:1234:1290 [3] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
        "gpu01:1234:1290 [3] NCCL INFO comm 0x5597 rank 3 nranks 4 cudaDev 3 busId 3b000 - Init COMPLETE",
        "Epoch 3: 100%|##########| 1000/1000 [01:02<00:00, loss=0.213]",
        "",
    ]
    for line in chatter:
        assert sigs.match_line(line) is None, line


def test_priority_is_file_order():
    """A line that two entries match goes to the earlier (more specific) one."""
    line = "srun: error: Unable to create step for job 29986033: Memory required by task is not available"
    both = sigs.matcher().all_matches(line)
    assert [s.id for s in both] == ["slurm.step-memory-unavailable", "slurm.step-creation-failed"]
    assert sigs.match_line(line).id == "slurm.step-memory-unavailable"


@pytest.mark.parametrize("bad, message", [
    ('', "no .*signature.* entries"),
    ('[[signature]]\nid = "nccl.x"\n', "missing"),
    ('[[signature]]\nid = "nope"\n', "category"),
])
def test_invalid_catalogue_is_a_clear_error(bad, message):
    with pytest.raises(sigs.CatalogueError, match=message):
        sigs.parse(bad)


def _entry(**over: str) -> str:
    base = {
        "id": '"nccl.sample"', "title": '"t"', "category": '"nccl"', "severity": '"root"',
        "patterns": "['boom']", "keywords": '["boom"]', "meaning": '"m"', "fix": '["export A=1"]',
        "confirm": '"net.nccl-socket-interface"', "sources": '["NVIDIA/nccl#1"]', "examples": '["boom here"]',
    }
    base.update(over)
    return "[[signature]]\n" + "".join(f"{k} = {v}\n" for k, v in base.items())


@pytest.mark.parametrize("over, message", [
    ({"sources": '["nccl 1"]'}, "owner/repo#N"),
    ({"sources": "[]"}, "empty"),
    ({"patterns": "['(unclosed']"}, "pattern"),
    ({"severity": '"fatal"'}, "severity"),
    ({"fix": '["Set the interface to eth0"]'}, "not a known command"),
    ({"fix": '["export NCCL_SOCKET_IFNAME=lo"]'}, "offers lo"),
    ({"fix": '["export NCCL_SOCKET_IFNAME==eth0,lo"]'}, "offers lo"),
    ({"fix": '["echo \\"unterminated"]'}, "not shell"),
    ({"fix": '["docker run --network=host IMAGE COMMAND"]'}, "placeholder"),
    ({"fix": '["grep WARN slurm-JOBID.out"]'}, "placeholder"),
    ({"examples": '["nothing like it"]'}, "keywords"),
    ({"examples": '["boom"]', "patterns": "['boom!']"}, "no pattern matches"),
    ({"category": '"gloo"'}, "category"),
    ({"consequence_of": '["nccl.ghost"]'}, "unknown"),
])
def test_validation_rejects(over, message):
    with pytest.raises(sigs.CatalogueError, match=message):
        sigs.parse(_entry(**over))


def test_duplicate_ids_rejected():
    with pytest.raises(sigs.CatalogueError, match="duplicate"):
        sigs.parse(_entry() + _entry())


def test_valid_minimal_entry_parses():
    (s,) = sigs.parse(_entry(fix='["# a comment", "ssh {host} nvidia-smi", "export NCCL_SOCKET_IFNAME=^lo,docker"]'))
    assert s.fix_for(host="n1")[:2] == ("# a comment", "ssh n1 nvidia-smi")
    assert s.fix_for()[1] == "ssh {host} nvidia-smi"


def test_signature_reference_is_fresh():
    import os

    from tests.conftest import REPO

    with open(os.path.join(REPO, "docs", "log-signatures.md")) as fh:
        committed = fh.read()
    assert committed == sigs.markdown(), \
        "docs/log-signatures.md is stale: run `python -m distdoctor.docgen signatures > docs/log-signatures.md`"


@pytest.mark.parametrize("words", [
    ["abc", "abd", "ab", "x"], ["NET/IB", "NET/Plugin", "NET/IB : No"], ["a.b", "[127.", "(x)", "a|b"],
])
def test_keyword_pattern_matches_exactly_the_words(words):
    rx = re.compile(sigs.keyword_pattern(words))
    for w in words:
        assert rx.fullmatch(w), w
        assert rx.search("prefix " + w + " suffix")
    flat = re.compile("|".join(re.escape(w) for w in words))
    for probe in ["", "a", "abx", "ac", "NET/I", "NET/IBx", "a.c", "127.", "(x", "ab|", "xx", "a|b"]:
        assert bool(rx.search(probe)) == bool(flat.search(probe)), probe


def test_prefilter_agrees_with_keyword_membership_on_real_lines():
    import glob

    from tests.conftest import data_path

    m = sigs.matcher()
    lines = []
    for path in glob.glob(data_path("nccl_debug", "*.txt")) + glob.glob(data_path("logs", "lab", "*.log")):
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines += fh.readlines()
    assert lines
    for line in lines:
        assert bool(m.prefilter.search(line)) == any(k in line for k in m.keywords), line


@pytest.mark.parametrize("host", ["gpu01; rm -rf ~", "$(reboot)", "-oProxyCommand=x", "a b", "`id`", ""])
def test_fix_never_pastes_a_hostile_host_from_a_log(host):
    (s,) = sigs.parse(_entry(fix='["ssh {host} nvidia-smi", "srun -w {host} -n1 true # rank {rank}"]'))
    lines = s.fix_for(host=host, rank="1; reboot")
    assert lines == ("ssh {host} nvidia-smi", "srun -w {host} -n1 true # rank {rank}")
    assert s.fix_for(host="gpu-01.cluster", rank=3)[0] == "ssh gpu-01.cluster nvidia-smi"


def test_patterns_do_not_depend_on_the_nccl_token():
    """NCCL 2.0-2.2 printed `host:pid:tid [0] file:line WARN ...` without the NCCL token, and
    newer releases print `NCCL WARN`/`NCCL INFO`: a pattern must hold for both."""
    for s in CATALOGUE:
        for p in s.patterns:
            assert "NCCL WARN" not in p.pattern and "NCCL INFO" not in p.pattern, (s.id, p.pattern)
    converted = 0
    for s in CATALOGUE:
        for line in s.examples:
            for token in (" NCCL WARN ", " NCCL INFO "):
                if token in line:
                    old = line.replace(token, " " + token.split()[1] + " ")
                    assert sigs.match_line(old) is s, (s.id, old)
                    converted += 1
    assert converted >= 30


# Other wordings of the same failures, from other NCCL/torch/CUDA releases and tools (the source
# that printed each is named beside it): each must reach its entry, not a generic one.
SIBLINGS = [
    # nccl-tests and a bare NCCL program (two ranks on one GPU), NCCL 2.22.3
    ("ubuntu1583:1586 [0] init.cc:738 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000",
     "nccl.duplicate-gpu"),
    ("Failed, NCCL error one_device_per_thread.cu:17 'invalid usage (run with NCCL_DEBUG=WARN for details)'",
     "nccl.invalid-usage"),
    ("Test NCCL failure common.cu:210 'invalid usage'", "nccl.invalid-usage"),
    ("NCCL Error 5: invalid usage", "nccl.invalid-usage"),  # vllm-project/vllm#427, older torch
    ("NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:957, invalid usage, NCCL version 21.0.3",
     "nccl.invalid-usage"),  # TencentARC/GFPGAN#154
    ("Test NCCL failure common.cu:997 'internal error", "nccl.internal-error"),  # NVIDIA/nccl-tests#231
    ("ada6000-02:165062:166441 [0] bootstrap.cc:77 NCCL WARN Message truncated : received 172 bytes instead of 64",
     "nccl.bootstrap-message-truncated"),
    ("rank 1: bootstrap.cc:225 NCCL WARN Message truncated : received 6144 bytes instead of 2048",
     "nccl.bootstrap-message-truncated"),
    # the transport's wording of a size mismatch stays with nccl.size-mismatch (NVIDIA/nccl#268)
    ("hvd1:2918:3333 [0] external/nccl_archive/src/transport/net_socket.cc:200 NCCL WARN NET/Socket : message "
     "truncated : receiving 696320 bytes instead of 32768", "nccl.size-mismatch"),
    ("enqueue.cc:1556 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'",
     "cuda.illegal-memory-access"),  # vllm-project/vllm#19890, NCCL 2.2x prints the error number
    ("misc/strongstream.cc:343 NCCL WARN Cuda failure 'an illegal memory access was encountered'",
     "cuda.illegal-memory-access"),  # NVIDIA/TensorRT-LLM#448
    ("192.168.13.81: [rank19]:[E808 10:31:07.406255799 ProcessGroupNCCL.cpp:1895] [PG ID 1 PG GUID 1 Rank 19] "
     "Process group watchdog thread terminated with exception: CUDA error: unspecified launch failure",
     "cuda.launch-failure"),  # hiyouga/LlamaFactory#8871
    ("CUDA error 217 at ggml-cuda.cu:6292: peer access is not supported between these two devices",
     "cuda.peer-access-unsupported"),  # ggml-org/llama.cpp#3230
    # torch 2.2-2.3's wording of the heartbeat monitor (Intellindust-AI-Lab/DEIM#105)
    ("[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Heartbeat monitor timed out! Process will be terminated "
     "after dumping debug info. workMetaList_.size()=84", "torch.heartbeat-monitor-timeout"),
    ("[rank1]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 1] [PG 0 Rank 1] ProcessGroupNCCL's watchdog got stuck for 600 "
     "seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API "
     "hang blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA api, or "
     "other deadlock-prone behaviors.", "torch.heartbeat-monitor-timeout"),
    ("[E930 15:23:00.059980974 ProcessGroupNCCL.cpp:1487] [PG ID 4 PG GUID  Rank 2] ProcessGroupNCCL's watchdog got "
     "stuck for 10 seconds without making progress in monitoring enqueued collectives.",
     "torch.heartbeat-monitor-timeout"),  # NVIDIA/Fuser#3055
    ("(pid=3769) 2020-05-07 21:07:16,707    WARNING torch_trainer.py:413 -- [/pytorch/third_party/gloo/gloo/transport/"
     "tcp/unbound_buffer.cc:72] Timed out waiting 10000ms for recv operation to complete",
     "gloo.collective-timeout"),  # ray-project/ray#8005
    # Python's own rendering of the exceptions, at the end of torchrun's traceback
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "torch.rendezvous-timeout"),
    ('    "message": "RendezvousClosedError: ",', "torch.rendezvous-closed"),
    # torch 2.0-2.1 printed the store address without parentheses (pytorch/pytorch#107021)
    ("[E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying to connect to 192.0.0.1:1234",
     "torch.store-connect-timeout"),
]


@pytest.mark.parametrize("line, sid", SIBLINGS, ids=[s for _l, s in SIBLINGS])
def test_sibling_wordings_reach_their_entry(line, sid):
    assert sigs.match_line(line).id == sid, (line, [s.id for s in sigs.matcher().all_matches(line)])


@pytest.mark.parametrize("line", [
    "    raise RendezvousTimeoutError()",  # the traceback's frame, not the error: counted once
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
    "remote process exited or there was a network error, NCCL version 2.21.5",
    "gpu01:1234:1290 [3] NCCL INFO NCCL_P2P_DISABLE set by environment to 1",
    "gpu01:1234:1290 [3] NCCL INFO P2P is disabled between connected GPUs 2 and 1. You can repress this message "
    "with NCCL_IGNORE_DISABLED_P2P=1.",
])
def test_new_entries_do_not_take_other_lines(line):
    new = {"torch.rendezvous-timeout", "nccl.internal-error", "nccl.invalid-usage", "cuda.peer-access-unsupported"}
    assert not new & {s.id for s in sigs.matcher().all_matches(line)}, line


def test_generic_nccl_results_name_what_explains_them():
    """The summaries a failed NCCL call ends with (invalid usage, internal error, unhandled cuda
    error) are roots only when nothing more specific is in the log."""
    by = sigs.by_id()
    assert {"nccl.duplicate-gpu", "nccl.size-mismatch"} <= set(by["nccl.invalid-usage"].consequence_of)
    assert "nccl.bootstrap-message-truncated" in by["nccl.internal-error"].consequence_of
    assert {"cuda.illegal-memory-access", "cuda.launch-failure", "cuda.peer-access-unsupported"} <= \
        set(by["nccl.unhandled-cuda-error"].consequence_of)
    assert "torch.store-connect-timeout" in by["torch.rendezvous-connection-error"].consequence_of
    ids = [s.id for s in CATALOGUE]
    for specific, generic in [("nccl.duplicate-gpu", "nccl.invalid-usage"),
                              ("nccl.bootstrap-message-truncated", "nccl.internal-error"),
                              ("nccl.bootstrap-message-truncated", "nccl.size-mismatch")]:
        assert ids.index(specific) < ids.index(generic), (specific, generic)


def test_a_fix_names_the_address_the_message_names():
    """{peer} comes from the line: the route to test is the one that failed, and an address
    that is not plainly one never reaches a command."""
    from distdoctor.logs import diagnose, signatures
    from distdoctor.logs.scan import Event

    sig = next(s for s in signatures.load() if s.id == "nccl.socket-no-route")

    def fix(body):
        event = Event("rank2.log", 0, 7, body, body, "gpu002", 2, None, None, None, "", sig)
        return diagnose.fix_lines(sig, event).splitlines()

    assert "ssh gpu002 ip route get 10.0.0.1" in fix(
        "misc/socket.cc:484 NCCL WARN socketPollConnect: Connect to 10.0.0.1<42311> returned 113(No route to host)")
    assert "ssh gpu002 ip route get 192.168.1.9" in fix("NCCL WARN Net : Connect to 192.168.1.9<54263> failed : No route to host")
    assert "ssh gpu002 ip route get fe80::966d:ae03:a2:8cf0%ib1" in fix(
        "NCCL WARN Connect to fe80::966d:ae03:a2:8cf0%ib1<17943> failed : No route to host")
    hostile = fix("NCCL WARN Connect to $(reboot)<1> failed : No route to host")
    assert not any("reboot" in line and not line.startswith("#") for line in hostile)
    assert any(line.startswith("# ") and "ip route get THE_ADDRESS_IN_THE_MESSAGE" in line for line in hostile)


def test_no_fix_pastes_an_interface_or_hca_the_log_did_not_name():
    """A log does not say which interface a node should use: `export NCCL_SOCKET_IFNAME=eth0`
    pasted on a node whose NIC is ens5 turns a connect error into 'no socket interface found'.
    The catalogue's commands find the value on the node (distdoctor's net checks print the
    export for it); guesses may only appear in comments."""
    import re

    from distdoctor.logs import signatures

    guessed = re.compile(r"(SOCKET_IFNAME|IB_HCA|_IF)=\S|if_include\s+\S|if_exclude\s+\S")
    for sig in signatures.load():
        for line in sig.fix:
            assert line.startswith("# ") or not guessed.search(line), (sig.id, line)


def test_a_fix_names_the_port_the_message_names():
    """torch.address-in-use once printed `ss -ltnp 'sport = :29500'` for a log whose taken port
    was 36000; the per-job port it suggests stays below the ephemeral range (32768 and up)."""
    from distdoctor.logs import diagnose, signatures
    from distdoctor.logs.scan import Event

    sig = next(s for s in signatures.load() if s.id == "torch.address-in-use")

    def fix(body, context=frozenset()):
        event = Event("rank0.log", 0, 7, body, body, "node1", 0, None, None, None, "", sig)
        return diagnose.fix_lines(sig, event, context).splitlines()

    assert "ssh node1 ss -ltnp 'sport = :36000'" in fix(
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
        "address. port: 36000, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
    assert "ssh node1 ss -ltnp 'sport = :29501'" in fix(
        "RuntimeError: The server socket has failed to listen on any local network address. The server socket "
        "has failed to bind to [::]:29501 (errno: 98 - Address already in use).")
    unnamed = fix("RuntimeError: The server socket has failed to listen on any local network address. "
                  "code: -98, name: EADDRINUSE, message: address already in use")
    assert unnamed[0].startswith("# ") and "the log does not name the port" in unnamed[0]
    assert not any(line.startswith("ss ") or " :29500'" in line for line in unnamed)
    # the per-job port is derived from the Slurm job id: only for a log that shows Slurm
    taken = "RuntimeError: The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in use)."
    assert "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))" in fix(taken, frozenset({"slurm"}))
    assert not any("SLURM_JOB_ID" in line for line in fix(taken))


@pytest.mark.parametrize("line", [
    "include/shm.h:28 NCCL WARN Call to posix_fallocate failed: No space left on device",
    "include/shm.h:28 NCCL WARN Call to posix_fallocate failed  :  No space left on device",
    "x:1:1 [0] include/shm.h:28 **NCCL WARN Call to posix_fallocate failed : No space left on device**",
    "include/shm.h:28 NCCL WARN Call to `posix_fallocate`\tfailed : No space left on device",
])
def test_matching_is_on_normalised_text(line):
    assert sigs.match_line(line).id == "nccl.shm-no-space"


def test_slurmstepd_stars_are_not_markdown():
    assert sigs.normal("slurmstepd: error: *** STEP 3.0 ON n1 CANCELLED AT x ***") == \
        "slurmstepd: error: *** STEP 3.0 ON n1 CANCELLED AT x ***"


@pytest.mark.parametrize("line, sig", [
    ("node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.0.0.4<56849> failed : "
     "no route to host", "nccl.socket-no-route"),
    ("include/shm.h:28 NCCL WARN CALL TO POSIX_FALLOCATE FAILED : NO SPACE LEFT ON DEVICE", "nccl.shm-no-space"),
])
def test_a_message_whose_case_varies_is_matched_case_blind(line, sig):
    assert sigs.match_line(line) is None  # as written, the catalogue does not see it
    assert sigs.matcher().match_folded(line).id == sig


def test_the_case_blind_look_reaches_the_diagnosis(tmp_path):
    from distdoctor.logs.analysis import analyse

    path = tmp_path / "job.log"
    path.write_text("node5:240:240 [6] misc/socket.cc:533 NCCL WARN Connect to 10.0.0.4<56849> failed : "
                    "NO ROUTE TO HOST\n")
    runs, _ok = analyse([str(path)], use_grep=False)
    assert next(r for r in runs if r.id == "log.diagnosis").findings[0].subject == "nccl.socket-no-route"


@pytest.mark.parametrize("sig", [s for s in CATALOGUE if s.category != "slurm"], ids=lambda s: s.id)
def test_slurm_commands_only_where_the_log_shows_slurm(sig):
    """A fix names srun, scontrol, sacct or Slurm's output file only under [slurm]: a single
    machine's torchrun has none of them."""
    for line in sig.fix:
        text, flag, negated = sigs.condition(line)
        if re.search(r"\b(?:srun|scontrol|sacct|sbatch) |\$SLURM_|slurm-<jobid>", text):
            assert (flag, negated) == ("slurm", False), line
