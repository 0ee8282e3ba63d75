"""`onnx-surgery replay MODEL RECIPE -o OUT [--force] [-t T ...] [--format text|json]`: apply a saved recipe
(from the app's session or `fix --recipe`) to the model, headless, and write the result. Exit codes: 0 replayed,
the same model the recipe recorded bit for bit, and (with -t) every target accepts it; 1 it differs from the
recipe's recorded result, or a target refuses it; 2 bad input (a recipe that cannot be read, one made for another
model without --force, a step that does not apply: nothing written)."""

from __future__ import annotations

import sys

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED, chatter_to_stderr, exit_code
from surgery.cli.options import add_model, add_targets, load


def add_parser(sub):
    p = sub.add_parser("replay", help="apply a saved recipe to a model, headless (CI)")
    add_model(p)
    p.add_argument("recipe", help="a recipe file (JSON or YAML) written by `fix --recipe` or the app")
    p.add_argument("-o", "--output", required=True, help="where to write the result (a new file)")
    p.add_argument("--force", action="store_true", help="replay a recipe made for another model")
    add_targets(p, default="", also=": check the result with them")
    p.add_argument("--format", choices=["text", "json"], default="text")
    return p


def run(args) -> int:
    from surgery.backends import UnknownBackend
    from surgery.diagnose import check_model
    from surgery.model import dumps
    from surgery.outputs import OutputError, check_outputs
    from surgery.usecases.replay import replay
    from surgery.workspace import RecipeError

    model = load(args, weights_in_file=True)  # a version per step: the weights stay in the file
    try:
        out = check_outputs(model, [("-o", args.output)])["-o"]
        ws, outcome = replay(model, args.recipe, force=args.force)
    except (OutputError, RecipeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with chatter_to_stderr(args.format == "json"):
            reports = check_model(ws.current, args.target, ws.original.base_dir) if args.target else []
    except UnknownBackend as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    ws.export(out)
    same = outcome.bit_for_bit
    code = EXIT_REJECTED if same is False else exit_code(reports) if reports else EXIT_OK
    if args.format == "json":
        d = {
            "model": args.model,
            "recipe": args.recipe,
            "output": str(out),
            "exit_code": code,
            **outcome.to_dict(),
        }
        d["targets"] = [
            {"target": r.backend, "outcome": r.outcome.value, "reasons": r.reasons()[:3]} for r in reports
        ]
        print(dumps(d, indent=2))
        return code
    print(f"replayed {outcome.steps} step(s) of {args.recipe} on {args.model}")
    if not outcome.same_model:
        print(f"  forced: the recipe was made for {outcome.made_for}; this model is {outcome.original}")
    if same is None:
        print(f"  result {outcome.fingerprint} (the recipe recorded no result to compare with)")
    else:
        print(
            f"  result {outcome.fingerprint}: "
            + (
                "the recipe's result, bit for bit"
                if same
                else f"DIFFERS from the recipe's {outcome.expected}"
            )
        )
    from surgery.cli.check_cmd import headline

    for r in reports:
        print("  " + headline(r))
    print(f"wrote {args.output}")
    return code
