"""`onnx-surgery quantize MODEL -o OUT --calib DIR|FILE.npz|random:N`: INT8 Q/DQ nodes the way strongly typed
TensorRT takes them (surgery.quantize), applied as one recipe step (fix primitive quantize_int8), then INT8
against float32 on the calibration samples. Exit 0 written, 2 bad input (nothing is written)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from surgery.cli import EXIT_BAD_INPUT, EXIT_OK
from surgery.cli.options import add_model, load


def add_parser(sub):
    from surgery.quantize import COMPARE_SAMPLES, IMAGE_SUFFIXES, PREPROCESSING, QUANTIZED_OPS

    p = sub.add_parser(
        "quantize",
        help="insert INT8 Q/DQ nodes calibrated on data (for strongly typed TensorRT)",
        description="Insert INT8 QuantizeLinear/DequantizeLinear nodes the way TensorRT 10+ and TensorRT-RTX "
        "take them (they build strongly typed: INT8 comes only from Q/DQ): onnxruntime's static quantization, "
        f"MinMax calibration, Q/DQ on the inputs of {', '.join(QUANTIZED_OPS)}, INT8 with zero point 0, "
        "float32 biases, weights kept float32 behind a Q/DQ pair. Then INT8 is compared against float32 on "
        f"the first {COMPARE_SAMPLES} calibration samples. `onnx-surgery build OUT` builds it at int8 next "
        "to fp16 and fp32.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="calibration data (--calib):\n"
        "  FILE.npz   one array per graph input, keyed by the input's name: shaped like the input (one\n"
        "             sample; a fixed batch B cuts a first axis of k*B into k samples) or with an extra\n"
        "             leading axis of samples; float arrays are cast to the input's type\n"
        f"  DIR        images ({' '.join(IMAGE_SUFFIXES)}) directly in DIR, sorted by name, one sample\n"
        "             each, for a model with one float NCHW input of 1 or 3 channels: " + PREPROCESSING + "\n"
        "  random:N   N seeded standard-normal samples: replays exactly, but the scales fit noise and\n"
        "             accuracy figures mean little (a warning says so)\n"
        "A file or folder is recorded in the recipe with its sha256; replaying the recipe on changed data is\n"
        "refused.",
    )
    add_model(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="the quantized model (a new file)")
    p.add_argument(
        "--calib", required=True, metavar="DIR|FILE.npz|random:N", help="calibration data (see below)"
    )
    p.add_argument("--per-channel", action="store_true", help="one weight scale per output channel")
    p.add_argument(
        "--symmetric",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="activations with zero point 0 (default; TensorRT takes no other; --no-symmetric is for "
        "onnxruntime or OpenVINO, and TensorRT then refuses the model)",
    )
    p.add_argument(
        "--exclude",
        nargs="+",
        action="extend",
        default=[],
        metavar="NODE",
        help="nodes (by name) to leave in float32",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of random:N calibration (default 0)")
    p.add_argument("--recipe", metavar="FILE", help="also write the recipe (one replayable step)")
    return p


def _progress_printer():
    if not sys.stderr.isatty():
        return None, lambda: None

    def show(fraction, message):
        print(f"\r  {fraction * 100:5.1f}%  {message[:70]:70s}", end="", file=sys.stderr, flush=True)

    return show, lambda: print("\r" + " " * 80 + "\r", end="", file=sys.stderr)


def run(args) -> int:
    from surgery.cli.build_cmd import accuracy_line
    from surgery.fixes import FixError
    from surgery.outputs import OutputError, check_outputs
    from surgery.quantize import (
        RANDOM_WARNING,
        Calibration,
        CalibrationError,
        calibration_digest,
        check_quantizable,
        compare,
        parse_source,
        progress_to,
    )
    from surgery.workspace import Step, Workspace

    def bad(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT

    model = load(args, weights_in_file=True)  # the steps refer to the weights in the file
    try:
        written = check_outputs(model, [("-o", args.output), ("--recipe", args.recipe)])
    except OutputError as exc:
        return bad(str(exc))
    out = written["-o"]
    try:
        check_quantizable(model.proto, args.exclude or ())
        src = parse_source(args.calib)
        calib = Calibration(model.proto, src.spec, args.seed)  # every refusal before any work
        digest = calibration_digest(src)
    except CalibrationError as exc:
        return bad(str(exc))
    params = {"calib": src.spec}
    if digest:
        params["sha256"] = digest
    params.update(per_channel=args.per_channel, symmetric=args.symmetric)
    if args.exclude:
        params["exclude"] = list(args.exclude)
    if src.kind == "random":
        params["seed"] = args.seed
    if not args.symmetric:
        print(
            "warning: --no-symmetric gives activation zero points other than 0, which TensorRT refuses",
            file=sys.stderr,
        )
    ws = Workspace(model, kept_states=0)  # headless: no history to look back at
    show, clear = _progress_printer()
    try:
        with progress_to(show):
            quantized = ws.apply(
                Step("quantize_int8", params, note=f"INT8 calibrated on {len(calib)} sample(s)")
            )
    except FixError as exc:
        clear()
        return bad(str(exc))
    clear()
    try:
        numbers, used = compare(model.proto, quantized, calib, base_dir=model.base_dir)
    except Exception as exc:  # the model is quantized; only the comparison is missing
        from surgery.text import error_line

        numbers, used = {}, 0
        print(f"warning: INT8 not compared against float32: {error_line(exc)}", file=sys.stderr)
    ws.export(out)
    if src.kind == "random":  # said once the model is quantized: a refusal stays one line
        print(f"warning: {RANDOM_WARNING}", file=sys.stderr)
    ops = Counter(n.op_type for n in quantized.graph.node)
    consumers = Counter(
        n.op_type
        for n in quantized.graph.node
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
        and any(x.endswith("_DequantizeLinear_Output") for x in n.input)
    )
    print(
        f"wrote {out}: {ops['QuantizeLinear']} QuantizeLinear, {ops['DequantizeLinear']} DequantizeLinear; "
        f"INT8 inputs on {', '.join(f'{op} x{k}' for op, k in consumers.most_common()) or 'no node'}"
    )
    print(f"  step: {ws.recipe[-1].describe()}")
    if numbers:
        print(f"INT8 against float32 on {used} calibration sample(s) (onnxruntime):")
        for name, acc in numbers.items():
            print(f"  {name}: {accuracy_line(acc)}")
        if src.kind == "random":
            print("  (random calibration: these figures mean little for real data)")
    if args.recipe:
        ws.save_recipe(written["--recipe"])
        print(f"wrote {args.recipe}")
    print(f"next: onnx-surgery build {out} -b tensorrt -b onnxruntime  (int8 next to fp16 and fp32)")
    return EXIT_OK
