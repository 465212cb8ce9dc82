"""ncclRemoteError names its cause on the line after "Last error:", printed after it: the cause
leads (NVIDIA/nccl#2076's shape), whichever of the two came first in the file."""

from distdoctor.logs.analysis import analyse

REMOTE = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or "
          "there was a network error, NCCL version 2.21.5\n"
          "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n")
CAUSE = "socketProgressOpt: Call to recv from 10.1.2.3<33759> failed : Connection reset by peer\n"


def _lead(tmp_path, text):
    path = tmp_path / "rank.log"
    path.write_text(text)
    runs, _ = analyse([str(path)])
    return next(r for r in runs if r.id == "log.diagnosis").findings[0].subject


def test_the_last_error_leads_over_the_remote_error_it_explains(tmp_path):
    assert _lead(tmp_path, REMOTE + "Last error:\n" + CAUSE) == "nccl.socket-recv-failed"


def test_the_order_in_the_file_does_not_matter(tmp_path):
    assert _lead(tmp_path, CAUSE + REMOTE) == "nccl.socket-recv-failed"


def test_a_remote_error_alone_still_leads(tmp_path):
    assert _lead(tmp_path, REMOTE) == "nccl.remote-error"
