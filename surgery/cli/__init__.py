"""`onnx-surgery`: inspect, check, fix, build, app. One module per command in this package, each with
`add_parser(subparsers)` and `run(args) -> int`. Exit codes: 0 ok, 1 a target rejects something, 2 bad input,
3 nothing rejected but a target cannot confirm the model."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ["inspect", "targets", "check", "fix", "split", "reduce", "build", "app"]  # each adds itself

EXIT_OK, EXIT_REJECTED, EXIT_BAD_INPUT, EXIT_CANNOT_CONFIRM = 0, 1, 2, 3


def exit_code(reports) -> int:
    """0 every available target accepts; 1 one rejects; 3 none rejects but one cannot confirm (an unavailable
    target does not count: `targets` says why it is off)."""
    from surgery.backends.base import Outcome

    outcomes = {r.outcome for r in reports}
    if Outcome.REJECTS in outcomes:
        return EXIT_REJECTED
    if Outcome.CANNOT_CONFIRM in outcomes:
        return EXIT_CANNOT_CONFIRM
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnx-surgery",
        description="Graph surgery for ONNX models: see what a backend rejects, fix it with rules, verify it.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        mod = importlib.import_module(f"{__name__}.{name}_cmd")
        p = mod.add_parser(sub)
        p.set_defaults(_run=mod.run)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("onnx-surgery")
    except PackageNotFoundError:
        return "dev"


def main(argv: list[str] | None = None) -> int:
    from surgery.model import ModelLoadError

    args = build_parser().parse_args(argv)
    try:
        return args._run(args)
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
