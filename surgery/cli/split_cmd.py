"""`onnx-surgery split MODEL -t TARGET -o DIR`: the target's supported regions as parts the target runs, the rest
as parts the fallback runs (onnxruntime unless --fallback), each a model of its own, in DIR with DIR/plan.json;
the chain is run against the original on seeded inputs.

Exit codes: 0 every target part is accepted by the target on its own and the chain reproduces the original;
1 otherwise (the plan is written all the same, saying what failed); 2 bad input (including a model that cannot
be split: no supported region, an untyped tensor at a boundary)."""

from __future__ import annotations

import sys

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED, chatter_to_stderr
from surgery.cli.options import add_model, add_targets, load


def add_parser(sub):
    p = sub.add_parser("split", help="split into target and fallback parts that chain to the original")
    add_model(p)
    add_targets(p, many=False, required=True)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the parts and plan.json")
    p.add_argument(
        "--fallback",
        default="onnxruntime",
        help="the runtime for the rest: onnxruntime (default), openvino or tvm",
    )
    p.add_argument(
        "--min-nodes",
        type=int,
        default=None,
        metavar="N",
        help="a target region with fewer compute nodes goes to the fallback (default 3, TF-TRT's minimum segment)",
    )
    p.add_argument(
        "--depth",
        choices=["parse", "build"],
        default=None,
        help="how far the target checks (default: its own)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the verification inputs (default 0)")
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME:1x3x224x224",
        help="shape of an input for the verification run (symbolic dims are 2 otherwise); repeat per input",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    return p


def _short(names: list[str], k: int = 3) -> str:
    if len(names) <= k:
        return ", ".join(names)
    return ", ".join(names[:k]) + f" … ({len(names)})"


def _bytes(n) -> str:
    return "dynamic" if n is None else f"{n:,}"


def text(plan) -> list[str]:
    """The plan in lines: parts in execution order, crossings, the figures, the verification."""
    lines = [
        f"target: {plan.target_label} [{plan.target}]; fallback: {plan.fallback}; --min-nodes {plan.min_nodes}",
        "parts, in execution order:",
    ]
    for p in plan.parts:
        verdict = f"{p.check.get('label', p.backend)}: {p.check.get('outcome', 'not checked')} alone"
        lines.append(
            f"  {p.index}. {p.file}  {p.role} on {p.backend}  {len(p.nodes)} node(s): {_short(p.nodes)}  [{verdict}]"
        )
        for reason in p.check.get("reasons", [])[:2]:
            lines.append(f"       refused: {reason}")
        built = p.build
        if built.get("depth") == "build":
            at = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in built.get("profiles", {}).items())
            head = f"       built by {built.get('builder')}" + (f" at {at}" if at else "")
            lines.append(
                head + (": ok" if built.get("ok") else f": FAILED, builder says: {built.get('words')}")
            )
        elif built.get("why"):
            lines.append(f"       {built['why']}")
        lines.append(f"       reads: {_short(p.inputs, 4) or '-'}   hands on: {_short(p.outputs, 4) or '-'}")
    if plan.crossings:
        lines.append(f"crossing tensors ({len(plan.crossings)}):")
        for c in plan.crossings:
            shape = (
                "?"
                if c.shape is None
                else "[" + ", ".join("?" if d is None else str(d) for d in c.shape) + "]"
            )
            measured = f" ({c.measured_bytes:,} in the run)" if c.bytes is None and c.measured_bytes else ""
            lines.append(
                f"  {c.name}  {c.dtype} {shape}  part {c.source} -> part(s) {', '.join(map(str, c.targets))}  "
                f"bytes: {_bytes(c.bytes)}{measured}"
            )
    share = plan.on_target / max(plan.compute_nodes, 1)
    measured = plan.measured_crossing_bytes
    lines.append(
        f"on the target: {plan.on_target} of {plan.compute_nodes} compute node(s) ({share:.0%}); crossings: "
        f"{len(plan.crossings)}; bytes crossing: {_bytes(plan.crossing_bytes)}"
        + (f" ({measured:,} at the verification inputs)" if plan.crossing_bytes is None and measured else "")
    )
    for note in plan.notes:
        lines.append(f"note: {note}")
    v = plan.verification
    if v is not None:
        lines.append(f"verification: {v.summary()}")
        for note in v.notes:
            lines.append(f"  {note}")
    return lines


def run(args) -> int:
    from surgery.backends import UnknownBackend
    from surgery.outputs import OutputError, output_folder
    from surgery.specs import parse_shapes
    from surgery.split import DEFAULT_MIN_NODES, SplitError, make_plan

    try:
        shapes = parse_shapes(args.input_shape)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    model = load(args, weights_in_file=True)  # the parts refer to the weights in the file
    try:
        folder = output_folder(args.output, inputs=model.files(), make=False)
    except OutputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with chatter_to_stderr(args.json):
            plan = make_plan(
                model,
                args.target,
                fallback=args.fallback,
                min_nodes=DEFAULT_MIN_NODES if args.min_nodes is None else args.min_nodes,
                depth=args.depth,
                seed=args.seed,
                shapes=shapes or None,
            )
    except (SplitError, UnknownBackend) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    written = plan.save(output_folder(folder, inputs=model.files()))
    if args.json:
        print(plan.to_json())
    else:
        print(f"model: {args.model} ({plan.nodes} node(s), {plan.compute_nodes} compute)")
        print("\n".join(text(plan)))
        print(f"wrote {written} and {len(plan.parts)} part(s)")
        if not plan.ok:
            why = []
            if not plan.accepted:
                why.append("a target part is not accepted (or not built) by the target on its own")
            if plan.verification is None or not plan.verification.ok:
                why.append("the chain does not reproduce the original")
            print("result: not deployable as is — " + "; ".join(why))
    return EXIT_OK if plan.ok else EXIT_REJECTED
