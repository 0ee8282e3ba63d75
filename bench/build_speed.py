"""Build time and latency per backend on the teaching samples and on a ResNet-50-sized model (generated here
with onnx.helper: ResNet-50's 53 convolutions and shapes, BatchNorm folded into conv biases, random weights),
and the TensorRT timing cache's effect on a rebuild, as a ratio.

    python bench/build_speed.py [--runs 20] [--backend tvm ...] [--models-dir /tmp/realmodels]

--models-dir adds the real models found there (resnet50.onnx, mobilenet_v3_small.onnx; batch frozen to 1)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from surgery.backends.base import BuildOptions
from surgery.build import build_model
from surgery.samples import build

BACKENDS = ["tensorrt", "onnxruntime", "openvino", "tvm"]
SAMPLES = ["healthy_cnn", "resize_scales_chain", "topk_computed_k", "int64_out_of_range"]


def resnet50_like(seed: int = 0) -> onnx.ModelProto:
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
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 1000])],
        inits,
    )
    return helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def _row(name: str, backend: str, precision: str, r) -> str:
    lat = r.latency_ms or {}
    acc = max((v["mean_rel"] for v in (r.accuracy or {}).values()), default=None)
    note = (r.error or r.note).replace("|", "/")[:90]
    med = f"{lat['median']:.2f}" if lat else "-"
    p90 = f"{lat['p90']:.2f}" if lat else "-"
    return (
        f"| {name} | {backend} | {precision} | {'yes' if r.ok else 'no'} | {r.build_seconds:.2f} | {med} | {p90} | "
        f"{'-' if acc is None else f'{acc:.2g}'} | {note} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--backend", action="append", choices=BACKENDS, help="default: all")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    backends = args.backend or BACKENDS
    models = {n: build(n) for n in SAMPLES}
    models["resnet50-like (generated)"] = resnet50_like()
    if args.models_dir:
        from surgery.fixes import get_fix

        for file in ("resnet50.onnx", "mobilenet_v3_small.onnx"):
            if (args.models_dir / file).exists():
                real = onnx.load(str(args.models_dir / file))
                dims = {
                    d.dim_param: 1
                    for i in real.graph.input
                    for d in i.type.tensor_type.shape.dim
                    if d.dim_param
                }
                models[f"{file} (batch 1)"] = get_fix("freeze_shapes")(real, dims=dims) if dims else real
    print(
        "| model | backend | precision | ok | build s | median ms | p90 ms | worst mean rel | error / note |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, model in models.items():
        for backend in backends:
            r = build_model(backend, model, BuildOptions(runs=args.runs, timeout_s=args.timeout))
            print(_row(name, backend, "fp32", r), flush=True)
        if name.startswith("resnet50-like"):
            for backend, precision in (("tensorrt", "fp16"), ("openvino", "fp16"), ("onnxruntime", "fp16")):
                if backend in backends:
                    opts = BuildOptions(runs=args.runs, precision=precision, timeout_s=args.timeout)
                    print(_row(name, backend, precision, build_model(backend, model, opts)), flush=True)
    if "tensorrt" in backends:
        big_name = "resnet50-like (generated)"
        with tempfile.TemporaryDirectory() as tmp:
            cache = str(Path(tmp) / "timing.cache")
            none = build_model("tensorrt", models[big_name], BuildOptions(timeout_s=args.timeout))
            cold = build_model(
                "tensorrt", models[big_name], BuildOptions(timing_cache=cache, timeout_s=args.timeout)
            )
            size = Path(cache).stat().st_size if Path(cache).exists() else 0
            warm = build_model(
                "tensorrt", models[big_name], BuildOptions(timing_cache=cache, timeout_s=args.timeout)
            )
        if none.ok and cold.ok and warm.ok:
            print(
                f"\n{cold.label} timing cache on {big_name}: no cache {none.build_seconds:.2f} s, first build with "
                f"a new cache {cold.build_seconds:.2f} s (cache file {size} bytes), rebuild reusing it "
                f"{warm.build_seconds:.2f} s — rebuild/first ratio {warm.build_seconds / cold.build_seconds:.2f}"
            )
            if "no-ops" in warm.note:
                print("(TensorRT-RTX itself says timing cache operations are no-ops: expect a ratio near 1)")
        else:
            print(f"\ntiming cache run failed: {(none.error or cold.error or warm.error)[:200]}")


if __name__ == "__main__":
    main()
