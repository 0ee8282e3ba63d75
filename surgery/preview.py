"""What a step would do, without doing it: the nodes it removes and adds, and each target's verdict before and
after (the app's fix preview, `onnx-surgery fix --preview`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from onnx import ModelProto

from surgery.workspace import Step


@dataclass
class StepPreview:
    """A step applied to a copy: node keys removed and added, and per target (label, rejected nodes before,
    rejected nodes after); `refused` is the fix's own words when it refuses (then nothing else is filled)."""

    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    verdicts: list[tuple[str, int, int]] = field(default_factory=list)
    refused: str | None = None

    def verdict_lines(self) -> list[str]:
        """'TensorRT 8.2 (predicted): 1 → 0 rejected node(s)' per target, or why the fix refuses."""
        if self.refused is not None:
            return [f"the fix refuses: {self.refused}"]
        return [f"{label}: {before} → {after} rejected node(s)" for label, before, after in self.verdicts]


def preview_step(
    model: ModelProto,
    step: Step,
    targets: list[str],
    base_dir: str | Path | None = None,
    *,
    depth: str | None = None,
) -> StepPreview:
    """Apply `step` to a copy of `model` (never to `model`) and check both with each target (cached checks)."""
    from surgery.diagnose import check_one
    from surgery.graph import node_keys
    from surgery.workspace import apply_step

    try:
        after = apply_step(model, step, base_dir)
    except Exception as exc:  # a fix that refuses says why, here too
        return StepPreview(refused=str(exc))
    before_keys, after_keys = set(node_keys(model.graph.node)), set(node_keys(after.graph.node))
    verdicts = []
    for target in targets:
        b = check_one(model, target, base_dir, depth=depth)
        a = check_one(after, target, base_dir, depth=depth)
        verdicts.append((a.label, len(b.rejected), len(a.rejected)))
    return StepPreview(sorted(before_keys - after_keys), sorted(after_keys - before_keys), verdicts)
