"""`onnx-surgery upgrade MODEL --from T1 --to T2 [--json] [--fix -o OUT]`: what changes for MODEL between two
targets (a bare version such as 10.15 is tensorrt-static@10.15), node by node: newly refused (with the new
target's words and the rules that answer them), newly accepted, refused at another stage. --fix applies the
rules that answer the new refusals (the fix use case, each step verified) and writes OUT.
Exit 1 when a node is newly refused on T2 (with --fix: still refused after the fix), else 0; 2 on bad input, in
one line."""

from __future__ import annotations

import json
import sys

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED, chatter_to_stderr
from surgery.cli.options import add_model, load


def add_parser(sub):
    p = sub.add_parser(
        "upgrade",
        help="what changes between two targets (e.g. TensorRT 10.15 -> 11.5), node by node",
        description="Compare MODEL's verdicts on two targets: nodes newly refused on --to (with its words and "
        "the rules that answer them), newly accepted, or refused at another stage. A bare version (10.15, 11) "
        "is tensorrt-static@VERSION. Exit 1 when something is newly refused.",
    )
    add_model(p)
    p.add_argument("--from", dest="source", required=True, metavar="T1", help="the target upgraded from")
    p.add_argument("--to", dest="target", required=True, metavar="T2", help="the target upgraded to")
    p.add_argument("--json", action="store_true", help='print {"from", "to", "changes": [...]} as JSON')
    p.add_argument(
        "--fix", action="store_true", help="apply the rules that answer the new refusals; needs -o OUT"
    )
    p.add_argument("-o", "--output", help="where --fix writes the fixed model")
    p.add_argument(
        "--rules",
        action="append",
        default=None,
        metavar="DIR",
        help="rules folder (repeat; default: $ONNX_SURGERY_RULES, else the built-in rules/)",
    )
    return p


def _line(c) -> str:
    head = f"  {c.kind}: {c.op_type} '{c.node}' ({c.before} -> {c.after})"
    out = [head]
    if c.words:
        out.append(f"      words: {c.words.splitlines()[0]}")
    if c.after != "accepted" and c.explanation:
        out.append(f"      why: {c.explanation}")
    if c.rules:
        out.append(f"      rules: {', '.join(c.rules)}")
    return "\n".join(out)


def run(args) -> int:
    from surgery.backends import UnknownBackend
    from surgery.model import save_model
    from surgery.outputs import OutputError, check_outputs
    from surgery.rulebook import RuleError, load_rules
    from surgery.usecases.upgrade import target_id, upgrade
    from surgery.workspace import Workspace

    if args.fix and not args.output:
        print("error: --fix needs -o OUT (the input is never overwritten)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.output and not args.fix:
        print("error: -o is where --fix writes; give --fix too", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        rules = load_rules(args.rules)
    except (RuleError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    model = load(args, weights_in_file=True)  # --fix makes versions: the weights stay in the file
    try:
        check_outputs(model, [("-o", args.output)])
    except OutputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    source, target = target_id(args.source), target_id(args.target)
    ws = Workspace(model, kept_states=0)  # headless: no history to look back at
    try:
        with chatter_to_stderr(args.json):
            outcome = upgrade(ws, source, target, rules, fix=args.fix)
    except (UnknownBackend, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    code = EXIT_REJECTED if _still_refused(outcome) else EXIT_OK
    if args.fix:
        original = ws.original
        original.check_unchanged()  # the weights written are read from its file
        save_model(ws.current, args.output, original.base_dir, own_file=original.own_file)
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=2))
        if args.fix:  # the JSON keeps its shape; what the fix did goes to stderr
            print(_fix_summary(outcome, args.output), file=sys.stderr)
        return code
    print(f"model: {args.model}: {outcome.before.label} -> {outcome.after.label}")
    if not outcome.changes:
        print("  no node changes its verdict")
    for c in outcome.changes:
        print(_line(c))
    n = len(outcome.newly_refused)
    print(f"{n} newly refused, {len(outcome.changes) - n} other change(s)")
    if args.fix:
        print(_fix_summary(outcome, args.output))
    return code


def _still_refused(outcome) -> list[str]:
    """The newly refused nodes; after a fix, those the fixed model still has refused."""
    new = [c.node for c in outcome.newly_refused]
    if outcome.fixed is None:
        return new
    rejected = {v.node for r in outcome.fixed.after for v in r.rejected}
    return [n for n in new if n in rejected]


def _fix_summary(outcome, output: str) -> str:
    fixed = outcome.fixed
    if fixed is None:
        return f"fix: no rule answers the new refusals; {output} is the model unchanged"
    still = [v.node for r in fixed.after for v in r.rejected]
    steps = ", ".join(f"{a.proposal.rule.id} on {a.proposal.where()}" for a in fixed.applied) or "none"
    line = f"fix: rules {', '.join(outcome.fix_rules)}; steps: {steps}; wrote {output}"
    if still:
        line += f"; still refused on {outcome.target}: {', '.join(still)}"
    else:
        line += f"; {outcome.target} accepts every node"
    return line
