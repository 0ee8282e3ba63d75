"""`onnx-surgery precision MODEL --fp16|--bf16|--int8 -o OUT`: find the nodes that break accuracy in reduced
precision and keep exactly those in float32 (surgery.usecases.precision), written as one recipe step. Exit 0 the
result is within the tolerance, 1 it is not, 2 bad input (nothing is written)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED
from surgery.cli.options import add_model, load


def add_parser(sub):
    from surgery.usecases.precision import DEFAULT_CALIB, DEFAULT_TOLERANCE

    p = sub.add_parser(
        "precision",
        help="keep in float32 exactly the nodes that break fp16 / bf16 / INT8 accuracy",
        description="Emulate the model in reduced precision node by node, as an engine computes it (every "
        "intermediate rounded to fp16 / bf16, with inf past the format's range; INT8 as the Q/DQ nodes "
        "`quantize` writes), not as onnxruntime's CPU provider runs a float16 model (it computes many float16 "
        "ops in float32 and hides overflow). Then find the smallest set of nodes kept in float32 that brings "
        "every output within --tolerance (mean relative error): nodes whose values pass the format's range, "
        "then the most sensitive ones (the error when only that node runs reduced). Written as one replayable "
        "step: casts in the graph (fix mixed_precision; INT8: quantize_int8 with --exclude), with the same set "
        "as trtexec --layerPrecisions for weakly typed TensorRT builds.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status: 0 within the tolerance, 1 not within it, 2 bad input (nothing written)",
    )
    add_model(p)
    fmt = p.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--fp16", dest="precision", action="store_const", const="fp16", help="float16")
    fmt.add_argument("--bf16", dest="precision", action="store_const", const="bf16", help="bfloat16")
    fmt.add_argument("--int8", dest="precision", action="store_const", const="int8", help="INT8 Q/DQ")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="the mixed-precision model (a new file)"
    )
    p.add_argument(
        "--calib",
        default=DEFAULT_CALIB,
        metavar="DIR|FILE.npz|random:N",
        help=f"inputs to emulate on (and INT8 calibration data), as `quantize` takes them (default {DEFAULT_CALIB})",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        metavar="T",
        help=f"largest mean relative error allowed on every output (default {DEFAULT_TOLERANCE})",
    )
    p.add_argument(
        "--keep", nargs="+", action="extend", default=[], metavar="NODE", help="nodes kept in float32 anyway"
    )
    p.add_argument(
        "--samples", type=int, default=4, metavar="N", help="calibration samples emulated (default 4)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of random:N inputs (default 0)")
    p.add_argument(
        "--no-sensitivity",
        dest="sensitivity",
        action="store_false",
        help="skip the per-node runs (faster on large models; the set found may be larger)",
    )
    p.add_argument("--recipe", metavar="FILE", help="also write the recipe (one replayable step)")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    return p


def _progress():
    """(fraction, message) to stderr: a rewritten line on a terminal, else a line every few seconds."""
    tty = sys.stderr.isatty()
    last = [0.0, ""]
    started = time.monotonic()

    def show(fraction: float, message: str) -> None:
        if tty:
            print(f"\r  {fraction * 100:5.1f}%  {message[:70]:70s}", end="", file=sys.stderr, flush=True)
            return
        now = time.monotonic()
        head = message.split(":")[0]
        if now - started < 2.0:
            return  # a short run says nothing
        if now - last[0] >= 5.0 or head != last[1]:
            last[0], last[1] = now, head
            print(f"  {fraction * 100:5.1f}%  {message}", file=sys.stderr, flush=True)

    def clear() -> None:
        if tty:
            print("\r" + " " * 80 + "\r", end="", file=sys.stderr)

    return show, clear


def _numbers(o) -> str:
    bad = f", {o.nonfinite} inf/NaN" if o.nonfinite else ""
    return f"mean rel {o.mean_rel:.3g}, max abs {o.max_abs:.3g} ({o.of_range:.2%} of range){bad}"


def run(args) -> int:
    from surgery.cli import chatter_to_stderr
    from surgery.fixes import FixError
    from surgery.outputs import OutputError, check_outputs
    from surgery.usecases.precision import PrecisionInputError, PrecisionRequest, search
    from surgery.workspace import Workspace

    def bad(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT

    if not (args.tolerance >= 0):
        return bad(f"--tolerance must be 0 or more, got {args.tolerance}")
    if args.samples < 1:
        return bad(f"--samples must be 1 or more, got {args.samples}")
    model = load(args)
    try:
        written = check_outputs(model, [("-o", args.output), ("--recipe", args.recipe)])
    except OutputError as exc:
        return bad(str(exc))
    request = PrecisionRequest(
        args.precision,
        calib=args.calib,
        tolerance=args.tolerance,
        keep=list(args.keep),
        seed=args.seed,
        samples=args.samples,
        sensitivity=args.sensitivity,
    )
    show, clear = _progress()
    try:
        with chatter_to_stderr(args.json):
            outcome = search(model.proto, request, base_dir=model.base_dir, progress=show)
    except PrecisionInputError as exc:
        clear()
        return bad(str(exc))
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own refusal of the model, in one line
        from surgery.text import error_line

        clear()
        return bad(f"the model cannot be emulated: {error_line(exc)}")
    clear()
    ws = Workspace(model, kept_states=0)  # headless: no history to look back at
    written_check = None
    if outcome.step is not None:
        try:
            with chatter_to_stderr(args.json):
                new = ws.apply(outcome.step)
        except FixError as exc:
            return bad(str(exc))
        if args.precision == "int8":
            written_check = _int8_as_written(model.proto, new, request)
        ws.export(written["-o"])
        if args.recipe:
            ws.save_recipe(written["--recipe"])
    within = outcome.within and (written_check is None or written_check <= args.tolerance)
    if args.json:
        d = outcome.to_dict()
        d["written"] = str(written["-o"]) if outcome.step is not None else None
        d["int8_as_written_error"] = written_check
        d["within_tolerance"] = within
        print(json.dumps(d, indent=2, default=float))
        return EXIT_OK if within else EXIT_REJECTED
    fmt = args.precision
    print(
        f"{fmt}: {outcome.samples} sample(s) from {args.calib}, tolerance {args.tolerance:g} (mean relative "
        "error, every output)"
    )
    print(f"everything in {fmt}:")
    for o in outcome.before.outputs:
        print(f"  {o.name}: {_numbers(o)}")
    if outcome.overflow_origins:
        print(f"  inf/NaN first appears at: {', '.join(outcome.overflow_origins[:8])}")
    total = sum(1 for n in outcome.nodes)
    print(f"kept in float32: {len(outcome.kept)} of {total} float node(s)")
    for k in outcome.kept:
        why = k.reason
        if k.reason == "overflow":
            why += f" (max |value| {k.max_abs:.3g})"
        elif k.sensitivity is not None:
            why += f" (error {k.sensitivity:.3g} when only it is reduced)"
        print(f"  {k.key} [{k.op_type}]: {why}")
    print(f"after, {len(outcome.kept)} node(s) in float32:")
    for o in outcome.after.outputs:
        print(f"  {o.name}: {_numbers(o)}")
    if written_check is not None:
        print(f"  the INT8 model as written (onnxruntime, Q/DQ): mean rel {written_check:.3g}")
    print(
        f"{outcome.reduced_share:.1%} of the float compute in {fmt}; {outcome.runs} emulated run(s) in "
        f"{outcome.seconds:.2f} s"
    )
    if outcome.step is None:
        what = "quantizable node left in INT8" if fmt == "int8" and outcome.kept else f"float math in {fmt}"
        print(f"nothing written: the model keeps no {what}")
    else:
        print(f"wrote {written['-o']}\n  step: {outcome.step.describe()}")
        if args.recipe:
            print(f"wrote {args.recipe}")
        if fmt == "int8":
            print(f"  quantize --exclude {' '.join(outcome.exclude) or '(none)'}")
        else:
            print(f"  trtexec (weakly typed builds): {outcome.layer_precisions}")
    if not within:
        print(f"not within the tolerance {args.tolerance:g}", file=sys.stderr)
    return EXIT_OK if within else EXIT_REJECTED


def _int8_as_written(original, quantized, request) -> float | None:
    """The worst output's mean relative error of the written Q/DQ model against float32 (onnxruntime runs Q/DQ
    as written), on the samples the search used."""
    from surgery.quantize import Calibration, compare

    try:
        calib = Calibration(original, request.calib, request.seed)
        numbers, _ = compare(original, quantized, calib, samples=request.samples)
    except Exception:  # noqa: BLE001 - the emulated figure stands
        return None
    return max((v["mean_rel"] for v in numbers.values()), default=0.0)
