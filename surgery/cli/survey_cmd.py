"""`onnx-surgery survey PATH… -t T [-t T2 …] [--fix] [--rules DIR …] [--depth parse|build] -o OUT [--workers N]
[--ray [ADDRESS]] [--timeout S] [--format text|json|sarif]`: every model of a folder (a model zoo, a file list)
against every target, each cell isolated with a time limit and cached (surgery.usecases.survey). Writes
OUT/report.json, OUT/report.html (one self-contained page) and OUT/report.sarif; progress goes to stderr.

Exit codes: 0 no model is refused by any target (after the fixes, with --fix); 1 one is; 2 bad input."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED
from surgery.cli.options import add_targets

REPORT_FILES = ("report.json", "report.html", "report.sarif")


def add_parser(sub):
    p = sub.add_parser("survey", help="a folder or model zoo × targets in one run (cached, isolated, Ray)")
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="folders (searched for .onnx), .onnx files, or lists"
    )
    add_targets(p)
    p.add_argument("--fix", action="store_true", help="run `fix` on every cell a target rejects")
    p.add_argument(
        "--rules",
        action="append",
        default=None,
        metavar="DIR",
        help="rules folder, as `fix --rules` (repeat; default $ONNX_SURGERY_RULES, else the built-in rules/)",
    )
    p.add_argument("--depth", choices=["parse", "build"], default=None, help="as `check --depth`")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="the folder the reports are written to"
    )
    p.add_argument("--workers", type=int, default=1, help="cells at once (local processes, or Ray CPUs)")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the cells as Ray tasks: no ADDRESS starts a local Ray runtime, ADDRESS joins a cluster "
        "(the models must be at the same paths on every node); pip install 'onnx-surgery[ray]'",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per cell (default 300)")
    p.add_argument(
        "--format",
        choices=["text", "json", "sarif"],
        default="text",
        help="what goes on stdout: a summary (text), report.json (json) or the SARIF (sarif)",
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        help="where cells are cached (default $ONNX_SURGERY_SURVEY_CACHE, else ~/.cache/onnx-surgery/survey)",
    )
    p.add_argument("--no-cache", action="store_true", help="compute every cell; read and write no cache")
    p.add_argument(
        "--answers-from-test-data",
        action="store_true",
        help="with --fix: answer a rule's question about an input's value from the model's test_data_set_0",
    )
    p.add_argument("--max-steps", type=int, default=100, help="with --fix: at most this many steps per cell")
    return p


def _out_folder(path: str, models) -> Path:
    """OUT as a folder the reports may go to: new, empty, or holding only an earlier survey's reports (replaced);
    never a folder that holds a surveyed model."""
    from surgery.outputs import OutputError, output_folder

    p = Path(path)
    if p.is_dir() and not p.is_symlink() and all(f.name in REPORT_FILES for f in p.iterdir()):
        for _, model in models:
            if model.parent == p.resolve():
                raise OutputError(f"-o {p} holds the input {model}; give a new or empty folder")
        return p
    return output_folder(p, inputs=[m for _, m in models])


class _Progress:
    """One line on stderr per second at most (and the last), with the counts and the slowest cells."""

    def __init__(self):
        self.last = 0.0
        self.line = ""

    def __call__(self, p) -> None:
        self.line = p.line()
        now = time.monotonic()
        if now - self.last >= 1.0 or p.done == p.total:
            self.last = now
            print(self.line, file=sys.stderr, flush=True)


def _text(report: dict, out: Path) -> str:
    from surgery.usecases.survey.cells import final_outcome

    lines = []
    fixed = report.get("fix")
    for t, s in report["summary"]["targets"].items():
        counts = ", ".join(f"{n} {o}" for o, n in s["after"].items())
        line = f"{t}: {counts}"
        if fixed:
            line += (
                f" after fix (before: {', '.join(f'{n} {o}' for o, n in s['before'].items())}); repaired "
                f"{s['repaired']}/{s['fixed']}"
            )
        lines.append(line)
    refused = [
        (m["name"], t)
        for m in report["models"]
        for t, c in m["targets"].items()
        if final_outcome(c) == "rejects"
    ]
    if refused:
        lines.append(f"refused{' after fix' if fixed else ''}: {len(refused)} cell(s)")
        lines += [f"  {name} [{t}]" for name, t in refused[:20]]
        if len(refused) > 20:
            lines.append(f"  … {len(refused) - 20} more (see report.html)")
    top = report["summary"]["top_reasons"][:5]
    if top:
        lines.append("top refusal reasons:")
        for r in top:
            rules = f" — rules: {', '.join(r['rules'])}" if r["rules"] else " — no rule answers it"
            lines.append(f"  {r['models']} model(s) [{', '.join(r['targets'])}]: {r['reason'][:160]}{rules}")
    lines.append(f"wrote {out / 'report.json'}, {out / 'report.html'}, {out / 'report.sarif'}")
    return "\n".join(lines)


def run(args) -> int:
    from surgery.model import dumps
    from surgery.outputs import OutputError, write_atomic
    from surgery.usecases.survey import prepare, survey
    from surgery.usecases.survey.report import to_html, to_sarif
    from surgery.usecases.survey.request import SurveyInputError, SurveyRequest

    request = SurveyRequest(
        paths=args.paths,
        targets=args.target or ["onnxruntime"],
        fix=args.fix,
        rules_dirs=args.rules,
        depth=args.depth,
        workers=args.workers,
        timeout=args.timeout,
        engine="local" if args.ray is None else "ray",
        ray_address=args.ray or None,
        cache_dir=args.cache_dir,
        use_cache=not args.no_cache,
        max_steps=args.max_steps,
        answers=args.answers_from_test_data,
    )
    try:
        models, _ = prepare(request)
        out = _out_folder(args.output, models)
        progress = _Progress()
        print(
            f"survey: {len(models)} model(s) × {len(request.targets)} target(s) "
            f"({request.engine}{', ' + str(request.workers) + ' workers' if request.workers > 1 else ''})",
            file=sys.stderr,
        )
        result = survey(request, progress=progress)
    except (SurveyInputError, OutputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = result.report
    write_atomic(out / "report.json", dumps(report, indent=1))
    write_atomic(out / "report.html", to_html(report))
    sarif = to_sarif(report)
    write_atomic(out / "report.sarif", dumps(sarif, indent=1))
    stats = report["stats"]
    print(
        f"done: {stats['cells']} cells, {stats['computed']} computed, {stats['cached']} from the cache, "
        f"{stats['errors']} errors, {stats['seconds']} s"
        + (" (interrupted: run again to resume)" if result.interrupted else ""),
        file=sys.stderr,
    )
    if args.format == "json":
        print(dumps(report, indent=1))
    elif args.format == "sarif":
        print(dumps(sarif, indent=1))
    else:
        print(_text(report, out))
    if result.interrupted:
        return 130
    return EXIT_REJECTED if result.refused else EXIT_OK
