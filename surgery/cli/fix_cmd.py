"""`onnx-surgery fix MODEL --target T [--rules DIR ...] -o OUT`: apply matching rules until nothing changes,
verify each step against the model before it, check the targets again, and write a new model (never the
input). Exit codes as `check`: 0 every target accepts the result, 1 something is still rejected, 3 nothing is
rejected but a target cannot confirm, 2 bad input (including a broken rule file: its message names the file, the
line and the field). With --require-verified, 1 also when a step or the whole could not be verified.
--preview applies nothing and writes nothing: what the step each matching rule would take removes and adds, and
each target's rejected nodes before and after (exit code as `check` on the model as it is)."""

from __future__ import annotations

import sys

from surgery.cli import EXIT_BAD_INPUT, EXIT_REJECTED, chatter_to_stderr, exit_code
from surgery.cli.options import add_model, add_targets, load


def add_parser(sub):
    p = sub.add_parser("fix", help="apply rules to a fixpoint, verify each step, check again")
    add_model(p)
    add_targets(p, also="; only rules for these targets apply")
    p.add_argument(
        "--rules",
        action="append",
        default=None,
        metavar="DIR",
        help="rules folder (repeat; a later folder's rule replaces an earlier one with the same id; "
        "default: $ONNX_SURGERY_RULES, else the built-in rules/)",
    )
    p.add_argument(
        "--depth",
        choices=["parse", "build"],
        default=None,
        help="check depth before and after, as `check --depth` (default per target)",
    )
    p.add_argument("-o", "--output", help="where to write the fixed model (required unless --dry-run)")
    p.add_argument("--recipe", help="also write the recipe (the steps, replayable) to this file")
    p.add_argument("--dry-run", action="store_true", help="show what would change; write nothing")
    p.add_argument(
        "--preview",
        action="store_true",
        help="apply nothing, write nothing: for each rule that matches now, the step it would take (one per rule, "
        "on every node it matches), the nodes that step removes and adds, and each target's rejected nodes "
        "before and after",
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME:1x3x224x224",
        help="an input's shape, for rules that ask for one (freeze-unshaped-input); repeat per input",
    )
    p.add_argument(
        "--input-value",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="pin a graph input that only carries configuration to a value (k=5, sizes=[1,3,64,64]): it becomes "
        "a constant (a recorded step) before the rules run, so the folding rules can fold what it feeds; repeat",
    )
    p.add_argument(
        "--only-rejected",
        action="store_true",
        help="apply rules only to nodes a target rejects (or cannot decide); leave accepted nodes alone",
    )
    p.add_argument(
        "--require-verified",
        action="store_true",
        help="exit 1 when a step, or the fixed model against the original, could not be verified (onnxruntime "
        "cannot run it: a custom op, a plugin node), even where every target accepts the result",
    )
    p.add_argument(
        "--allow-cut",
        action="store_true",
        help="take a step that loses an original output (a cut: the host then runs what it removed); without it "
        "such a step is undone. A cut taken still exits 1: the model no longer computes what it did",
    )
    p.add_argument(
        "--allow-regress",
        action="store_true",
        help="take a step that turns another target from accepting to rejecting (without it: undone, and named)",
    )
    p.add_argument("--max-steps", type=int, default=200, help="stop after this many steps (default 200)")
    p.add_argument(
        "--format",
        choices=["text", "json", "sarif"],
        default="text",
        help="json: the outcome on stdout (targets before and after, steps with their verification, cuts, steps "
        "undone and why, promises broken); sarif: what is still refused, each step undone (fix/cut, "
        "fix/beyond-bound, ...) and each cut taken (fix/cut-taken), for CI; the lines a person reads go to stderr",
    )
    return p


def _verdict_lines(reports) -> list[str]:
    from surgery.cli.check_cmd import headline, verdict_lines

    lines = []
    for r in reports:
        lines.append("  " + headline(r))
        lines += verdict_lines(r, indent="    ")
    return lines


def run(args) -> int:
    if args.format == "text":
        return _run(args)[0]
    from surgery.model import dumps

    with chatter_to_stderr():  # the lines a person reads go to stderr; stdout is the JSON or SARIF alone
        code, done = _run(args)
    if done is None:
        return code
    outcome, written = done
    if args.format == "json":
        result = outcome.to_dict(args.require_verified)
        print(dumps({"model": args.model, "exit_code": code, **result, "written": written}, indent=2))
    else:
        print(dumps(_sarif(args, outcome), indent=2))
    return code


def _sarif(args, outcome) -> dict:
    """`check`'s SARIF of the fixed model (what is still refused), with a result for each step `fix` undid for a
    broken promise (fix/cut, fix/beyond-bound, fix/did-not-cure, fix/regresses: warnings, the model was kept) and
    each cut taken with --allow-cut (fix/cut-taken: an error, the model no longer computes what it did)."""
    from surgery.cli.check_cmd import _sarif as check_sarif

    doc = check_sarif(args.model, outcome.after, {})
    run_ = doc["runs"][0]
    rules = {r["id"]: r for r in run_["tool"]["driver"]["rules"]}
    location = [{"physicalLocation": {"artifactLocation": {"uri": args.model}}}]

    def add(rule_id: str, level: str, text: str, properties: dict) -> None:
        rules.setdefault(
            rule_id, {"id": rule_id, "shortDescription": {"text": f"fix: {rule_id.split('/')[1]}"}}
        )
        run_["results"].append(
            {
                "ruleId": rule_id,
                "level": level,
                "message": {"text": text},
                "locations": location,
                "properties": properties,
            }
        )

    for kind, line in outcome.undone:
        add(f"fix/{kind}", "warning", line, {"undone": True})
    for a in outcome.cuts:
        text = f"{a.proposal.rule.id}: a cut taken (--allow-cut): {'; '.join(a.cut)}"
        add("fix/cut-taken", "error", text, {"rule": a.proposal.rule.id, "host": a.host})
    run_["tool"]["driver"]["rules"] = list(rules.values())
    return doc


def _run(args) -> tuple[int, tuple | None]:
    from surgery.backends import UnknownBackend
    from surgery.diagnose import check_model
    from surgery.fixes import FixError
    from surgery.outputs import OutputError, check_outputs
    from surgery.rulebook import RuleError, applies_to, load_rules
    from surgery.rulebook.loader import default_dirs
    from surgery.rulebook.tracer import unrepaired
    from surgery.specs import parse_input_values, parse_shapes
    from surgery.usecases.fix import FixInputError, FixRequest, fix, verified
    from surgery.workspace import Step, Workspace

    if not args.dry_run and not args.preview and not args.output:
        print("error: give -o OUT (or --dry-run, or --preview)", file=sys.stderr)
        return EXIT_BAD_INPUT, None
    try:
        shapes = parse_shapes(args.input_shape)
        pins = parse_input_values(args.input_value)
        rules = load_rules(args.rules)
    except (RuleError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT, None
    model = load(args, weights_in_file=True)  # a version per step: the weights stay in the file
    writes = not (args.dry_run or args.preview)
    try:
        written = check_outputs(model, [("-o", args.output if writes else None), ("--recipe", args.recipe)])
    except OutputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT, None
    ws = Workspace(model, kept_states=0)  # headless: no history to look back at
    targets = args.target or ["onnxruntime"]
    base = ws.original.base_dir
    try:
        before = check_model(ws.current, targets, base, depth=args.depth)
    except UnknownBackend as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT, None
    folders = ", ".join(str(d) for d in (args.rules or default_dirs()))
    active = [r for r in rules if applies_to(r, targets)]
    print(f"model: {args.model} ({len(ws.current.graph.node)} nodes)")
    print(f"rules: {len(rules)} from {folders}; {len(active)} apply to {', '.join(targets)}")
    if not active and rules:
        named = sorted({t for r in rules for t in r.targets})
        print(
            f"  Note: no rule is for {', '.join(targets)}; the rules are for {', '.join(named)} (give --target)"
        )
    print("before:")
    print("\n".join(_verdict_lines(before)))
    # NAME:dims gives that input's shape; a bare 1x3x224x224 gives every input that needs one
    values = {"shape": shapes.get("", shapes)} if shapes else {}
    print("steps, previewed (none is applied):" if args.preview else "steps:")
    if args.preview:
        for name, value in pins.items():  # the user's own steps first, as `fix` applies them
            try:
                ws.apply(Step("pin_input", {"input": name, "value": value}, note="--input-value"))
            except FixError as exc:
                print(f"error: --input-value {name}: {exc}", file=sys.stderr)
                return EXIT_BAD_INPUT, None
            print(
                f"  {len(ws.recipe)}. pinned input '{name}' to {value!r} [changes-semantics: no longer an input]"
            )
        _preview(ws, active, targets, values, args.only_rejected, args.depth)
        print("preview: nothing applied, nothing written")
        return exit_code(before), None

    def log(done):
        p = done.proposal
        label = p.safety if verified(done.verification) else f"{p.safety}, not verified"
        label = f"CUT, {label}" if done.cut else label
        print(f"  {len(ws.recipe)}. applied {p.rule.id} on {p.where()} [{label}]: {p.step.describe()}")
        print(f"     {done.verification.summary() if done.verification else 'not verified'}")
        for line in done.cut:
            print(f"     cut: {line}")
        if done.host:
            print(f"     the host must now run: {', '.join(done.host)}")
        for line in done.regressed:
            print(f"     regressed (--allow-regress): {line}")

    def log_pin(name, value):
        print(
            f"  {len(ws.recipe)}. pinned input '{name}' to {value!r} [changes-semantics: no longer an input]"
        )

    request = FixRequest(
        targets,
        rules,
        depth=args.depth,
        values=values,
        pins=pins,
        only_rejected=args.only_rejected,
        max_steps=args.max_steps,
        allow_cut=args.allow_cut,
        allow_regress=args.allow_regress,
    )
    try:
        outcome = fix(ws, request, before=before, log=log, log_pin=log_pin)
    except FixInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT, None
    if not outcome.applied and not outcome.pinned:
        print("  (no rule applies)")
    for line in outcome.refused:
        print(f"  not applied: {line}")
    print(f"after ({len(outcome.applied)} step(s)):")
    print("\n".join(_verdict_lines(outcome.after)))
    for _, line in unrepaired(ws.current, outcome.after, rules):
        print(f"  {line}")
    if outcome.overall is not None:
        print(f"original vs fixed: {outcome.overall.summary()}")
    if not args.dry_run:
        ws.export(written["-o"])
        print(f"wrote {args.output}")
        if args.recipe:
            ws.save_recipe(written["--recipe"])
            print(f"wrote {args.recipe}")
    else:
        print("dry run: nothing written")
    written = [] if args.dry_run else [args.output, *([args.recipe] if args.recipe else [])]
    broken = outcome.promises_broken(args.require_verified)
    code = EXIT_REJECTED if broken else exit_code(outcome.after)
    for line in broken:
        print(f"{line}; exit {code}")
    return code, (outcome, written)


def _preview(ws, rules, targets, values, only_rejected, depth) -> None:
    """The step each matching rule would take first on the current model (its proposals on every node as one
    step, as `fix` applies them), previewed by surgery.preview.preview_step."""
    from surgery.diagnose import check_model
    from surgery.preview import preview_step
    from surgery.rulebook import propose
    from surgery.rulebook.engine import batch
    from surgery.rulebook.matcher import Context
    from surgery.verdict import Status

    def only(model) -> set[str]:
        reports = check_model(model, targets, ws.original.base_dir, depth=depth)
        return {v.node for r in reports for v in r.verdicts if v.status is not Status.SUPPORTED}

    only = only if only_rejected else None
    ctx = Context(ws.current)
    eligible = only(ws.current) if only else None
    groups: dict[str, list] = {}
    for p in propose(ws.current, rules, targets, values, ctx=ctx):
        if eligible is None or p.node in eligible:
            groups.setdefault(p.rule.id, []).append(p)
    if not groups:
        print("  (no rule applies)")
    for group in groups.values():
        for p in group:
            if p.step is None:
                print(f"  {p.rule.id} on {p.where()}: needs a value for {p.needs}")
        ready = [p for p in group if p.step is not None]
        if not ready:
            continue
        p = batch(ready, ctx.facts.index)
        print(f"  {p.rule.id} on {p.where()} [{p.safety}]: {p.step.describe()}")
        shown = preview_step(ws.current, p.step, targets, ws.original.base_dir, depth=depth)
        if shown.refused is None:
            for what, keys in (("removes", shown.removed), ("adds", shown.added)):
                more = f", ... {len(keys)} in all" if len(keys) > 8 else ""
                print(f"     {what} {len(keys)} node(s)" + (f": {', '.join(keys[:8])}{more}" if keys else ""))
        for line in shown.verdict_lines():
            print(f"     {line}")
