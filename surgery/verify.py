"""Check a changed model against the original: same seeded inputs, onnxruntime, per-output error.

Mean relative error, used everywhere in ONNX Surgery: mean(|a - b|) / max(mean(|a|), 1e-12), where `a` is the
original's output and `b` the changed model's — the average error in units of the output's average
magnitude, so that a near-zero element cannot blow it up. Max absolute error is max(|a - b|).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from onnx import ModelProto

from surgery.fixes import Safety

EXACT_MEAN_REL_FP32 = 1e-6


def mean_relative_error(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a64.size == 0:
        return 0.0
    return float(np.mean(np.abs(a64 - b64)) / max(float(np.mean(np.abs(a64))), 1e-12))


def max_abs_error(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a64 - b64))) if a64.size else 0.0


@dataclass
class OutputError:
    name: str
    max_abs: float
    mean_rel: float
    shape: tuple[int, ...]
    note: str = ""


@dataclass
class VerifyReport:
    status: str  # "ok" | "failed" | "skipped"
    safety: str
    outputs: list[OutputError] = field(default_factory=list)
    message: str = ""
    seed: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def worst(self) -> tuple[float, float]:
        if not self.outputs:
            return 0.0, 0.0
        return max(o.max_abs for o in self.outputs), max(o.mean_rel for o in self.outputs)

    def summary(self) -> str:
        if self.status == "skipped":
            return f"not verified: {self.message}"
        per = "; ".join(f"{o.name}: max abs {o.max_abs:.3g}, mean rel {o.mean_rel:.3g}" for o in self.outputs)
        head = {"ok": "verified", "failed": "VERIFICATION FAILED"}[self.status]
        return f"{head} ({self.safety}, seed {self.seed}): {per}" + (
            f" — {self.message}" if self.message else ""
        )

    def to_dict(self) -> dict:
        return asdict(self)


def _with_outputs(model: ModelProto, names: list[str]) -> ModelProto:
    """A copy of `model` that also returns the intermediate tensors `names` (when it has them)."""
    from onnx import helper

    have = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    extra = [n for n in names if n in have and n not in {o.name for o in model.graph.output}]
    if not extra:
        return model
    out = ModelProto()
    out.CopyFrom(model)
    out.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in extra)
    return out


def _run(model: ModelProto, feeds, base_dir):
    from surgery.ort import make_session

    sess = make_session(model, base_dir)
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted})))


def verify(
    original: ModelProto,
    changed: ModelProto,
    *,
    base_dir: str | Path | None = None,
    feeds: dict[str, np.ndarray] | None = None,
    seed: int = 0,
    safety: Safety | str = Safety.EXACT,
    dims: dict[str, int] | None = None,
    tolerance: float = EXACT_MEAN_REL_FP32,
) -> VerifyReport:
    """Run both models on the same inputs. An exact fix above `tolerance` mean relative error fails."""
    from surgery.ort import seeded_inputs

    safety = Safety(safety)
    if (
        feeds is None
    ):  # the original's inputs; where it has no shapes (e.g. before freeze_shapes), the new ones
        try:
            feeds = seeded_inputs(original, seed=seed, dims=dims)
        except ValueError as exc:
            try:
                feeds = seeded_inputs(changed, seed=seed, dims=dims)
            except ValueError:
                return VerifyReport(
                    "skipped", safety.value, message=f"no inputs to run with: {exc}", seed=seed
                )
    # a changed model may expose tensors the original computes inside (an extracted subgraph): compare those
    reference = _with_outputs(original, [o.name for o in changed.graph.output])
    results = []
    for which, model in (("original", reference), ("changed", changed)):
        try:
            results.append(_run(model, feeds, base_dir))
        except Exception as exc:
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            return VerifyReport(
                "skipped",
                safety.value,
                message=f"not verifiable with onnxruntime: the {which} model does not run ({line})",
                seed=seed,
            )
    a, b = results
    outputs, notes = [], []
    for name, value in a.items():
        if name not in b:
            notes.append(f"output '{name}' is gone from the changed model")
            continue
        other = b[name]
        if value.shape != other.shape:
            outputs.append(
                OutputError(
                    name, float("inf"), float("inf"), value.shape, f"shape {value.shape} became {other.shape}"
                )
            )
            continue
        if value.dtype.kind in "OUS":
            same = bool(np.all(value == other))
            outputs.append(
                OutputError(name, 0.0 if same else float("inf"), 0.0 if same else float("inf"), value.shape)
            )
            continue
        outputs.append(
            OutputError(
                name, max_abs_error(value, other), mean_relative_error(value, other), tuple(value.shape)
            )
        )
    notes += [f"new output '{n}'" for n in b if n not in a]
    worst = max((o.mean_rel for o in outputs), default=0.0)
    failed = safety is not Safety.CHANGES_SEMANTICS and any("gone" in n for n in notes)
    if safety is Safety.EXACT and worst > tolerance:
        failed = True
        notes.append(f"an exact fix must stay within {tolerance:g} mean relative error; got {worst:.3g}")
    return VerifyReport("failed" if failed else "ok", safety.value, outputs, "; ".join(notes), seed)
