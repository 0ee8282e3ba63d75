"""`onnx-surgery build MODEL --backend B`: test-build an engine; the results table, or JSON."""

from __future__ import annotations

import json
import sys

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED


def add_parser(sub):
    p = sub.add_parser("build", help="test-build an engine: log, time, artifact, latency and accuracy")
    p.add_argument("model")
    p.add_argument(
        "--backend",
        "-b",
        action="append",
        default=None,
        help="tensorrt, onnxruntime, openvino, tvm (repeat; default: onnxruntime)",
    )
    prec = p.add_mutually_exclusive_group()
    for flag in ("fp16", "bf16", "int8"):
        prec.add_argument(f"--{flag}", dest="precision", action="store_const", const=flag)
    p.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="INPUT:MIN:OPT:MAX",
        help="optimization profile for a dynamic input, shapes like 1x3x224x224",
    )
    p.add_argument("--workspace-mb", type=int, default=None)
    p.add_argument("--timing-cache", default=None, help="TensorRT timing cache file (read and updated)")
    p.add_argument("--out", default=None, help="folder for the artifacts")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", action="store_true")
    return p


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.lower().replace(",", "x").split("x"))


def run(args) -> int:
    from surgery.backends.base import BuildOptions
    from surgery.build import build_model
    from surgery.model import load_model

    model = load_model(args.model)
    profiles = {}
    for spec in args.profile:
        parts = spec.rsplit(":", 3)
        if len(parts) != 4:
            print(
                f"error: --profile '{spec}': expected INPUT:MIN:OPT:MAX, e.g. input:1x3x224x224:4x3x224x224:"
                "8x3x224x224",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        profiles[parts[0]] = tuple(_shape(x) for x in parts[1:])
    reports = []
    for backend in args.backend or ["onnxruntime"]:
        options = BuildOptions(
            precision=args.precision or "fp32",
            profiles=profiles,
            workspace_mb=args.workspace_mb,
            timing_cache=args.timing_cache,
            out_dir=args.out,
            runs=args.runs,
            timeout_s=args.timeout,
        )

        def progress(fraction, message):
            if not args.json and sys.stderr.isatty():
                print(f"\r  {fraction * 100:5.1f}%  {message[:60]:60s}", end="", file=sys.stderr, flush=True)

        reports.append(build_model(backend, model.proto, options, progress, str(model.base_dir)))
        if not args.json and sys.stderr.isatty():
            print(file=sys.stderr)
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        print(
            f"{'backend':12s} {'ok':4s} {'build s':>8s} {'median ms':>10s} {'p90 ms':>8s}  accuracy (max abs / mean rel)"
        )
        for r in reports:
            lat = r.latency_ms or {}
            acc = "; ".join(
                f"{k}: {v['max_abs']:.2g} / {v['mean_rel']:.2g}" for k, v in (r.accuracy or {}).items()
            )
            med = f"{lat['median']:.3f}" if lat else "-"
            p90 = f"{lat['p90']:.3f}" if lat else "-"
            print(
                f"{r.backend:12s} {'yes' if r.ok else 'NO':4s} {r.build_seconds:8.2f} {med:>10s} {p90:>8s}  {acc or '-'}"
            )
            if r.artifact:
                print(f"{'':12s} artifact: {r.artifact}")
            if r.error:
                print(f"{'':12s} error: {r.error}" + (f" (node {r.node})" if r.node else ""))
            if r.note:
                print(f"{'':12s} note: {r.note}")
    return EXIT_OK if all(r.ok for r in reports) else EXIT_REJECTED
