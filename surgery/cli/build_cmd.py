"""`onnx-surgery build MODEL --backend B [--backend B2 ...]`: test-build an engine on each backend; a results
table (backend, precision, ok, build time, latency median/p90, accuracy per output as max abs and the relative
error's mean/p99/max, artifact, note), or JSON. A Q/DQ (INT8) model is built at int8, fp16 and fp32 unless a
precision is given (surgery.build.build_ladder), each compared against its float32 original.
Exit 0 when every requested build succeeds, 1 when any fails, 2 on bad input."""

from __future__ import annotations

import sys

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED, chatter_to_stderr
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
    p.add_argument("model")
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
    p.add_argument("--workspace-mb", type=int, default=None, help="TensorRT workspace memory pool limit")
    p.add_argument(
        "--timing-cache", default=None, metavar="FILE", help="TensorRT timing cache (read, updated)"
    )
    p.add_argument(
        "--out", default=None, metavar="DIR", help="folder for the artifacts (default: a temp folder)"
    )
    p.add_argument("--runs", type=int, default=20, help="timed runs (after --warmup runs)")
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


def print_table(reports, out=None) -> None:
    out = out or sys.stdout
    rows = []
    show_precision = any(r.precision not in ("", "fp32") for r in reports)
    for r in reports:
        lat = r.latency_ms or {}
        rows.append(
            (r.backend,)
            + ((r.precision or "-",) if show_precision else ())
            + (
                "yes" if r.ok else "NO",
                f"{r.build_seconds:.2f}",
                f"{lat['median']:.3f}" if lat else "-",
                f"{lat['p90']:.3f}" if lat else "-",
            )
        )
    head = (
        ("backend",) + (("precision",) if show_precision else ()) + ("ok", "build s", "median ms", "p90 ms")
    )
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)), file=out)
    for r, row in zip(reports, rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)), file=out)
        pad = " " * 4
        if r.label:
            print(f"{pad}builder: {r.label}", file=out)
        for name, acc in (r.accuracy or {}).items():
            print(f"{pad}accuracy {name}: {accuracy_line(acc)}", file=out)
        if r.artifact:
            print(f"{pad}artifact: {r.artifact}", file=out)
        if r.error:
            print(f"{pad}error: {r.error}" + (f" (node {r.node})" if r.node else ""), file=out)
        if r.note:
            print(f"{pad}note: {r.note}", file=out)


def run(args) -> int:
    from surgery.backends.base import BuildOptions
    from surgery.build import build_ladder, build_model
    from surgery.model import dumps, load_model
    from surgery.quantize import has_qdq

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
    if args.runs < 1 or args.warmup < 0:
        print("error: --runs must be at least 1 and --warmup at least 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    model = load_model(args.model)
    inits = {t.name for t in model.proto.graph.initializer}
    inputs = [i.name for i in model.proto.graph.input if i.name not in inits]
    try:
        profiles = parse_profiles(args.profile, inputs)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    show = not args.json and sys.stderr.isatty()

    def progress(fraction, message):
        if show:
            print(f"\r  {fraction * 100:5.1f}%  {message[:70]:70s}", end="", file=sys.stderr, flush=True)

    reports = []
    for backend in backends:
        options = BuildOptions(
            precision=args.precision or "fp32",
            profiles=profiles,
            workspace_mb=args.workspace_mb,
            timing_cache=args.timing_cache,
            out_dir=args.out,
            runs=args.runs,
            warmup=args.warmup,
            timeout_s=args.timeout,
        )
        base_dir = str(model.base_dir) if model.base_dir else None
        with chatter_to_stderr(args.json):
            if args.precision is None and has_qdq(model.proto):
                reports.extend(build_ladder(backend, model.proto, options, progress, base_dir))
            else:
                reports.append(build_model(backend, model.proto, options, progress, base_dir))
        if show:
            print("\r" + " " * 80 + "\r", end="", file=sys.stderr)
    if args.json:
        print(dumps([r.to_dict() for r in reports], indent=2))
    else:
        print_table(reports)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_REJECTED
