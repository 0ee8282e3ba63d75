"""Build the teaching models into this folder: `python sample_models/build.py`. Deterministic: running it again
writes the same bytes (the tests check that the committed files match)."""

from pathlib import Path

import onnx

from surgery.samples import SAMPLES, build

HERE = Path(__file__).resolve().parent


def main() -> None:
    for name in SAMPLES:
        path = HERE / f"{name}.onnx"
        onnx.save(build(name), str(path))
        print(f"wrote {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
