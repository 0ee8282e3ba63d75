"""Verification's onnxruntime worker against onnxruntime's own call, in memory, on models whose weights travel
inline (what a step makes in memory: fp16 and quantized weights, folded constants, Paddle's Constant weights).

Each figure is a fresh process: the serialized model is read into it first, then what the process's resident
memory grows by until its peak (VmHWM) is measured for
- onnxruntime: `InferenceSession(bytes)` with the worker's options (no arena, no graph optimization), one run on
  seeded inputs: the floor;
- worker: `surgery.ort.run_serialized(bytes, feeds)`, what an isolated worker of surgery.verify runs.

    python bench/worker_memory.py [MODEL ...]     (default: the corpus's torchvision detectors and classifiers)

Prints MiB and the worker's ratio to the floor (goal: within 1.1x) next to the model's size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("ONNX_SURGERY_CORPUS", Path.home() / ".cache/onnx-surgery/corpus"))
DEFAULT = (
    "detection/retinanet_resnet50_fpn_op11",
    "detection/fasterrcnn_mobilenet_v3_large_320_fpn_op11",
    "classification/convnext_tiny_op17",
    "classification/swin_t_op17",
)
GOAL = 1.1

CHILD = """
import sys
import numpy as np
from onnx import ModelProto
from surgery.feeds import seeded_inputs
data = open(sys.argv[1], "rb").read()
m = ModelProto(); m.ParseFromString(data); feeds = seeded_inputs(m); del m
def status(key):
    return int(open("/proc/self/status").read().split(key + ":")[1].split()[0]) / 1024
import onnxruntime as ort
from surgery.ort import run_serialized
base = status("VmRSS")
if sys.argv[2] == "onnxruntime":
    so = ort.SessionOptions(); so.enable_cpu_mem_arena = False; so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()})
else:
    run_serialized(data, feeds)
print(status("VmHWM") - base)
"""


def grows(model: Path, how: str) -> float:
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), how], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return float(p.stdout.strip().splitlines()[-1])


def corpus_models() -> list[Path]:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    by_id = {m["id"]: CORPUS / m["path"] for m in manifest["models"]}
    return [by_id[k] for k in DEFAULT if k in by_id]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", type=Path)
    args = ap.parse_args()
    models = args.models or corpus_models()
    print("| model | MiB | onnxruntime grows MiB | worker grows MiB | worker / onnxruntime (goal ≤ 1.1) |")
    print("|---|---|---|---|---|")
    for m in models:
        size = m.stat().st_size / 2**20
        floor, worker = grows(m, "onnxruntime"), grows(m, "worker")
        ratio = worker / floor
        mark = "✓" if ratio <= GOAL else "✗"
        print(f"| {m.stem} | {size:.0f} | {floor:.0f} | {worker:.0f} | {ratio:.2f} {mark} |", flush=True)


if __name__ == "__main__":
    main()
