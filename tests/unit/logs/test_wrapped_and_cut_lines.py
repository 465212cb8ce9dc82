"""Two shapes of pasted logs from the third first-sight round (docs/log.md): a line the paste
wrapped mid-word, whose tail names no speaker, and a WARN cut off at the end of a paste, whose
whole text another rank printed."""

from distdoctor.logs.analysis import analyse
from distdoctor.model import Status

WATCHDOG = ("[rank{r}]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank {r}] Process group watchdog thread terminated "
            "with exception: CUDA erro\nr: unspecified launch failure\n")
LABELLED = "{r}: For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
IBVERBS = "[1,{r}]<stdout>:ptv-gpu01:1100{r}:1109{r} [{r}] misc/ibvwrap.cu:63 NCCL WARN Failed to open libibverbs.so[.1]\n"


def _lead(tmp_path, text):
    path = tmp_path / "job.log"
    path.write_text(text)
    runs, _ = analyse([str(path)], use_grep=False)
    diagnosis = next(r for r in runs if r.id == "log.diagnosis")
    return diagnosis.findings[0]


def test_a_wrapped_tail_in_one_ranks_log_is_that_ranks(tmp_path):
    lead = _lead(tmp_path, WATCHDOG.format(r=3) + LABELLED.format(r=3))
    assert lead.subject == "cuda.launch-failure"
    assert lead.evidence["rank"] == 3


def test_a_line_naming_no_speaker_among_two_ranks_gets_no_rank(tmp_path):
    lead = _lead(tmp_path, WATCHDOG.format(r=3) + LABELLED.format(r=3) + LABELLED.format(r=5))
    assert lead.subject == "cuda.launch-failure"
    assert lead.evidence["rank"] is None


def test_a_warn_cut_off_where_another_rank_printed_it_whole_is_not_an_error(tmp_path):
    text = IBVERBS.format(r=0) + IBVERBS.format(r=2) + "[1,1]<stdout>:ptv-gpu01:11001:11091 [1] misc/ibvwrap.cu:63 NCCL WARN Fa\n"
    lead = _lead(tmp_path, text)
    assert lead.status == Status.OK, lead.summary


def test_a_cut_off_warn_with_no_whole_copy_is_still_reported(tmp_path):
    text = IBVERBS.format(r=0) + "[1,1]<stdout>:ptv-gpu01:11001:11091 [1] misc/socket.cc:480 NCCL WARN Connect to f\n"
    lead = _lead(tmp_path, text)
    assert lead.subject == "unknown-error" and lead.status != Status.OK
