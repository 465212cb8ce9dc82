import io

from distdoctor.model import CheckRun, Finding, Report, RunContext, Status
from distdoctor.render.console import make_console, render


def _run(check_id, status, summary, fix=""):
    return CheckRun(check_id, f"title of {check_id}", (), status, (Finding(status, summary, fix=fix),), 0.01)


def _render(runs, verbose=False):
    report = Report("0.1.0", "node7", RunContext("login", "login node"), "2026-11-21T00:00:00.000Z", 0.2, tuple(runs))
    buf = io.StringIO()
    render(report, make_console(buf, width=80, color=False), verbose)
    return buf.getvalue()


def test_skips_with_one_reason_fold_into_one_line_and_verbose_unfolds():
    runs = [_run(f"slurm.c{i}", Status.SKIP, "not inside a Slurm job") for i in range(3)]
    runs.append(_run("slurm.installation", Status.WARN, "no slurm.conf", fix="export SLURM_CONF=/etc/slurm/slurm.conf"))
    out = _render(runs)
    assert out.count("not inside a Slurm job") == 1
    assert "3 checks skipped: not inside a Slurm job" in out and "slurm.c0, slurm.c1, slurm.c2" in out
    assert "How to fix" in out and "$ export SLURM_CONF=/etc/slurm/slurm.conf" in out
    assert "4 checks: 0 ok · 1 warn · 0 fail · 3 skip" in out
    verbose = _render(runs, verbose=True)
    assert verbose.count("not inside a Slurm job") == 3


def test_header_and_width():
    out = _render([_run("host.shm-size", Status.OK, "x" * 200)])
    assert out.startswith("distdoctor 0.1.0 · check · host node7 · login node")
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80


def test_a_long_fix_is_never_wrapped_so_it_pastes_as_one_command():
    fix = "ss -ltnp | grep sshd     # on gpu-node-0042's console: is sshd up, and on which port does it listen?"
    out = _render([_run("reach.hosts", Status.FAIL, "ssh port 22 on gpu-node-0042: connection refused", fix=fix)])
    assert f"   $ {fix}\n" in out
