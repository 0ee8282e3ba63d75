"""`onnx-surgery build MODEL --backend B [--backend B2 ...]`: test-build an engine on each backend; a results
table (backend, precision, ok, build time, latency median/p90, accuracy per output as max abs and the relative
error's mean/p99/max, artifact, note), or JSON. A Q/DQ (INT8) model is built at int8, fp16 and fp32 unless a
precision is given (surgery.backends.build.build_ladder), each compared against its float32 original.
With --profile every backend that runs here is timed at the profile's min, opt and max shapes (same seeded
inputs). --tune-trials N tunes TVM with MetaSchedule on this CPU and shows the untuned latency beside the tuned.
Exit 0 when every requested build succeeds, 1 when any fails, 2 on bad input (a profile that names no input
of the model or contradicts its static dims: nothing is built or written)."""

from __future__ import annotations

import sys

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED, chatter_to_stderr
from surgery.cli.options import add_model, load
from surgery.specs import PROFILE_EXAMPLE, parse_profiles

BACKENDS = ("tensorrt", "onnxruntime", "openvino", "tvm")


def add_parser(sub):
    p = sub.add_parser(
        "build",
        help="test-build an engine: log, build time, artifact, latency and accuracy",
        description="Test-build MODEL on each --backend. TensorRT is full TensorRT where installed with a GPU, "
        "else TensorRT-RTX (builds ahead of time without a GPU; its engine is not run here). A Q/DQ (INT8) "
        "model, e.g. from `onnx-surgery quantize`, is built at int8 next to its float32 original at fp16 and "
        "fp32 (its Q/DQ pairs taken out), unless a precision flag picks one; accuracy is against that float32 "
        "original, as max abs error and the relative error's mean, p99 and max.",
    )
    add_model(p)
    p.add_argument(
        "--backend",
        "-b",
        action="append",
        default=None,
        metavar="BACKEND",
        help=f"{', '.join(BACKENDS)}, or all (repeat for several; default: onnxruntime)",
    )
    prec = p.add_mutually_exclusive_group()
    for flag in ("fp16", "bf16", "int8"):
        prec.add_argument(f"--{flag}", dest="precision", action="store_const", const=flag)
    p.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="INPUT:MIN:OPT:MAX",
        help=f"optimization profile for a dynamic input, e.g. {PROFILE_EXAMPLE} (repeat per input)",
    )
    p.add_argument(
        "--tune-trials",
        type=int,
        default=0,
        metavar="N",
        help="TVM: tune with MetaSchedule for N trials on this CPU (default 0: untuned); the report shows "
        "untuned and tuned latency, and tuned tasks are reused from the tuning database on the next build",
    )
    p.add_argument(
        "--tune-dir",
        default=None,
        metavar="DIR",
        help="TVM tuning database (default: tvm-tuning/ beside --timing-cache, else "
        "~/.cache/onnx-surgery/tvm-tuning)",
    )
    p.add_argument("--workspace-mb", type=int, default=None, help="TensorRT workspace memory pool limit")
    p.add_argument(
        "--timing-cache", default=None, metavar="FILE", help="TensorRT timing cache (read, updated)"
    )
    p.add_argument(
        "--out", default=None, metavar="DIR", help="folder for the artifacts (default: a temp folder)"
    )
    p.add_argument(
        "--runs",
        type=int,
        help="timed runs, after --warmup runs, whatever they take (default: up to 20 within --time-budget)",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds of timing per engine when --runs is not given (at least 3 runs; default 5)",
    )
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per build")
    p.add_argument("--json", action="store_true", help="print the reports as JSON")
    return p


def available_backends() -> list[str]:
    """The builders whose backend is installed here (TensorRT: tensorrt or tensorrt_rtx)."""
    import importlib.util

    modules = {"tensorrt": ("tensorrt", "tensorrt_rtx"), "onnxruntime": ("onnxruntime",)}
    modules.update(openvino=("openvino",), tvm=("tvm",))
    return [b for b in BACKENDS if any(importlib.util.find_spec(m) for m in modules[b])]


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def accuracy_line(acc: dict[str, float]) -> str:
    """max abs, then the relative error distribution (surgery.verify): mean / p99 / max."""
    line = f"max abs {_fmt(acc['max_abs'])}, mean rel {_fmt(acc['mean_rel'])}"
    if "p99_rel" in acc:
        line += f" (rel error p99 {_fmt(acc['p99_rel'])}, max {_fmt(acc['max_rel'])})"
    return line


def _point(r, point: str) -> str:
    entry = (r.latency_points or {}).get(point) or {}
    return f"{entry['median']:.3f}" if "median" in entry else "-"


def precision_hint(r, model: str) -> str | None:
    """For a reduced-precision build whose error passes the precision command's default tolerance: the one line
    that offers it (it finds the nodes that break accuracy and keeps them in float32)."""
    from surgery.usecases.precision import DEFAULT_TOLERANCE

    worst = max((acc.get("mean_rel", 0.0) for acc in (r.accuracy or {}).values()), default=0.0)
    if r.precision not in ("fp16", "bf16", "int8") or not worst > DEFAULT_TOLERANCE:
        return None
    return (
        f"next: mean rel error {_fmt(worst)} at {r.precision} is over {DEFAULT_TOLERANCE:g}: onnx-surgery "
        f"precision {model} --{r.precision} -o OUT finds the nodes that break it and keeps them in float32"
    )


def _emulated(model, precision: str, path: str) -> None:
    """What an engine that keeps every intermediate in `precision` computes (surgery.usecases.precision's
    emulation): a backend's own run may hide it (onnxruntime's CPU provider computes many fp16 ops in fp32)."""
    from surgery.text import error_line
    from surgery.usecases.precision import DEFAULT_TOLERANCE, all_reduced

    try:
        error, origins = all_reduced(model.proto, precision, model.base_dir)
    except Exception as exc:  # the builds stand; only the emulation is missing
        print(f"emulated {precision} engine: not run: {error_line(exc)}")
        return
    where = (
        f"; inf/NaN first at {', '.join(origins[:5])}" + (" …" if len(origins) > 5 else "") if origins else ""
    )
    print(
        f"emulated {precision} engine (every intermediate stored in {precision}, on this CPU): worst mean rel "
        f"error {_fmt(error)}{where}"
    )
    if not error <= DEFAULT_TOLERANCE:  # inf and NaN included
        print(
            f"next: onnx-surgery precision {path} --{precision} -o OUT finds the nodes that break it and keeps "
            "them in float32"
        )


def tuning_line(r) -> str:
    """MetaSchedule's work in one line: untuned -> tuned median, trials, reused tasks, the database."""
    t = r.tuning
    untuned, tuned = t.get("untuned_ms") or {}, r.latency_ms or {}
    line = ""
    if untuned and tuned:
        line = f"untuned {untuned['median']:.3f} ms -> tuned {tuned['median']:.3f} ms median"
        line += f" (x{untuned['median'] / tuned['median']:.2f}); "
    line += f"{t['trials_run']} new trial(s) of a budget of {t['trials_budget']}"
    if t.get("trials_failed"):
        line += f", {t['trials_failed']} of them failed"
    line += " (MetaSchedule"
    line += f", cost model {t['cost_model']})" if t.get("cost_model") else ")"
    line += f", {t['tasks_reused']} of {t['tasks']} task(s) reused from the database {t['database']}"
    return line


def print_table(reports, out=None, model: str = "MODEL") -> None:
    out = out or sys.stdout
    rows = []
    show_precision = any(r.precision not in ("", "fp32") for r in reports)
    show_points = any(r.latency_points for r in reports)
    show_tuning = any(r.tuning for r in reports)
    for r in reports:
        lat = r.latency_ms or {}
        untuned = (r.tuning or {}).get("untuned_ms") or {}
        rows.append(
            (r.backend,)
            + ((r.precision or "-",) if show_precision else ())
            + (
                "yes" if r.ok else "NO",
                f"{r.build_seconds:.2f}",
                f"{lat['median']:.3f}" if lat else "-",
                f"{lat['p90']:.3f}" if lat else "-",
            )
            + ((f"{untuned['median']:.3f}" if untuned else "-",) if show_tuning else ())
            + (tuple(_point(r, p) for p in ("min", "opt", "max")) if show_points else ())
        )
    head = (
        ("backend",)
        + (("precision",) if show_precision else ())
        + ("ok", "build s", "median ms", "p90 ms")
        + (("untuned ms",) if show_tuning else ())
        + (("min ms", "opt ms", "max ms") if show_points else ())
    )
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)), file=out)
    for r, row in zip(reports, rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)), file=out)
        pad = " " * 4
        if r.label:
            print(f"{pad}builder: {r.label}", file=out)
        lat = r.latency_ms or {}
        if "runs" in lat:
            stop = (
                f", stopped by the {lat['budget_s']:g} s budget (--runs N for exactly N)"
                if "budget_s" in lat
                else ""
            )
            print(f"{pad}timed: {lat['runs']} run(s){stop}", file=out)
        for name, acc in (r.accuracy or {}).items():
            print(f"{pad}accuracy {name}: {accuracy_line(acc)}", file=out)
        if (hint := precision_hint(r, model)) is not None:
            print(f"{pad}{hint}", file=out)
        if r.artifact:
            print(f"{pad}artifact: {r.artifact}", file=out)
        for point, entry in (r.latency_points or {}).items():
            shapes = ", ".join(f"{n} {s}" for n, s in entry["shapes"].items())
            if "error" in entry:
                print(f"{pad}at {point} ({shapes}): not run: {entry['error']}", file=out)
            else:
                err = entry.get("worst_mean_rel")
                print(
                    f"{pad}at {point} ({shapes}): median {entry['median']:.3f} ms, p90 {entry['p90']:.3f} ms"
                    + (f", worst mean rel error {_fmt(err)}" if err is not None else ""),
                    file=out,
                )
        if r.tuning:
            print(f"{pad}tuning: {tuning_line(r)}", file=out)
        if r.error:
            print(f"{pad}error: {r.error}" + (f" (node {r.node})" if r.node else ""), file=out)
        if r.note:
            print(f"{pad}note: {r.note}", file=out)


def run(args) -> int:
    from surgery.backends.base import BuildOptions
    from surgery.backends.build import check_profiles
    from surgery.model import dumps
    from surgery.usecases.build import BuildRequest, build

    backends = args.backend or ["onnxruntime"]
    if "all" in backends:
        backends = available_backends()
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        print(
            f"error: no builder for {', '.join(unknown)}. Note: available: {', '.join(BACKENDS)}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if (args.runs is not None and args.runs < 1) or args.warmup < 0 or not args.time_budget > 0:
        print(
            "error: --runs must be at least 1, --warmup at least 0 and --time-budget above 0", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    if args.tune_trials < 0:
        print("error: --tune-trials must be 0 (untuned) or more", file=sys.stderr)
        return EXIT_BAD_INPUT
    model = load(args)
    inits = {t.name for t in model.proto.graph.initializer}
    inputs = [i.name for i in model.proto.graph.input if i.name not in inits]
    try:
        profiles = parse_profiles(args.profile, inputs)
        check_profiles(model.proto, profiles)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    show = not args.json and sys.stderr.isatty()

    last = [""]

    def progress(fraction, message):
        if show:
            print(f"\r  {fraction * 100:5.1f}%  {message[:70]:70s}", end="", file=sys.stderr, flush=True)
        elif (
            message.startswith("tvm: tuning") and message != last[0]
        ):  # a log, not a bar: tuning takes a while
            last[0] = message
            print(f"  {message}", file=sys.stderr, flush=True)

    options = BuildOptions(
        precision=args.precision or "fp32",
        profiles=profiles,
        workspace_mb=args.workspace_mb,
        timing_cache=args.timing_cache,
        out_dir=args.out,
        runs=args.runs or 20,
        time_budget_s=None if args.runs else args.time_budget,
        warmup=args.warmup,
        timeout_s=args.timeout,
        tune_trials=args.tune_trials,
        tune_dir=args.tune_dir,
    )
    request = BuildRequest(backends, options, precision_asked=args.precision is not None)
    with chatter_to_stderr(args.json):
        reports = build(
            model.proto,
            request,
            base_dir=str(model.base_dir) if model.base_dir else None,
            progress_for=lambda backend: progress,
        ).reports
    if show:
        print("\r" + " " * 80 + "\r", end="", file=sys.stderr)
    if args.json:
        print(dumps([r.to_dict() for r in reports], indent=2))
    else:
        print_table(reports, model=args.model)
        if args.precision in ("fp16", "bf16"):
            _emulated(model, args.precision, args.model)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_REJECTED
