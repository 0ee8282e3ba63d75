"""Options every command that reads one model declares the same way (declared once here, so they cannot drift):
the model's path and the size limit it is read under."""

from __future__ import annotations


def add_model(p, help: str = "path to an .onnx file") -> None:
    """MODEL and --max-bytes N (refuse a larger model, in one line, before reading it)."""
    p.add_argument("model", help=help)
    p.add_argument(
        "--max-bytes", type=int, default=None, metavar="N", help="refuse models larger than N bytes"
    )


def load(args):
    """The model the command was given, read under its --max-bytes (a bad file: ModelLoadError, exit 2)."""
    from surgery.model import load_model

    return load_model(args.model, max_bytes=args.max_bytes)
