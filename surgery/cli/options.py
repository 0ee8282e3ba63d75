"""Options several commands declare the same way (declared once here, so they cannot drift): the model's path
and the size limit it is read under, and the targets."""

from __future__ import annotations


def add_model(p, help: str = "path to an .onnx file") -> None:
    """MODEL and --max-bytes N (refuse a larger model, in one line, before reading it)."""
    p.add_argument("model", help=help)
    p.add_argument(
        "--max-bytes", type=int, default=None, metavar="N", help="refuse models larger than N bytes"
    )


def load(args, *, weights_in_file: bool = False):
    """The model the command was given, read under its --max-bytes (a bad file: ModelLoadError, exit 2).
    `weights_in_file`: its large weights stay in the file (a command that makes a version per step)."""
    from surgery.model import load_model

    return load_model(args.model, max_bytes=args.max_bytes, weights_in_file=weights_in_file)


TARGET_IDS = "tensorrt, tensorrt-static@VERSION, onnxruntime, openvino, tvm"


def add_targets(
    p, *, many: bool = True, required: bool = False, default: str = "onnxruntime", also: str = ""
) -> None:
    """--target/-t: one target (`many=False`, e.g. split's), or several (repeat the flag; `default` when none is
    given, said in the help). `also`: what else the command does with them, added to the help."""
    if not many:
        p.add_argument("--target", "-t", required=required, help=f"{TARGET_IDS}{also}")
        return
    said = f"repeat; default {default}" if default else "repeat"
    p.add_argument("--target", "-t", action="append", default=None, help=f"{TARGET_IDS} ({said}){also}")
