"""Split and reduce from the app: a plan for a target (surgery.split) and the smallest model a target still
refuses (surgery.reduce), each kept per model version and offered as files."""

from __future__ import annotations

from checks import depth
from session import state, version, workspace


def split_key(target: str, min_nodes: int) -> tuple:
    return (version(), target, depth(), int(min_nodes))


def make_split(target: str, min_nodes: int, progress=None) -> None:
    """Split the current model for `target` (surgery.split.make_plan, onnxruntime as the fallback); the plan, or
    the one-line reason there is none, is kept for this model version (`split_result`). `progress(fraction,
    message)` is called as the plan is made."""
    from surgery.backends import UnknownBackend
    from surgery.split import SplitError, make_plan

    ws = workspace()
    try:
        plan = make_plan(
            ws.current,
            target,
            min_nodes=int(min_nodes),
            depth=depth(),
            base_dir=ws.original.base_dir,
            progress=progress,
            source=state().model_name,  # plan.json says which model it splits, as the CLI's does
            original=ws.original,  # weights left in its file: the parts are written with them
        )
    except (SplitError, UnknownBackend) as exc:
        plan = str(exc)
    state().setdefault("splits", {})[split_key(target, min_nodes)] = plan


def split_result(target: str, min_nodes: int):
    """The plan made by `make_split` for this model version, target and --min-nodes (or its error text)."""
    return (state().get("splits") or {}).get(split_key(target, min_nodes))


def split_zip(plan) -> bytes:
    """The parts and plan.json as a zip (surgery.split.Plan.to_zip)."""
    return plan.to_zip()


REDUCE_TIME_LIMIT_S = 60.0


def make_reduced(node_key: str, target: str, progress=None) -> None:
    """The minimal failing model for `node_key`'s refusal by `target` (surgery.reduce), kept for this model
    version (`reduced`); the one-line reason where there is none. `progress(fraction, message)` is called as
    it goes."""
    from surgery.reduce import ReduceError, reduce_model

    ws = workspace()
    try:
        result = reduce_model(
            ws.current,
            target,
            node=node_key,
            time_limit=REDUCE_TIME_LIMIT_S,
            depth=depth(),
            base_dir=ws.original.base_dir,
            progress=progress,
        )
    except ReduceError as exc:
        result = str(exc)
    state().setdefault("reduced", {})[(version(), target, depth(), node_key)] = result


def reduced(node_key: str, target: str):
    return (state().get("reduced") or {}).get((version(), target, depth(), node_key))


def reduced_bytes(result) -> bytes:
    return result.to_bytes(workspace().original.base_dir)
