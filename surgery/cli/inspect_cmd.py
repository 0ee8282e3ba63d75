"""`onnx-surgery inspect MODEL [--json]`."""

from __future__ import annotations

from surgery.cli.options import add_model, load
from surgery.inspect import format_inspection, inspect_model
from surgery.model import dumps


def add_parser(sub):
    p = sub.add_parser("inspect", help="versions, ops, inputs/outputs, weights — without reading the weights")
    add_model(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def run(args) -> int:
    report = inspect_model(load(args))
    print(dumps(report.to_dict(), indent=2) if args.json else format_inspection(report))
    return 0
