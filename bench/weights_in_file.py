"""Does a model whose large weights stay in its file (surgery/file_weights.py) stay the model loaded whole? Every
real model of the corpus (bench/corpus/README.md; node tests left out) loaded both ways: the weights read back in
must give the same model, byte for byte (`with_weights`), the same fingerprint, and the same file when written
(`save_model`); with the time each load takes and how much of the file the light one leaves out of memory.

    python bench/weights_in_file.py [--family ocr] [--limit N]

Prints a line per model that differs (none is the goal) and the counts; exit 1 when one differs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from surgery.model import ModelLoadError, load_model, save_model, with_weights  # noqa: E402

CORPUS = Path(os.environ.get("ONNX_SURGERY_CORPUS", "~/.cache/onnx-surgery/corpus")).expanduser()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", help="only this family")
    ap.add_argument("--limit", type=int, default=0, help="at most this many models (0: all)")
    args = ap.parse_args()
    manifest = CORPUS / "manifest.json"
    if not manifest.is_file():
        print(f"no corpus at {CORPUS}: python bench/corpus/build.py makes it")
        return 2
    records = [
        r
        for r in json.loads(manifest.read_text())["models"]
        if r["family"] != "node-test" and (args.family is None or r["family"] == args.family)
    ]
    records = records[: args.limit] if args.limit else records
    seen = left = differ = 0
    whole_s = light_s = 0.0
    held = file_bytes = 0
    with tempfile.TemporaryDirectory(prefix="weights-in-file-") as tmp:
        for r in records:
            path = CORPUS / r["path"]
            try:
                t0 = time.perf_counter()
                whole = load_model(path)
                t1 = time.perf_counter()
                light = load_model(path, weights_in_file=True)
                t2 = time.perf_counter()
            except ModelLoadError as exc:
                print(f"{r['id']}: not loaded: {exc}")
                continue
            seen += 1
            whole_s, light_s = whole_s + t1 - t0, light_s + t2 - t1
            if light.own_file is None:
                continue
            left += 1
            held += light.proto.ByteSize()
            file_bytes += whole.file_bytes
            problems = []
            if (
                with_weights(light.proto, light.base_dir).SerializeToString()
                != whole.proto.SerializeToString()
            ):
                problems.append("read back in, not the model loaded whole")
            if light.fingerprint() != whole.fingerprint():
                problems.append("another fingerprint")
            a = save_model(whole.proto, Path(tmp) / "whole.onnx").read_bytes()
            b = save_model(light.proto, Path(tmp) / "light.onnx", light.base_dir, own_file=light.own_file)
            if b.read_bytes() != a:
                problems.append("written, another file")
            if problems:
                differ += 1
                print(f"{r['id']}: {'; '.join(problems)}")
    print(
        f"{seen} models loaded; {left} leave weights in their file, holding {held / 2**20:.1f} of "
        f"{file_bytes / 2**20:.1f} MiB; {differ} differ from the model loaded whole"
    )
    print(f"loading all of them: whole {whole_s:.2f} s, weights left in the file {light_s:.2f} s")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
