"""`onnx-surgery check MODEL --target T ...`: every node's verdict per backend. The backend's own words are
printed after `parser says:` / `builder says:` (quoted, verbatim), our explanation after `why:`.

Exit codes: 0 every target accepts; 1 a target rejects something; 3 nothing is rejected but a target cannot
confirm the model (unknown verdicts, e.g. a plugin this backend lacks); 2 bad input."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict

from surgery.cli import EXIT_BAD_INPUT, chatter_to_stderr, exit_code
from surgery.cli.options import add_model, add_targets, load
from surgery.verdict import Outcome, Status, is_live, speaker, where_said


def add_parser(sub):
    p = sub.add_parser("check", help="per-node verdicts of TensorRT / onnxruntime / OpenVINO / TVM")
    add_model(p)
    add_targets(p)
    p.add_argument(
        "--depth",
        choices=["parse", "build"],
        default=None,
        help="how far to go: parse (the ONNX parser / importer) or build (also build what parsed, as `build` "
        "does). Default per target: parse for tensorrt and tensorrt-static, build for onnxruntime (session "
        "creation), openvino (compile_model) and tvm (Relax build)",
    )
    p.add_argument("--format", choices=["text", "json", "sarif"], default="text")
    p.add_argument(
        "--all",
        action="store_true",
        help="list supported nodes too, and every unknown node (by default a large group of them is counted per op "
        "type)",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="do not read or write probe verdicts under ~/.cache/onnx-surgery",
    )
    return p


def _sarif(path: str, reports, suggestions: dict) -> dict:
    """SARIF 2.1.0: one result per rejected node; ruleId is the verdict code, the message the backend's words,
    the location the model file with the node as a logical location."""
    results, rules = [], {}
    for r in reports:
        for v in r.rejected + r.unknown:
            rule_id = v.code or ("REJECTED" if v.status is Status.REJECTED else "UNKNOWN")
            rules.setdefault(
                rule_id,
                {"id": rule_id, "shortDescription": {"text": f"node rejected by a backend ({rule_id})"}},
            )
            results.append(
                {
                    "ruleId": rule_id,
                    "level": "error" if v.status is Status.REJECTED else "warning",
                    "message": {"text": v.words or v.explanation or f"{r.label} rejects this node"},
                    "locations": [
                        {
                            "physicalLocation": {"artifactLocation": {"uri": path}},
                            "logicalLocations": [
                                {"name": v.node, "kind": "member", "fullyQualifiedName": f"graph/{v.node}"}
                            ],
                        }
                    ],
                    "properties": {
                        "backend": r.backend,
                        "backendLabel": r.label,
                        "outcome": r.outcome.value,
                        "status": v.status.value,
                        "stage": v.stage.value,
                        "opType": v.op_type,
                        "backendWords": v.words,
                        "wordsFrom": v.words_from,
                        "explanation": v.explanation,
                        "evidence": v.evidence.source,
                        "evidenceDetail": v.evidence.detail,
                        "checks": list(v.checks),
                        "rules": [s.rule for s in suggestions.get((r.backend, v.node), [])],
                        "rulesAtReader": {
                            s.rule: s.at
                            for s in suggestions.get((r.backend, v.node), [])
                            if s.at and not s.inside
                        },
                        "rulesInBody": {
                            s.rule: s.at for s in suggestions.get((r.backend, v.node), []) if s.inside
                        },
                    },
                }
            )
    from surgery.sarif import sarif_log

    return sarif_log(list(rules.values()), results, [path])


def _said(speaker: str, words: str, words_from: str, indent: str) -> list[str]:
    """The backend's words, verbatim, every line behind '| ', with where they come from when not this run."""
    where = f" ({where_said(words_from)})" if where_said(words_from) else ""
    return [f"{indent}{speaker}{where}:"] + [f"{indent}  | {line}" for line in words.splitlines() or [""]]


def _message_lines(r, indent: str) -> list[str]:
    lines = []
    for m in r.messages:
        head = f"{indent}{m.level} [{m.stage.value}]" + (f" {m.code}" if m.code else "")
        lines.append(head + ":")
        if m.words:
            lines += _said(speaker(r.backend, m.stage), m.words, m.words_from, indent + "  ")
        if m.explanation:
            lines.append(f"{indent}  why: {m.explanation}")
    return lines


def headline(r) -> str:
    """One line per report: outcome, depth, counts."""
    if r.outcome is Outcome.UNAVAILABLE:
        return f"{r.label} [{r.backend}]: unavailable — " + "; ".join(m.text() for m in r.messages)
    unknown = f", {len(r.unknown)} unknown" if r.unknown else ""
    return (
        f"{r.label} [{r.backend}]: {r.outcome.value} (checked to {r.depth.value}) — {len(r.rejected)} of "
        f"{len(r.verdicts)} nodes rejected{unknown}, {r.backend_calls} backend call(s), {r.seconds:.2f} s"
    )


UNKNOWN_LISTED = 5  # a group of unknown verdicts larger than this is summarised per op type (`--all`: listed)


def verdict_lines(
    r, show_all: bool = False, suggestions: dict | None = None, indent: str = "   "
) -> list[str]:
    """Every rejected node, then the unknown ones (they decide 'cannot confirm'), grouped by what was said, with the
    backend's words and our explanation apart. A large group of unknown nodes (those the parser never reached) is
    one line of counts per op type unless `show_all`. Shared by `check` and `fix`."""
    lines = _message_lines(r, indent)
    # refusals first (this run's words before those predicted or recorded), then the open verdicts, in order
    groups = sorted(r.groups(), key=lambda g: (g.status is not Status.REJECTED, not is_live(g.words_from)))
    for g in groups:
        tag = "rejected" if g.status is Status.REJECTED else "cannot confirm"
        lines.append(f"{indent}{tag} at {g.stage.value}" + (f" {g.code}" if g.code else "") + ":")
        if g.words:
            lines += _said(speaker(r.backend, g.stage), g.words, g.words_from, indent + "  ")
        if g.explanation:
            lines.append(f"{indent}  why: {g.explanation}")
        shared = g.evidence() if len(g.verdicts) > 1 else None  # said once for the group, not on every node
        if shared:
            lines.append(f"{indent}  evidence: {shared.source}: {shared.detail}")
        if g.status is Status.UNKNOWN and len(g.verdicts) > UNKNOWN_LISTED and not show_all:
            ops = Counter(v.op_type for v in g.verdicts)
            kinds = ", ".join(f"{op} ×{n}" if n > 1 else op for op, n in ops.most_common())
            lines.append(f"{indent}  - {len(g.verdicts)} nodes: {kinds} (--all lists them)")
            continue
        for v in g.verdicts:
            fix = (suggestions or {}).get((r.backend, v.node))
            fix_text = f"   fix: {', '.join(s.text() for s in fix)}" if fix else ""
            evidence = "" if shared else f" [{v.evidence.source}: {v.evidence.detail}]"
            lines.append(f"{indent}  - {v.op_type} '{v.node}'{evidence}{fix_text}")
    if show_all:
        for v in r.verdicts:
            if v.status is Status.SUPPORTED:
                note = f" — {v.explanation}" if v.explanation else ""
                lines.append(f"{indent}  ok {v.op_type} '{v.node}'{note}")
    return lines


def _text(reports, model, show_all: bool, suggestions: dict) -> str:
    from surgery.partition import partition

    lines = []
    for r in reports:
        lines.append("== " + headline(r))
        if r.outcome is Outcome.UNAVAILABLE:
            continue
        lines += verdict_lines(r, show_all, suggestions)
        if r.verdicts and r.rejected:
            lines.append(f"   partitions: {partition(model, r).summary()}")
    return "\n".join(lines)


def _prewarm(targets: list[str]) -> None:
    """Start the isolated worker of the targets that check in one (OpenVINO, TVM, TensorRT), importing their
    backends, before anything else: its start then overlaps this process's imports and the model's reading
    (surgery.isolate.prewarm). One worker for all: the targets are checked one after another, each call in it."""
    from surgery.backends import WORKER_IMPORTS
    from surgery.isolate import prewarm

    modules = [m for t in dict.fromkeys(targets) for m in WORKER_IMPORTS.get(t, ())]
    if modules:
        prewarm(list(dict.fromkeys(modules)))


def run(args) -> int:
    targets = args.target or ["onnxruntime"]
    _prewarm(targets)
    from surgery.backends import UnknownBackend
    from surgery.backends.probe import CACHE, use_disk_cache
    from surgery.diagnose import check_model
    from surgery.model import dumps
    from surgery.partition import partition

    model = load(args)
    previous = CACHE.directory
    if not args.no_cache:
        use_disk_cache()
    try:
        with chatter_to_stderr():  # stdout is the report's alone (JSON that parses)
            reports = check_model(
                model.proto,
                targets,
                model.base_dir,
                depth=args.depth,
                path=model.file_as_read(),  # a backend that reads files reads this one, not a copy
                remember=False,  # one check per target in this process: no fingerprint, no cache
            )
    except UnknownBackend as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        use_disk_cache(previous)
    rules, suggestions = [], {}
    refused = any(v.status is not Status.SUPPORTED for r in reports for v in r.verdicts)
    if refused:  # else there is nothing to suggest a rule for: the rules are not read
        from surgery.rulebook import RuleError, load_rules
        from surgery.rulebook.suggest import suggestions_for

        try:
            rules = load_rules(None)
        except RuleError as exc:  # suggestions are a help, the verdicts stand without them
            print(f"warning: no fix suggestions: {exc}", file=sys.stderr)
        suggestions = suggestions_for(model.proto, reports, rules)
    if args.format == "json":
        out = []
        for r in reports:
            d = r.to_dict()
            d["available"] = r.outcome is not Outcome.UNAVAILABLE
            d["partition"] = partition(model.proto, r).to_dict() if r.verdicts else None
            d["summary"] = {
                "outcome": r.outcome.value,
                "nodes": len(r.verdicts),
                "rejected": len(r.rejected),
                "unknown": len(r.unknown),
                "unknown_by_op": dict(Counter(v.op_type for v in r.unknown).most_common()),
                "model_refusals": [m.text() for m in r.refusals],
            }
            for v in d["verdicts"]:
                found = suggestions.get((r.backend, v["node"]), [])
                v["rules"] = [s.rule for s in found]
                v["rules_at_reader"] = {
                    s.rule: s.at for s in found if s.at and not s.inside
                }  # applied at a reader of the node
                v["rules_in_body"] = {s.rule: s.at for s in found if s.inside}  # at a node inside its body
            out.append(d)
        print(dumps({"model": args.model, "reports": out}, indent=2))
    elif args.format == "sarif":
        print(dumps(_sarif(args.model, reports, suggestions), indent=2))
    else:
        print(_text(reports, model.proto, args.all, suggestions))
        by = defaultdict(list)
        for r in reports:
            by[r.outcome].append(r.backend)
        parts = [f"{len(by[Outcome.ACCEPTS])} of {len(reports)} target(s) accept the model"]
        parts += [f"{o.value}: {', '.join(b)}" for o, b in by.items() if o is not Outcome.ACCEPTS]
        print("\nsummary: " + "; ".join(parts))
    return exit_code(reports)
