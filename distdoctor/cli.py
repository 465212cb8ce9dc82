"""Command line: builds the parser from the command table (distdoctor/commands/), dispatches, and
maps signals and output errors to exit codes. Each command's body is its own module."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Sequence

from distdoctor import __version__, output, signals
from distdoctor.commands import COMMANDS, load
from distdoctor.commands.common import UsageError
from distdoctor.model import EXIT_CODES_HELP, EXIT_INTERRUPTED, EXIT_OUTPUT, EXIT_USAGE


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own code (2) would collide with EXIT_ERROR
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with command given, one where only that command has its options:
    building every command's options imports nccl-test's and log's modules on every run. The
    top-level --help lists the commands and needs none of them."""
    parser = _Parser(prog="distdoctor", description="Diagnose distributed deep-learning clusters.",
                     epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"distdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (_module, help_text) in COMMANDS.items():
        if command is None or command == name:
            module = load(name)
            raw = getattr(module, "RAW_EPILOG", True)
            cmd = sub.add_parser(name, help=help_text, description=getattr(module, "DESCRIPTION", None),
                                 epilog=getattr(module, "EPILOG", None),
                                 formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter)
            module.add_arguments(cmd)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The command is the first word that is not an option: the top-level parser has no option
    # that takes a value. A word that names no command, or none (--help), builds no command's
    # options; the parser refuses the first with the list of commands.
    first = next((a for a in argv if not a.startswith("-")), "")
    parser = build_parser(first)
    args = parser.parse_args(argv)
    if args.command not in COMMANDS:
        parser.print_help()
        return EXIT_USAGE
    module = load(args.command)
    if getattr(module, "OWN_SIGNALS", False):
        try:
            return _finish(module.run(args, None), None)
        except UsageError as exc:
            print(f"distdoctor: {exc}", file=sys.stderr)
            return _finish(EXIT_USAGE, None)
        except output.OutputError as exc:
            print(f"distdoctor: {exc}", file=sys.stderr)
            return _finish(EXIT_OUTPUT, None)
        except BrokenPipeError:  # `distdoctor log ... | head -1`
            return _finish(EXIT_OUTPUT, None)
        except KeyboardInterrupt:  # Ctrl-C: an exit code, not a traceback
            print("distdoctor: interrupted by SIGINT", file=sys.stderr)
            return _finish(EXIT_INTERRUPTED, None)
    from distdoctor import reaper
    from distdoctor.engine import Interrupted

    signals.raise_on_signals()
    reaper.arm_process()
    signals.DEFERRED.clear()
    out = output.ReservedStdout()
    try:
        code = module.run(args, out)
    except UsageError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except output.OutputError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        code = EXIT_OUTPUT
    except BrokenPipeError:  # `distdoctor list | head -1`
        code = EXIT_OUTPUT
    except Interrupted as exc:  # before any check ran (config, packs) or while writing
        print(f"distdoctor: interrupted by {exc.signal_name}", file=sys.stderr)
        code = signals.exit_code_for(exc.signum)
    signals.exit_hard_on_second_signal()
    return _finish(code, out)


def _finish(code: int, out: output.ReservedStdout | None) -> int:
    from distdoctor import reaper

    # Before os._exit below, which skips atexit: no tool a check started outlives the run.
    reaper.kill_all(exiting=True)
    abandoned = any(t.daemon and t.is_alive() for t in threading.enumerate())
    if out is not None and not abandoned:
        out.restore()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None when Python started with the descriptor closed
                stream.flush()
        except (OSError, ValueError):
            pass
    if abandoned:
        # A check or pack was abandoned at its deadline: do not let interpreter shutdown wait on it.
        os._exit(code)
    return code
