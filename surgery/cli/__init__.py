"""`onnx-surgery`: inspect, check, fix, upgrade, split, reduce, quantize, precision, replay, survey, build, app. One module per command in this package, each with
`add_parser(subparsers)` and `run(args) -> int`. Exit codes: 0 ok, 1 a target rejects something, 2 bad input,
3 nothing rejected but a target cannot confirm the model."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import sys
import threading
from typing import NoReturn

COMMANDS = [
    "inspect",
    "targets",
    "check",
    "fix",
    "upgrade",
    "split",
    "reduce",
    "quantize",
    "precision",
    "replay",
    "survey",
    "build",
    "app",
]  # each adds itself

EXIT_OK, EXIT_REJECTED, EXIT_BAD_INPUT, EXIT_CANNOT_CONFIRM = 0, 1, 2, 3
EXIT_CLOSED_PIPE = 141  # what a shell reports for a writer killed by SIGPIPE (128 + 13)


def exit_code(reports) -> int:
    """0 every available target accepts; 1 one rejects; 3 none rejects but one cannot confirm (an unavailable
    target does not count: `targets` says why it is off)."""
    from surgery.verdict import Outcome

    outcomes = {r.outcome for r in reports}
    if Outcome.REJECTS in outcomes:
        return EXIT_REJECTED
    if Outcome.CANNOT_CONFIRM in outcomes:
        return EXIT_CANNOT_CONFIRM
    return EXIT_OK


@contextlib.contextmanager
def chatter_to_stderr(on: bool = True):
    """While backends run: what they print on stdout goes to stderr, so stdout holds only what the command means
    to print (JSON that parses). onnxruntime prints its 'EP Error' banner with print(); native libraries write
    to file descriptor 1: both are moved."""
    if not on:
        yield
        return
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no descriptor 1 (a closed stdout): only Python's prints to move
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _command_in(argv: list[str]) -> str | None:
    """The command `argv` names, when it names one before any option (`check m.onnx`); else None."""
    first = argv[0] if argv else None
    return first if first in COMMANDS else None


class _Version(argparse.Action):
    """argparse's version action, with the version looked up only when asked for (not on every command)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from surgery.resources import package_version

        print(f"{parser.prog} {package_version()}")
        parser.exit()


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. Given the arguments, only the command they name is imported and declared (a command's
    module imports what it runs: `check` need not import `precision`'s); without one, every command is, for the
    list under --help and the error that names them."""
    wanted = _command_in(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="onnx-surgery",
        description="Graph surgery for ONNX models: see what a backend rejects, fix it with rules, verify it.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [wanted] if wanted else COMMANDS:
        mod = importlib.import_module(f"{__name__}.{name}_cmd")
        p = mod.add_parser(sub)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    try:
        return args._run(args)
    except KeyboardInterrupt:
        return 130
    except (
        BrokenPipeError
    ):  # `check … | head`: the reader has gone; say nothing more, as a killed pipe writer
        _quiet_stdout()
        return EXIT_CLOSED_PIPE
    except Exception as exc:
        # imported here, not before the command runs: surgery.model imports onnx (0.3 s), and `check` starts its
        # backend's worker first (surgery.isolate.prewarm), so that its start overlaps that import
        from surgery.model import ModelLoadError
        from surgery.outputs import OutputError

        if isinstance(exc, (ModelLoadError, OutputError)):
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise


def entry() -> NoReturn:
    """The console script's entry point and `python -m surgery`'s: the command, then `leave`."""
    leave(main())


def leave(code: int) -> NoReturn:
    """End the process with `code` once a command is done, without the interpreter's teardown: the exit
    handlers run (idle workers stopped, private folders removed, logs flushed) and stdout and stderr are
    flushed, then the process ends instead of freeing every module's objects one by one and running onnx's and
    onnxruntime's library destructors, which a finished command does not need (~0.1 s, a third of what a check
    of a small model adds to onnxruntime's own call: bench/check_overhead.py). The usual exit is taken while a
    thread that is not a daemon still runs (it waits for it) and under a profiler or tracer (`python -m cProfile
    -m surgery ...` writes its figures after the command returns)."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's; absent elsewhere: the usual exit
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    if run_exit_handlers is None or watched or any(t.is_alive() and not t.daemon for t in others):
        sys.exit(code)
    run_exit_handlers()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # `check … | head`: the reader has gone
        code = EXIT_CLOSED_PIPE
    except (OSError, ValueError):  # no stdout left to flush
        pass
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os._exit(code)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail on the closed pipe again
    (Python's documented way: docs.python.org/3/library/signal.html, note on SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
