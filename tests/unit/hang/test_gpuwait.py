"""Which Python lines wait for the GPU (hang/gpuwait.toml): the idioms, and the lines that only
look alike."""

import pytest

from distdoctor.hang import gpuwait
from distdoctor.hang.stacks import Frame

OWN = (Frame("step", "train.py", 42, "/home/u/train.py"),)


@pytest.mark.parametrize("code", ["loss_value = loss.item()", "print(t[0].item())", "preds = logits.argmax(-1).cpu()",
                                  "arr = out.detach().numpy()", "vals = x.tolist()", "y = x.to('cpu')",
                                  'y = x.to(torch.device("cpu"))', "torch.cuda.synchronize()", "stream.synchronize()",
                                  "end_event.synchronize()"])
def test_lines_that_wait_for_the_gpu(code):
    assert gpuwait.why(OWN, code)


@pytest.mark.parametrize("code", ["for k, v in batch.items():", "x = model(batch)", "y = x.to(device)",
                                  "loader = iter(data)", "", "cpu_count = os.cpu_count()"])
def test_lines_that_do_not(code):
    assert gpuwait.why(OWN, code) == ""


def test_torchs_synchronize_frame_waits_whatever_the_line():
    frames = (Frame("synchronize", "torch/cuda/__init__.py", 1040, "/venv/lib/python3.12/site-packages/torch/cuda/__init__.py"),
              *OWN)
    assert gpuwait.why(frames, "") == "synchronize() in torch/cuda/__init__.py"


def test_a_library_frame_on_top_is_not_judged_by_a_line():
    frames = (Frame("forward", "torch/nn/modules/linear.py", 125, "/venv/lib/python3.12/site-packages/torch/nn/x.py"),)
    assert gpuwait.source_frame(frames) is None and gpuwait.why(frames, "loss.item()") == ""


def test_line_of_is_bounded():
    assert gpuwait.line_of("a\n  b = c.item()  \n", 2) == "b = c.item()"
    assert gpuwait.line_of("a\n", 5) == "" and gpuwait.line_of("a\n", 0) == ""
    assert len(gpuwait.line_of("x" * 10_000, 1)) == gpuwait.MAX_CODE
