"""Build time and latency per backend on the samples and on a ResNet-50-sized model, and the TensorRT timing
cache's effect on a rebuild, as a ratio.

    python bench/build_speed.py [--models-dir DIR]   # uses DIR/resnet50.onnx when present (bench/export_models.py)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import onnx

from surgery.backends.base import BuildOptions
from surgery.build import build_model
from surgery.samples import build

BACKENDS = ["tensorrt", "onnxruntime", "openvino", "tvm"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    models = {
        n: build(n) for n in ("healthy_cnn", "resize_scales_chain", "topk_computed_k", "if_branch_shapes")
    }
    if args.models_dir and (args.models_dir / "resnet50.onnx").exists():
        from surgery.fixes import get_fix

        resnet = onnx.load(str(args.models_dir / "resnet50.onnx"))
        models["resnet50 (torchvision, batch frozen to 1)"] = get_fix("freeze_shapes")(
            resnet, dims={"batch": 1}
        )
    print("| model | backend | ok | build s | median ms | p90 ms | worst mean rel error | note |")
    print("|---|---|---|---|---|---|---|---|")
    for name, model in models.items():
        for backend in BACKENDS:
            r = build_model(backend, model, BuildOptions(runs=args.runs))
            lat = r.latency_ms or {}
            acc = max((v["mean_rel"] for v in (r.accuracy or {}).values()), default=None)
            note = (r.error or r.note)[:70]
            print(
                f"| {name} | {backend} | {'yes' if r.ok else 'no'} | {r.build_seconds:.2f} | "
                f"{lat.get('median', float('nan')):.3f} | {lat.get('p90', float('nan')):.3f} | "
                f"{'-' if acc is None else f'{acc:.2g}'} | {note} |",
                flush=True,
            )
    big = list(models.values())[-1]
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "timing.cache")
        cold = build_model("tensorrt", big, BuildOptions(timing_cache=cache))
        warm = build_model("tensorrt", big, BuildOptions(timing_cache=cache))
    if cold.ok and warm.ok:
        print(
            f"\nTensorRT timing cache on {list(models)[-1]}: cold build {cold.build_seconds:.2f} s, rebuild with "
            f"the cache {warm.build_seconds:.2f} s — ratio {warm.build_seconds / cold.build_seconds:.2f}"
        )


if __name__ == "__main__":
    main()
