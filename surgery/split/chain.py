"""Running a plan: its parts chained, each through its own backend where this machine can run it
(surgery.split.runners), the crossing tensors handed from part to part."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from surgery.split.plan import Part, Plan, load
from surgery.text import error_line

# -- running -------------------------------------------------------------------------------------------------


def run(plan: Plan | str | Path, inputs: dict, *, own_backends: bool = True) -> dict[str, np.ndarray]:
    """Run the parts of `plan` (a Plan, or the folder / plan.json Plan.save wrote) chained on `inputs` (graph
    input name -> array) and return the original's outputs by name. Each part runs through its own backend where
    this machine can run it (`own_backends`), else onnxruntime."""
    if not isinstance(plan, Plan):
        plan = load(plan)
    env, _ = execute(plan, inputs, own_backends=own_backends)
    return {o: env[o] for o in plan.outputs}


def execute(plan: Plan, inputs: dict, *, own_backends: bool = True) -> tuple[dict, list[tuple[str, str]]]:
    """Every tensor the chain computed, and per part (the backend that ran it, a note)."""
    from surgery.split.runners import make_runner

    missing = [t.name for t in plan.inputs if t.name not in inputs]
    if missing:
        raise ValueError(f"no value for input(s) {missing}")
    env = dict(inputs)
    ran = []
    for part in plan.parts:
        key = (part.index, own_backends)
        if key not in plan._runners:
            backend = part.backend if own_backends else "onnxruntime"
            try:
                plan._runners[key] = make_runner(backend, part.model, plan.base_dir)
            except Exception as exc:
                raise PartFailed(part, f"could not load: {error_line(exc)}") from None
        runner, on, note = plan._runners[key]
        try:
            env.update(runner({k: env[k] for k in part.inputs}))
        except Exception as exc:
            raise PartFailed(part, f"failed on {on}: {error_line(exc)}") from None
        ran.append((on, note))
    return env, ran


class PartFailed(Exception):
    def __init__(self, part: Part, message: str):
        super().__init__(f"part {part.index} ({part.file}) {message}")
        self.part = part
