"""The targets and their checks: the defaults, which targets are checked yet, each check cached by model
fingerprint and target (big models in a worker process), the check depth, partitions, and the backends here."""

from __future__ import annotations

import os

import streamlit as st
from graph_facts import _unedited_path, facts
from session import state, version, workspace

# Targets a new session checks: the live parser where it runs (its own words), the predictor for the TensorRT
# version most deployments run, and onnxruntime; $ONNX_SURGERY_TARGETS (comma-separated) names others.
DEFAULT_TARGETS = ["tensorrt-static@10.15", "onnxruntime"]


def default_targets() -> list[str]:
    """The targets a new session starts with (see DEFAULT_TARGETS); the live parser first where it runs here."""
    named = [t.strip() for t in os.environ.get("ONNX_SURGERY_TARGETS", "").split(",") if t.strip()]
    if named:  # `onnx-surgery app -t ...` checked them before the server started
        return named
    return (["tensorrt"] if live_parser_runs() else []) + list(DEFAULT_TARGETS)


@st.cache_resource(show_spinner=False)
def live_parser_runs() -> bool:
    from surgery.backends import get_backend

    try:
        return get_backend("tensorrt").availability().ok
    except Exception:  # noqa: BLE001 - a backend that cannot be constructed is not a default
        return False


def keep_targets(options: list[str]) -> None:
    """Drop the chosen targets that are not among `options` (the targets widget is bound to the state)."""
    s = state()
    chosen = s.pop("targets_next", None) or s.targets  # set by a run after the widget was drawn (_rebase)
    s.targets = [t for t in chosen if t in options]


def _checked() -> set:
    return state().setdefault("_checked", set())  # (fingerprint, target) pairs checked in this session


def checked_targets() -> list[str]:
    """The chosen targets already checked on this model version in this session (their verdicts are drawn)."""
    fp = version()
    return [t for t in state().targets if (fp, t) in _checked()]


def unchecked_targets() -> list[str]:
    """The chosen targets still to check on this model version, one per run after the page is drawn (none for a
    big model until its check is asked for)."""
    if check_pending():
        return []
    fp = version()
    return [t for t in state().targets if (fp, t) not in _checked()]


# Draw first: in a browser, a model's checks start once the browser says its drawing is on screen (the graph
# component reports it): each target's verdicts come with a rerun, and reruns while the page is still loading
# held a small model's first drawing up by ~0.6 s (bench/app_open.py). Without a report, after this long anyway.
CHECKS_WAIT_FOR_DRAWING_S = 3.0


def browser_attached() -> bool:
    """Whether this session is a page in a browser (AppTest's sessions have no request headers)."""
    return bool(st.context.headers)


def checks_may_start(drawn: set, shown: set) -> bool:
    """Whether this run may start the pending checks: the browser has reported drawing one of the layouts
    `shown` this run, or it has not within CHECKS_WAIT_FOR_DRAWING_S, or there is no browser (AppTest)."""
    import time

    if not browser_attached() or drawn & shown:
        return True
    waits = state().setdefault("_drawing_waits", {})
    key = (version(), frozenset(shown))
    since = waits.setdefault(key, time.monotonic())
    return time.monotonic() - since > CHECKS_WAIT_FOR_DRAWING_S


def mark_checked(target: str) -> None:
    _checked().add((version(), target))


@st.cache_resource(show_spinner=False, max_entries=64)  # not cache_data: unpickling 100k verdicts per rerun
def _check(fp: str, target: str, _model, _base_dir, depth: str | None = None, _path: str | None = None):
    """`_path`: the file `_model` was read from, unedited (a worker checking a heavy model reads it there: no
    copy of it in the server)."""
    from surgery.diagnose import check_one

    return check_one(_model, target, _base_dir, fp=fp, depth=depth, in_worker=_heavy(), path=_path)


# A check that reads every weight (onnxruntime's session) runs in a worker process for a model with more weights
# than this: the server, shared by every session, never holds a big model's weights (a 2 GiB external-data model:
# 1.8 GiB in the server otherwise). Below it, in the server: a worker's start and the graph facts it builds again
# cost ~0.5-1 s of a small model's verdicts (bench/app_open.py).
CHECK_IN_WORKER_OVER = 64 * 2**20  # bytes of weights, in the file and in external files


def _heavy() -> bool:
    """Whether the workspace's model has more weights than CHECK_IN_WORKER_OVER: the size of the file it was read
    from and its external data (an edit rarely changes the weights' volume; `model.ByteSize()` would serialize
    the whole model, weights included, on every check)."""
    ws = workspace()
    external = ws.original.external_bytes if ws.original.base_dir is not None else 0
    return ws.original.file_bytes + external > CHECK_IN_WORKER_OVER


DEPTHS = {"each target's default": None, "parse": "parse", "build": "build"}


def depth() -> str | None:
    """How far the checks go (the sidebar's choice): None for each target's default, else parse or build."""
    return DEPTHS.get(state().get("check_depth") or "")


CHECK_ON_REQUEST_OVER = (
    20_000  # nodes: a bigger model is drawn first and checked when asked (it takes a while)
)


def check_pending() -> bool:
    """True for a big model whose check has not been asked for yet in this workspace."""
    return len(workspace().current.graph.node) > CHECK_ON_REQUEST_OVER and not state().get("check_big")


def allow_check() -> None:
    state().check_big = True


def reports(targets: list[str] | None = None):
    """Check reports for the current model, one per target (cached by fingerprint and target); none for a big
    model until its check is asked for (`allow_check`)."""
    if targets is None and check_pending():
        return []
    ws = workspace()
    fp = version()
    out, path = [], _unedited_path() if _heavy() else None  # the file only matters to a worker's check
    for t in targets if targets is not None else state().targets:
        try:
            out.append(_check(fp, t, ws.current, ws.original.base_dir, depth(), path))
        except Exception as exc:  # an unknown target or a backend that cannot load: say so, keep going
            from surgery.text import error_line
            from surgery.verdict import Message, Report

            r = Report(t, t, "", accepted=False)
            r.messages.append(Message("error", explanation=f"could not check: {error_line(exc)}"))
            out.append(r)
    return out


@st.cache_resource(show_spinner=False, max_entries=32)
def _partition(fp: str, backend: str, _model, _report, _facts):
    from surgery.partition import partition

    return partition(_model, _report, _facts)


def partition(report):
    """Supported regions, fallbacks and crossing tensors of the current model for one report (cached)."""
    return _partition(version(), report.backend, workspace().current, report, facts())


@st.cache_resource(show_spinner="Looking for the backends on this machine…")
def backends_here():
    """`surgery.backends.list_backends()` once per server: (id, label, version, Availability)."""
    from surgery.backends import list_backends

    return list_backends()


def buildable() -> tuple[list[str], dict[str, str]]:
    """Backends with a builder that work here, and why the others do not."""
    from surgery.backends.build import BUILDERS

    ok, why = [], {}
    for bid, _label, _version, avail in backends_here():
        name = bid.split("@")[0]
        if name not in BUILDERS:
            continue
        if avail.ok:
            ok.append(name)
        else:
            why[name] = avail.reason
    return ok, why


def target_options() -> list[str]:
    from surgery.backends import static_versions

    try:
        statics = [f"tensorrt-static@{v}" for v in static_versions()]
    except Exception:
        statics = []
    return ["tensorrt", *statics, "onnxruntime", "openvino", "tvm"]
