import collections
import os
import shutil
import signal
import sys
import tempfile

import pytest

DATA = os.path.join(os.path.dirname(__file__), "data")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_configure(config):
    # A shell starts a background job (`bash .ci/run &`, nohup from a script) with SIGINT
    # ignored, and every process the tests start would inherit that: the Ctrl-C tests would then
    # wait out the bounds they test. A handler, unlike SIG_IGN, is not inherited across exec.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def data_path(*parts: str) -> str:
    return os.path.join(DATA, *parts)


def distdoctor_argv() -> list[str]:
    """How to run the installed console script: the one beside this interpreter if there is
    one, else `python -m distdoctor`."""
    exe = os.path.join(os.path.dirname(sys.executable), "distdoctor")
    if os.path.exists(exe):
        return [exe]
    found = shutil.which("distdoctor")
    return [found] if found else [sys.executable, "-m", "distdoctor"]


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir():
    """Tools the tests start leave files in $TMPDIR (torchrun's agent writes torchelastic_* log
    folders and never removes them): the session gets its own, removed at the end, so a run
    leaves nothing behind in /tmp. World-readable like /tmp, since daemons the tests start
    (munge, sshd) check the permissions of their paths."""
    path = tempfile.mkdtemp(prefix="distdoctor-tests-")
    os.chmod(path, 0o755)
    old = os.environ.get("TMPDIR")
    old_cache = os.environ.get("XDG_CACHE_HOME")
    os.environ["TMPDIR"] = path
    # distdoctor's tool cache too: the runs the tests start must not read the user's.
    os.environ["XDG_CACHE_HOME"] = os.path.join(path, "cache")
    tempfile.tempdir = None
    try:
        yield path
    finally:
        for name, value in (("TMPDIR", old), ("XDG_CACHE_HOME", old_cache)):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = None
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def data():
    return data_path


_SCHEMA = None


def load_report(text: str) -> dict:
    """Parse a JSON report printed by distdoctor and validate it against the published schema:
    every report the suite produces is checked, not only the ones in the schema's own tests."""
    import json

    import jsonschema

    global _SCHEMA
    if _SCHEMA is None:
        with open(os.path.join(REPO, "docs", "report.schema.json")) as fh:
            _SCHEMA = json.load(fh)
    doc = json.loads(text)
    jsonschema.validate(doc, _SCHEMA)
    from distdoctor.remote import Fix

    for check in doc.get("checks", []):
        for finding in check.get("findings", []):
            if finding.get("remedy"):  # the records the fix was printed from: lint them, not the print
                for r in finding["remedy"]:
                    record_fix(Fix(tuple(r["commands"]), tuple(r["nodes"]), r["comment"]))
            else:
                record_fix(finding.get("fix", ""))
    return doc


# Every fix the product prints is linted (distdoctor/fixlint.py) at the end of the session:
# fixes made in this process by distdoctor's own code (checks, engine, nccl-test), seen as each
# finding is made (model.FIX_WATCHERS), and fixes in every JSON report a test reads back from a
# real run. A fix made of records is linted as records (fixlint.lint_record: each knows its
# nodes); one given as text, as printed. A console "How to fix" that shows the same fix twice is
# reported too.
_PRODUCT_DIRS = (os.path.join(REPO, "checks") + os.sep, os.path.join(REPO, "distdoctor") + os.sep)
_NOT_AUTHORS = tuple(os.path.join(REPO, "distdoctor", name) for name in ("model.py", "api.py", "engine.py"))
_TESTS_DIR = os.path.join(REPO, "tests") + os.sep
FIXES: dict = {}  # fix (a Fix record, or text) -> the tests that produced it
DUPLICATE_FIXES: list[tuple[str, str]] = []  # (test, fix shown twice)


def _current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]


def record_fix(fix) -> None:
    if fix:
        FIXES.setdefault(fix, set()).add(_current_test())


def _authored_by_product() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if name.startswith(_TESTS_DIR):
            return False
        if name.startswith(_PRODUCT_DIRS) and not name.startswith(_NOT_AUTHORS):
            return True
        frame = frame.f_back
    return False


def _record_product_fix(finding) -> None:
    if _authored_by_product():
        for record in finding.remedy or (finding.fix,):
            record_fix(record)


def _install_fix_recorder() -> None:
    from distdoctor import model

    if _record_product_fix not in model.FIX_WATCHERS:
        model.FIX_WATCHERS.append(_record_product_fix)

    from distdoctor.render import console

    render = console.render

    def render_and_look_for_duplicates(report, con, verbose=False):
        import io

        render(report, con, verbose)
        buf = io.StringIO()
        render(report, console.make_console(buf, width=100, color=False), verbose)
        text = buf.getvalue()
        if "How to fix" not in text:
            return
        blocks: list[str] = []
        for line in text.split("How to fix", 1)[1].splitlines():
            if line.startswith("   $ "):
                if blocks and blocks[-1] is not None:
                    blocks[-1] += "\n" + line
                else:
                    blocks.append(line)
            else:
                if blocks and blocks[-1] is not None:
                    blocks.append(None)
        seen = set()
        for block in filter(None, blocks):
            if block in seen:
                DUPLICATE_FIXES.append((_current_test(), block.strip()))
            seen.add(block)

    console.render = render_and_look_for_duplicates


_install_fix_recorder()


def _fixes_to_wire() -> dict:
    """FIXES and DUPLICATE_FIXES as plain data, for xdist's channel from a worker."""
    from distdoctor.remote import Fix

    fixes = []
    for fix, tests in FIXES.items():
        if isinstance(fix, Fix):
            fixes.append(["record", list(fix.commands), list(fix.nodes), fix.comment, sorted(tests)])
        else:
            fixes.append(["text", fix, sorted(tests)])
    return {"fixes": fixes, "duplicates": [list(d) for d in DUPLICATE_FIXES]}


def _fixes_from_wire(wire: dict) -> None:
    from distdoctor.remote import Fix

    for entry in wire.get("fixes", []):
        if entry[0] == "record":
            fix, tests = Fix(tuple(entry[1]), tuple(entry[2]), entry[3]), entry[4]
        else:
            fix, tests = entry[1], entry[2]
        FIXES.setdefault(fix, set()).update(tests)
    DUPLICATE_FIXES.extend(tuple(d) for d in wire.get("duplicates", []))


def pytest_testnodedown(node, error):
    """The controller of a parallel run (pytest-xdist) gathers what each worker recorded."""
    wire = getattr(node, "workeroutput", {}).get("distdoctor_fixes")
    if wire:
        _fixes_from_wire(wire)


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller lints what every worker saw
        workeroutput["distdoctor_fixes"] = _fixes_to_wire()
        return
    from tests.harness.runprefix import RUN, lease_file
    from tests.harness.slots import slots_dir

    try:
        os.unlink(lease_file(RUN))
    except OSError:
        pass
    shutil.rmtree(slots_dir(), ignore_errors=True)

    from distdoctor.fixlint import lint_all

    problems = lint_all(FIXES, os.path.exists)
    if not problems and not DUPLICATE_FIXES:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["fixes that do not paste and run as printed (distdoctor/fixlint.py):"]
    for fix, found in problems.items():
        lines.append(f"- from {', '.join(sorted(FIXES[fix]))[:300]}:")
        lines += [f"    {p}" for p in found]
    for test, fix in DUPLICATE_FIXES:
        lines.append(f"- {test}: the same fix is shown twice in one report: {fix!r}")
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    else:
        print("\n".join(lines), file=sys.stderr)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_INTEGRATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "integration") + os.sep


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml's addopts): the quick subset is CPU work, one worker per core;
    the integration tests mostly wait (daemons starting, bounds running out, peers timing out),
    so four workers per core overlap their waits, at most 8 (each may start a Slurm cluster). Two
    of them run the Slurm clusters' files and up to three the torch files (groups.next_scope):
    with six, one worker was left for every other integration file."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    unit = os.path.join("tests", "unit")
    only_unit = bool(config.args) and all(os.path.relpath(os.path.abspath(a.split("::")[0]), REPO).startswith(unit)
                                          for a in config.args)
    if only_unit or "not slow" in (config.getoption("markexpr", "") or ""):
        return max(1, min(cores, 8))
    return max(2, min(4 * cores, 8))


def pytest_xdist_make_scheduler(config, log):
    """Whole files to a worker, the shared Slurm cluster's files to one, in the order of
    pytest_collection_modifyitems, torch files on no more workers than there are torch slots
    (tests/harness/groups.py)."""
    from xdist.scheduler import LoadScopeScheduling

    from tests.harness.groups import group_of, next_scope
    from tests.harness.slots import default_count

    # xdist (3.6+) would hand the groups out by their number of tests, largest first: a
    # one-test file of 20 s started last. The order given at collection stands.
    config.option.loadscopereorder = False
    lanes = default_count()

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(REPO, nodeid)

        def _assign_work_unit(self, node) -> None:
            held = {other: {scope for scope, work in scopes.items() if not all(work.values())}
                    for other, scopes in self.assigned_work.items()}
            scope = next_scope(list(self.workqueue), held.get(node, set()),
                               [h for other, h in held.items() if other is not node], lanes)
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return FileGroups(config, log)


def pytest_collection_modifyitems(config, items):
    """Slow by folder: everything under tests/integration/ starts real components. The files
    are put in the order a parallel run's workers should take their groups (groups.rank), the
    files with more tests first within a rank. The Slurm group's torch files come last in it: the
    rate-judging torch file, handed out first, runs alone among torch tests meanwhile."""
    from tests.harness.groups import TORCH_FILES, rank

    order = {}
    tests = collections.Counter(item.path for item in items)
    for item in items:
        if str(item.path).startswith(_INTEGRATION):
            item.add_marker(pytest.mark.slow)
        if item.path not in order:
            path = os.path.relpath(str(item.path), REPO)
            first = rank(REPO, path)
            order[item.path] = (first, first == 0 and path.startswith(TORCH_FILES), -tests[item.path])
    items.sort(key=lambda item: order[item.path])  # stable: a file keeps its order
