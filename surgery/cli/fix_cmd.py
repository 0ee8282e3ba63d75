"""`onnx-surgery fix MODEL --target T -o OUT`: apply matching rules until nothing changes, verify each step,
check again, and write a new model (never the input)."""

from __future__ import annotations

import sys
from pathlib import Path

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED


def add_parser(sub):
    p = sub.add_parser("fix", help="apply rules to a fixpoint, verify each step, check again")
    p.add_argument("model")
    p.add_argument("--target", "-t", action="append", default=None, help="as in `check` (repeat)")
    p.add_argument(
        "--rules", action="append", default=None, help="rules folder (repeat; default: built-in rules)"
    )
    p.add_argument("-o", "--output", help="where to write the fixed model (required unless --dry-run)")
    p.add_argument("--recipe", help="also write the recipe (the steps) to this file")
    p.add_argument("--dry-run", action="store_true", help="show what would change; write nothing")
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME:1x3x224x224",
        help="shape for rules that need one (freeze-unshaped-input)",
    )
    return p


def _counts(reports) -> str:
    return ", ".join(
        f"{r.backend}: {'accepts' if not r.rejected and r.accepted is not False else f'{len(r.rejected)} rejected'}"
        for r in reports
    )


def run(args) -> int:
    from surgery.diagnose import check_model
    from surgery.rulebook import RuleError, load_rules, run_rules
    from surgery.workspace import Workspace

    if not args.dry_run and not args.output:
        print("error: give -o OUT (or --dry-run)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        rules = load_rules(args.rules)
    except RuleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    shapes = {}
    for spec in args.input_shape:
        name, _, dims = spec.rpartition(":")
        try:
            shapes[name] = [int(d) for d in dims.replace(",", "x").split("x")]
        except ValueError:
            print(f"error: --input-shape '{spec}': expected NAME:1x3x224x224", file=sys.stderr)
            return EXIT_BAD_INPUT
    ws = Workspace.open(args.model)
    if args.output and Path(args.output).resolve() == Path(args.model).resolve():
        print(
            "error: -o must differ from the input model; the original is never overwritten", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    targets = args.target or ["onnxruntime"]
    before = check_model(ws.current, targets, ws.original.base_dir)
    print(f"before: {_counts(before)}")
    values = {"shape": next(iter(shapes.values()))} if len(shapes) == 1 else {}

    def log(done):
        p = done.proposal
        print(f"  applied {p.rule.id} on {p.op_type} '{p.node}' [{p.safety}]")
        print(f"    {done.verification.summary()}")

    applied, refused = run_rules(ws, rules, targets, values=values, log=log)
    for line in refused:
        print(f"  not applied: {line}")
    after = check_model(ws.current, targets, ws.original.base_dir)
    print(f"after:  {_counts(after)}  ({len(applied)} step(s))")
    for r in after:
        for v in r.rejected:
            print(f"  still rejected by {r.backend}: {v.op_type} '{v.node}': {v.message}")
    if not args.dry_run:
        ws.export(args.output)
        print(f"wrote {args.output}")
        if args.recipe:
            ws.save_recipe(args.recipe)
            print(f"wrote {args.recipe}")
    return EXIT_REJECTED if any(r.rejected or r.accepted is False for r in after) else EXIT_OK
