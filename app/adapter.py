"""The one place where the app keeps state and caches: the workspace, the chosen targets, the selected node,
check results (cached by model fingerprint + target) and the loaded rules. Pages call these functions and the
library; they never hold state of their own."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from surgery.model import ModelLoadError, load_model
from surgery.samples import DEFAULT_SAMPLE, lessons, sample_path
from surgery.workspace import Workspace

DEFAULT_TARGETS = ["tensorrt-static@10.15", "onnxruntime"]
USER_RULES = Path(os.environ.get("ONNX_SURGERY_USER_RULES", Path.home() / ".onnx-surgery" / "rules"))


def models_dir() -> Path | None:
    d = os.environ.get("ONNX_SURGERY_MODELS_DIR")
    return Path(d).resolve() if d else None


def state():
    return st.session_state


def ensure_state() -> None:
    s = state()
    if "ws" in s:
        return
    start = os.environ.get("ONNX_SURGERY_START_MODEL")
    s.targets = list(DEFAULT_TARGETS)
    s.selected = None
    s.last_applied = None
    s.error = None
    s.scope = None
    if start:
        open_path(start, check_folder=False)
    if "ws" not in s:
        open_sample(DEFAULT_SAMPLE)


def _set_workspace(ws: Workspace, name: str) -> None:
    s = state()
    s.ws, s.model_name = ws, name
    s.selected, s.last_applied, s.error, s.scope = None, None, None, None


def open_sample(name: str) -> None:
    _set_workspace(Workspace.open(sample_path(name)), f"{name}.onnx")


def open_bytes(data: bytes, name: str) -> bool:
    try:
        _set_workspace(Workspace.open(data, name=name), name)
        return True
    except ModelLoadError as exc:
        state().error = str(exc)
        return False


def open_path(path: str, check_folder: bool = True) -> bool:
    p = Path(path).expanduser().resolve()
    root = models_dir()
    if check_folder:
        if root is None:
            state().error = "opening server paths is off: start the app with --models-dir DIR"
            return False
        if root != p and root not in p.parents:
            state().error = f"{path}: refused — only files under {root} can be opened"
            return False
    try:
        _set_workspace(Workspace(load_model(p)), p.name)
        return True
    except ModelLoadError as exc:
        state().error = str(exc)
        return False


def workspace() -> Workspace:
    ensure_state()
    return state().ws


@st.cache_data(show_spinner=False, max_entries=64)
def _check(fp: str, target: str, _model, _base_dir):
    from surgery.diagnose import check_one

    return check_one(_model, target, _base_dir, fp=fp)


def reports(targets: list[str] | None = None):
    """Check reports for the current model, one per target (cached by fingerprint and target)."""
    ws = workspace()
    fp = ws.fingerprint()
    out = []
    for t in targets if targets is not None else state().targets:
        try:
            out.append(_check(fp, t, ws.current, ws.original.base_dir))
        except Exception as exc:  # an unknown target or a backend that cannot load: say so, keep going
            from surgery.backends.base import Report

            r = Report(t, t, "")
            r.messages.append(f"could not check: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            out.append(r)
    return out


@st.cache_resource(show_spinner=False)
def builtin_rules():
    from surgery.rulebook import load_rules

    return load_rules()


def all_rules():
    """Built-in rules plus the user's saved rules (a broken user rule file is reported, not fatal)."""
    from surgery.rulebook import RuleError, load_rules

    rules = list(builtin_rules())
    if USER_RULES.is_dir() and any(USER_RULES.glob("*.y*ml")):
        try:
            rules += load_rules([USER_RULES])
        except RuleError as exc:
            state().error = str(exc)
    return rules


def proposals(node_key: str | None = None):
    from surgery.rulebook import propose

    ws = workspace()
    found = propose(ws.current, all_rules(), state().targets)
    return [p for p in found if node_key is None or p.node == node_key]


def preview(proposal) -> dict:
    """What applying the proposal would change: nodes removed and added, and each target's verdict count."""
    from surgery.graph import node_keys
    from surgery.workspace import apply_step

    ws = workspace()
    try:
        after = apply_step(ws.current, proposal.step, ws.original.base_dir)
    except Exception as exc:  # a fix that refuses says why, here too
        return {"removed": [], "added": [], "verdicts": [f"the fix refuses: {exc}"]}
    before_keys, after_keys = set(node_keys(ws.current.graph.node)), set(node_keys(after.graph.node))
    lines = []
    for target in state().targets:
        from surgery.diagnose import check_one

        b, a = (
            check_one(ws.current, target, ws.original.base_dir),
            check_one(after, target, ws.original.base_dir),
        )
        lines.append(f"{a.label}: {len(b.rejected)} → {len(a.rejected)} rejected node(s)")
    return {
        "removed": sorted(before_keys - after_keys),
        "added": sorted(after_keys - before_keys),
        "verdicts": lines,
    }


def apply_proposal(proposal) -> None:
    from surgery.fixes import FixError
    from surgery.rulebook import apply

    s = state()
    try:
        s.last_applied = apply(workspace(), proposal, check=False)
        s.error = None
    except FixError as exc:
        s.error = str(exc)


def target_options() -> list[str]:
    from surgery.backends import static_versions

    try:
        statics = [f"tensorrt-static@{v}" for v in static_versions()]
    except Exception:
        statics = []
    return ["tensorrt", *statics, "onnxruntime", "openvino", "tvm"]


def open_lesson(name: str) -> None:
    """A button callback: open the lesson's broken model with its backend as target and its node selected."""
    lesson = next(x for x in lessons() if x.name == name)
    open_sample(name)
    options = target_options()
    state().targets = [t for t in dict.fromkeys([lesson.backend, "onnxruntime"]) if t in options]
    state().selected = lesson.node


def lesson(name: str):
    return next(x for x in lessons() if x.name == name)
