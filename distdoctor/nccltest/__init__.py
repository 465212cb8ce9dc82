"""`distdoctor nccl-test`: a tiny all_reduce across every rank that never hangs.

    srun -N2 --ntasks-per-node=4 distdoctor nccl-test
    mpirun -np 8 distdoctor nccl-test          torchrun --nproc-per-node=4 -m distdoctor nccl-test
    distdoctor nccl-test --local 2

torch is imported only inside this package's run path, never by `distdoctor check`.
Modules: rendezvous (who am I, where do we meet), interface (which address), fingerprint,
compare (cross-rank), mesh (pairwise TCP), hostmesh (who probes whom, the verdict), collectives, bench,
store (the sealed rendezvous), clock (the bound, time by phase), arrival/backend/results (judgements),
session (what a rank's phases share; its ending), lead and follow (the phases of rank 0 and the others),
report, watchdog (the outer bound), local (--local N).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import secrets
import sys
import time
import warnings

from distdoctor import limits
from distdoctor.model import EXIT_ERROR, EXIT_OUTPUT, EXIT_USAGE

# Followers wait this much past rank 0's bound, so that rank 0 reports first.
FOLLOWER_GRACE_S = 2.0
MAX_LOCAL = 256  # ranks --local starts on one machine, each a Python process importing torch
INSTALL_HINT = ("nccl-test needs PyTorch, which is not installed in this Python ({python}).\n"
                "Run distdoctor from the Python environment your training jobs use, or install torch here:\n"
                "  {python} -m pip install torch\n"
                "(CPU-only, to try it out: {python} -m pip install torch --index-url https://download.pytorch.org/whl/cpu)")


DESCRIPTION = """\
A tiny all_reduce across every rank of a job that always ends within --timeout, names the
ranks and hosts that never arrived or cannot reach each other, and compares what every rank sees.

  srun -N2 --ntasks-per-node=4 distdoctor nccl-test
  mpirun -np 8 -x MASTER_ADDR=node1 distdoctor nccl-test
  python -m torch.distributed.run --nproc-per-node=4 -m distdoctor nccl-test
  distdoctor nccl-test --local 2
"""
EPILOG = """\
exit codes (every rank returns rank 0's):
  0   passed (warnings allowed)
  1   a check failed
  2   incomplete: a step hit the time bound or distdoctor failed
  64  usage error, or not started by a launcher (use --local N)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--timeout", type=limits.arg_seconds, default=60.0,
                        help="bound for the whole test in seconds; every rank ends within it (default 60)")
    parser.add_argument("--local", type=limits.arg_count(MAX_LOCAL, low=0), default=0, metavar="N",
                        help="start N ranks on this machine (no launcher needed)")
    parser.add_argument("--port", type=limits.arg_count(65535, low=1), default=0, metavar="PORT",
                        help="with --local: the rendezvous port (default: MASTER_PORT when set, else a free port)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                        help="force a backend (default: nccl when every rank has CUDA, else gloo)")
    parser.add_argument("--mesh", nargs="?", const="auto", choices=("auto", "full"), default=None,
                        help="check TCP and time a transfer between hosts first (default: on when the job spans "
                        "hosts); every pair of hosts up to 32 hosts, above that a plan in which every host sends "
                        "and receives ('full': every pair whatever the size)")
    parser.add_argument("--no-mesh", action="store_false", dest="mesh", help="skip the mesh check")
    parser.add_argument("--localise", action="store_true",
                        help="after the collectives, run rounds of host-pair tests that name a bad host or link "
                             "(they run by themselves when the all_reduce fails; 3 hosts or more)")
    parser.add_argument("--bench", action="store_true", help="all_reduce message-size sweep (like nccl-tests)")
    parser.add_argument("-b", "--minbytes", default="1K", help="--bench: smallest size (default 1K)")
    parser.add_argument("-e", "--maxbytes", default="16M", help="--bench: largest size (default 16M)")
    parser.add_argument("-f", "--stepfactor", type=limits.arg_count(1 << 20, low=2), default=4,
                        help="--bench: size multiplier (default 4)")
    parser.add_argument("--iters", type=limits.arg_count(100000), default=5,
                        help="--bench: timed iterations per size (default 5)")
    parser.add_argument("--format", choices=("console", "json", "prometheus"), default="console")
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="rank 0 writes the report here (atomically) instead of stdout")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="every rank logs its progress to stderr; OK findings in full")


def _validate(args: argparse.Namespace) -> str:
    from distdoctor.nccltest import bench

    if not args.timeout > 0:
        return "--timeout must be positive"
    if args.local < 0:
        return "--local needs a number of ranks"
    if args.iters < 1:
        return "--iters must be at least 1"
    try:
        args.bench_sizes = bench.sizes(bench.parse_size(args.minbytes), bench.parse_size(args.maxbytes),
                                       args.stepfactor)
    except ValueError as exc:
        return f"bench sizes: {exc}"
    return ""


def run(args: argparse.Namespace) -> int:
    started, started_wall = time.monotonic(), time.time()
    problem = _validate(args)
    if problem:
        print(f"distdoctor nccl-test: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "output", None):
        from distdoctor import output

        try:
            output.check_writable(args.output)  # before the job's ranks wait on this one
        except output.OutputError as exc:
            print(f"distdoctor nccl-test: {exc}", file=sys.stderr)
            return EXIT_OUTPUT
    if importlib.util.find_spec("torch") is None:
        print(INSTALL_HINT.format(python=sys.executable), file=sys.stderr)
        return EXIT_ERROR

    from distdoctor.host import Host
    from distdoctor.nccltest import local as local_mod
    from distdoctor.nccltest.rendezvous import RendezvousError, endpoint, identity

    host = Host()
    children = None
    given = host.env
    if args.local:
        port = local_mod.chosen_port(args.port, host.env)
        env = dict(host.env, DISTDOCTOR_JOB_TOKEN=secrets.token_hex(16))
        children = local_mod.Children(local_mod.forwarded_argv(args), env, args.local, port)
        host = Host(env=local_mod.child_env(env, 0, args.local, port))
    try:
        try:
            ident = identity(host.env)
            where = endpoint(host.env, ident, os.getppid())
        except RendezvousError as exc:
            print(f"distdoctor nccl-test: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.local:
            where = local_mod.honest_endpoint(where, given, args.port)
        from distdoctor.nccltest import report as report_mod

        return report_mod.final_code(_run_rank(args, host, ident, where, started, started_wall, children))
    finally:
        if children is not None:
            children.wait(min(time.monotonic() + 1.0, started + args.timeout + FOLLOWER_GRACE_S))
            children.kill()


def _run_rank(args, host, ident, where, started, started_wall, children) -> int:
    if not args.verbose:
        # c10d logs every retry and timeout with C++ stack frames; the report says it better.
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    from distdoctor.nccltest.clock import Clock
    from distdoctor.nccltest.watchdog import Watchdog

    clock = Clock(started, args.timeout)
    clock.enter("start", started)
    try:
        from distdoctor.nccltest.phases import execute
        from distdoctor.nccltest.session import Rank
    except ImportError as exc:  # a broken install of distdoctor itself
        print(f"distdoctor nccl-test: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from distdoctor.nccltest import report as report_mod

    report_mod.prepare(args.format)
    rank = Rank(args, host, ident, where, clock, started_wall, None)
    # Armed before `import torch`: on a slow shared filesystem the import alone can use the
    # bound, and the report then says so.
    deadline = clock.deadline + (0.0 if ident.rank == 0 else FOLLOWER_GRACE_S)
    watchdog = Watchdog(deadline, rank.last_words)
    if children is not None:
        watchdog.on_exit(children.kill)
    try:
        rank.set_phase("import torch")
        try:
            with warnings.catch_warnings():
                # torch warns on every rank when numpy is missing; nccl-test never touches numpy.
                warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
                import torch
        except Exception as exc:  # installed but broken (missing libraries, ABI mismatch)
            watchdog.cancel()
            print(f"distdoctor nccl-test: torch is installed but cannot be imported: {exc}\n"
                  f"{INSTALL_HINT.format(python=sys.executable)}", file=sys.stderr)
            return EXIT_ERROR
        rank.torch = torch
        code = execute(rank)
    except KeyboardInterrupt:
        code = EXIT_ERROR
        try:
            code = rank.interrupted()
        except BaseException:  # a second Ctrl-C while reporting: end now, still with the code
            pass
    except Exception as exc:  # a bug here must still end the rank with a clear line and a bound
        print(f"distdoctor nccl-test: rank {ident.rank}: internal error: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        code = EXIT_ERROR
        if ident.rank == 0:
            try:
                code = max(rank.crash(exc), EXIT_ERROR)
            except Exception:  # the crash report itself failed: the line above is all there is
                pass
    watchdog.cancel()
    if children is not None and code == 0:
        codes = children.wait(min(time.monotonic() + 2.0, deadline + FOLLOWER_GRACE_S))
        if any(c != 0 for c in codes):
            code = EXIT_ERROR
    return code
