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
    old = "e66aa18dc444:3171:3171 [0] include/socket.h:311 WARN Socket creation failed : Address family not supported by protocol"
    new = "e66aa18dc444:3171:3171 [0] misc/socket.cc:311 NCCL WARN Socket creation failed : Address family not supported by protocol"
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
