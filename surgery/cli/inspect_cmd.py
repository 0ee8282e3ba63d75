"""`onnx-surgery inspect MODEL [--json]`."""

from __future__ import annotations

from surgery.inspect import format_inspection, inspect_model
from surgery.model import dumps, load_model


def add_parser(sub):
    p = sub.add_parser("inspect", help="versions, ops, inputs/outputs, weights — without reading the weights")
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--max-bytes", type=int, default=None, help="refuse models larger than this (bytes)")
    return p


def run(args) -> int:
    report = inspect_model(load_model(args.model, max_bytes=args.max_bytes))
    print(dumps(report.to_dict(), indent=2) if args.json else format_inspection(report))
    return 0
