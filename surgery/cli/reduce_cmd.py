"""`onnx-surgery reduce MODEL -t TARGET -o OUT`: the smallest model the target still refuses with the same code
and message (Polygraphy's `debug reduce`, automatic), for a bug report.

Exit codes: 0 a reduced model was written that the target refuses the same way (also when the time limit cut
the search short: it is then the smallest found so far, and says so); 1 the target does not refuse the model
(or the given node): nothing to reduce, nothing written; 2 bad input."""

from __future__ import annotations

import sys

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED, chatter_to_stderr
from surgery.cli.options import add_model, add_targets, load


def add_parser(sub):
    p = sub.add_parser("reduce", help="the smallest model the target still refuses the same way")
    add_model(p)
    add_targets(p, many=False, required=True)
    p.add_argument("-o", "--output", required=True, help="where to write the reduced model")
    p.add_argument(
        "--mode",
        choices=["bisect", "linear"],
        default="bisect",
        help="bisect (default): binary search on how much comes before the failing node, then one node at a time; "
        "linear: one node at a time from the start (more checks, no assumption that the failure is monotone)",
    )
    p.add_argument(
        "--node", default=None, help="the rejected node whose refusal to keep (default: the first one)"
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=300.0,
        metavar="S",
        help="stop after S seconds with the smallest failing model found so far (default 300)",
    )
    p.add_argument(
        "--depth", choices=["parse", "build"], default=None, help="check depth (default: the target's)"
    )
    p.add_argument("--json", action="store_true")
    return p


def run(args) -> int:
    from surgery.backends import UnknownBackend
    from surgery.cli.check_cmd import _said
    from surgery.model import dumps
    from surgery.outputs import OutputError, check_outputs
    from surgery.reduce import NothingToReduce, ReduceError, reduce_model
    from surgery.verdict import speaker

    if not (0 < args.time_limit < float("inf")):  # NaN fails every comparison
        print(f"error: --time-limit {args.time_limit}: give a number of seconds above 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    model = load(args)
    try:
        out = check_outputs(model, [("-o", args.output)])["-o"]
    except OutputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with chatter_to_stderr(args.json):
            result = reduce_model(
                model,
                args.target,
                node=args.node,
                mode=args.mode,
                time_limit=args.time_limit,
                depth=args.depth,
            )
    except NothingToReduce as exc:
        print(f"nothing to reduce: {exc}")
        return EXIT_REJECTED
    except (ReduceError, UnknownBackend) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    written = result.save(out, model.base_dir)
    if args.json:
        d = result.to_dict()
        d["output"] = str(written)
        print(dumps(d, indent=2))
        return EXIT_OK
    f = result.failure
    from surgery.verdict import Stage

    print(f"model: {args.model}")
    print(f"target: {result.label} [{result.target}]")
    how = "rejected" if f.status == "rejected" else "failed (cannot confirm)"
    print(f"refusal kept: {f.where()}, {how} at {f.stage} {f.code}:")
    if f.words:
        print("\n".join(_said(speaker(result.target, Stage(f.stage)), f.words, f.words_from, "  ")))
    if f.explanation:
        print(f"  why: {f.explanation}")
    print(
        f"nodes: {result.nodes_before} -> {result.nodes_after} ({result.mode}, {result.checks} check(s), "
        f"{result.seconds:.1f} s)"
    )
    print(f"  kept: {', '.join(result.kept[:12])}{' …' if len(result.kept) > 12 else ''}")
    print(f"  graph inputs: {', '.join(result.inputs) or '-'}")
    if result.folded:
        print(
            f"  constants held by value: {', '.join(result.folded[:8])}{' …' if len(result.folded) > 8 else ''}"
        )
    if result.stopped:
        print(f"  stopped: {result.stopped}")
    elif result.minimal:
        print("  minimal: removing any one more node loses this refusal")
    print(f"wrote {written}")
    return EXIT_OK
