"""Latency and accuracy of a built engine: median and p90 over timed runs after warm-up; per-output max abs
and mean relative error (surgery.verify's definition) against onnxruntime's fp32 run of the original model."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from onnx import ModelProto

from surgery.verify import max_abs_error, mean_relative_error


def reference(model: ModelProto, base_dir=None, seed: int = 0) -> tuple[dict, dict]:
    """Seeded inputs and onnxruntime's fp32 outputs for them."""
    from surgery.ort import run, seeded_inputs

    feeds = seeded_inputs(model, seed=seed, default_dim=1)
    return feeds, run(model, feeds, base_dir)


def latency(fn: Callable[[], object], runs: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(runs, 1)):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return {"median": float(np.median(times)), "p90": float(np.percentile(times, 90)), "runs": len(times)}


def accuracy(ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    out = {}
    for name, a in ref.items():
        b = got.get(name)
        if b is None:
            continue
        b = np.asarray(b).reshape(a.shape) if np.asarray(b).size == a.size else np.asarray(b)
        out[name] = {"max_abs": max_abs_error(a, b), "mean_rel": mean_relative_error(a, b)}
    return out
