"""Build speed, latency and error per backend, precision and shape, on a ResNet-50-shaped model (generated here
with onnx.helper: ResNet-50's 53 convolutions and shapes, BatchNorm folded into conv biases, random weights,
batch dynamic) and real models of the corpus (torchvision's ResNet-18 and MobileNetV3-Small, opset 17, batch
dynamic; ~/.cache/onnx-surgery/corpus, see bench/corpus/README.md):

- fp32, fp16 and INT8 at batch 1 on each backend: INT8 is the model quantized by surgery.quantize (Q/DQ,
  calibrated on seeded random:8 samples, so its error is an upper bound of what real data gives) and built at
  int8; every error is the worst output's mean relative error against onnxruntime fp32 of the float model;
- TVM untuned vs tuned (MetaSchedule, --trials per model, default 64, a fresh tuning database);
- dynamic batch: each backend built once with the profile batch 1:4:8 and timed at min, opt and max.

TensorRT-RTX builds here without a GPU but cannot run its engines: its rows show the build time, and its
latency and error cells are empty (and the timing cache's cold/warm effect needs a GPU too). The machine is
shared: the load average is printed with the figures.

    python bench/build_speed.py [--runs 5] [--trials 64] [--backend tvm ...] [--model resnet18 ...]"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from surgery.backends.base import BuildOptions
from surgery.backends.build import build_ladder, build_model

BACKENDS = ["onnxruntime", "openvino", "tvm", "tensorrt"]
CORPUS = Path(os.environ.get("ONNX_SURGERY_CORPUS", "~/.cache/onnx-surgery/corpus")).expanduser()
REAL = {
    "resnet18": "models/torch/classification/resnet18_op17.onnx",
    "mobilenet_v3_small": "models/torch/classification/mobilenet_v3_small_op17.onnx",
}
PRECISIONS = {"onnxruntime": ("fp32", "fp16"), "openvino": ("fp32", "fp16"), "tvm": ("fp32",)}
PRECISIONS["tensorrt"] = ("fp32", "fp16")


def resnet50_like(seed: int = 0, batch: int | str = 1) -> onnx.ModelProto:
    """ResNet-50 v1.5 at inference: stem 7x7/2 + max pool, bottlenecks [3, 4, 6, 3] (widths 64..512, x4),
    global average pool, 2048->1000 Gemm, softmax. 53 convs, 25.5 M parameters, input 1x3x224x224."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x, cin, cout, k, stride, name, relu=True, gain=1.0):
        w, b = f"{name}.weight", f"{name}.bias"
        std = gain * np.sqrt(2.0 / (cin * k * k))
        inits.append(
            numpy_helper.from_array((rng.standard_normal((cout, cin, k, k)) * std).astype(np.float32), w)
        )
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.01).astype(np.float32), b))
        pad = k // 2
        out = f"{name}/Conv_output_0"
        nodes.append(
            helper.make_node(
                "Conv",
                [x, w, b],
                [out],
                name=f"{name}/Conv",
                kernel_shape=[k, k],
                strides=[stride] * 2,
                pads=[pad] * 4,
            )
        )
        if not relu:
            return out
        nodes.append(helper.make_node("Relu", [out], [f"{name}/Relu_output_0"], name=f"{name}/Relu"))
        return f"{name}/Relu_output_0"

    x = conv("input", 3, 64, 7, 2, "/conv1")
    nodes.append(
        helper.make_node(
            "MaxPool",
            [x],
            ["/maxpool/out"],
            name="/maxpool/MaxPool",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        )
    )
    x, cin = "/maxpool/out", 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=1):
        for b in range(blocks):
            s = f"/layer{stage}/layer{stage}.{b}"
            stride = 2 if b == 0 and stage > 1 else 1
            y = conv(x, cin, width, 1, 1, f"{s}/conv1")
            y = conv(y, width, width, 3, stride, f"{s}/conv2")
            y = conv(y, width, width * 4, 1, 1, f"{s}/conv3", relu=False, gain=0.2)  # keeps activations tame
            short = conv(x, cin, width * 4, 1, stride, f"{s}/downsample/0", relu=False) if b == 0 else x
            nodes.append(helper.make_node("Add", [y, short], [f"{s}/Add_output_0"], name=f"{s}/Add"))
            nodes.append(helper.make_node("Relu", [f"{s}/Add_output_0"], [f"{s}/out"], name=f"{s}/Relu"))
            x, cin = f"{s}/out", width * 4
    inits.append(
        numpy_helper.from_array((rng.standard_normal((1000, 2048)) * 0.02).astype(np.float32), "fc.weight")
    )
    inits.append(numpy_helper.from_array(np.zeros(1000, np.float32), "fc.bias"))
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["/avgpool/out"], name="/avgpool/GlobalAveragePool"),
        helper.make_node("Flatten", ["/avgpool/out"], ["/flatten/out"], name="/Flatten", axis=1),
        helper.make_node(
            "Gemm", ["/flatten/out", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm", transB=1
        ),
        helper.make_node("Softmax", ["logits"], ["probs"], name="/Softmax", axis=1),
    ]
    g = helper.make_graph(
        nodes,
        "resnet50_like",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 1000])],
        inits,
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"


def _ms(lat) -> str:
    return f"{lat['median']:.2f}" if lat and "median" in lat else "-"


def _err(r) -> str:
    errs = [v["mean_rel"] for v in (r.accuracy or {}).values()]
    return f"{max(errs):.2g}" if errs else "-"


def _why(r) -> str:
    if not r.ok:
        return f"failed: {r.error}".replace("|", "/")[:100]
    if r.backend == "tensorrt" and r.latency_ms is None:
        return "built; no GPU here to run it"
    return ""


def _batch1(model: onnx.ModelProto) -> onnx.ModelProto:
    from surgery.fixes import get_fix

    dims = {d.dim_param: 1 for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    return get_fix("freeze_shapes")(model, dims=dims) if dims else model


def models(names: list[str] | None) -> dict[str, onnx.ModelProto]:
    found = {"resnet50-like (generated)": resnet50_like(batch="batch")}
    for name, rel in REAL.items():
        if (CORPUS / rel).exists():
            found[f"{name} (corpus)"] = onnx.load(str(CORPUS / rel))
        else:
            print(f"(skipping {name}: {CORPUS / rel} is missing; python bench/corpus/build.py --only torch)")
    return {k: v for k, v in found.items() if not names or any(n in k for n in names)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trials", type=int, default=64, help="MetaSchedule trials per model for TVM tuned")
    ap.add_argument("--backend", action="append", choices=BACKENDS, help="default: all")
    ap.add_argument("--model", action="append", help="substring of a model name (default: all)")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    backends = args.backend or BACKENDS
    runs = dict(runs=args.runs, warmup=1, timeout_s=args.timeout)
    from surgery.quantize import quantize

    rows: list[dict] = []

    def row(model, backend, what, r, **extra):
        rows.append(dict(model=model, backend=backend, what=what, ok=r.ok, build_s=r.build_seconds, **extra))
        print(
            f"| {model} | {backend} | {what} | {r.build_seconds:.1f} | "
            + " | ".join(extra.get(k, "-") for k in ("median", "min", "opt", "max", "error"))
            + f" | {extra.get('note', _why(r))} |",
            flush=True,
        )

    print(f"load average before: {_load()} ({os.cpu_count()} CPUs)")
    print(
        "\n| model | backend | build | build s | median ms (batch 1) | min ms | opt ms | max ms | "
        "worst mean rel error | note |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, dynamic in models(args.model).items():
        static = _batch1(dynamic)
        qdq = quantize(static, "random:8")
        for backend in backends:
            for precision in PRECISIONS[backend]:
                r = build_model(backend, static, BuildOptions(precision=precision, **runs))
                row(name, backend, precision, r, median=_ms(r.latency_ms), error=_err(r))
            (r,) = build_ladder(backend, qdq, BuildOptions(**runs), precisions=("int8",))
            row(name, backend, "int8 (Q/DQ, random:8)", r, median=_ms(r.latency_ms), error=_err(r))
            if backend == "tvm":
                with tempfile.TemporaryDirectory() as db:
                    opts = BuildOptions(tune_trials=args.trials, tune_dir=db, **runs)
                    r = build_model("tvm", static, opts)
                t = r.tuning or {}
                note = (
                    f"untuned {_ms(t.get('untuned_ms'))} ms; {t.get('trials_run', 0)} trials over "
                    f"{t.get('tasks', 0)} tasks in {t.get('seconds', 0):.0f} s"
                    if t
                    else _why(r) or r.note[:100]
                )
                row(
                    name,
                    "tvm",
                    f"fp32 tuned ({args.trials} trials)",
                    r,
                    median=_ms(r.latency_ms),
                    error=_err(r),
                    note=note,
                )
            shape = [d.dim_value for d in static.graph.input[0].type.tensor_type.shape.dim]
            profile = {static.graph.input[0].name: tuple(tuple([b] + shape[1:]) for b in (1, 4, 8))}
            r = build_model(backend, dynamic, BuildOptions(profiles=profile, **runs))
            points = r.latency_points or {}
            row(
                name,
                backend,
                "fp32, batch 1:4:8",
                r,
                min=_ms(points.get("min")),
                opt=_ms(points.get("opt")),
                max=_ms(points.get("max")),
                error=_err(r),
            )
        print(f"| load average after {name}: {_load()} | | | | | | | | | |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
