"""Run backend calls that can crash (TensorRT, OpenVINO, TVM) in a child process with a time limit.

A crash (signal), a timeout or an exception in the child becomes `BackendCrash` with a one-line message;
the caller never dies with the backend. The function is named as "package.module:function" so the child
imports it fresh; arguments and result travel by pickle over a pipe.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile

_CHILD = r"""
import importlib, pickle, sys, traceback
path, out = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    func_path, args, kwargs = pickle.load(f)
mod, _, name = func_path.partition(":")
try:
    result = ("ok", getattr(importlib.import_module(mod), name)(*args, **kwargs))
except BaseException as exc:  # report any failure to the parent as data
    line = (str(exc).strip().splitlines() or [""])[0]
    result = ("error", f"{type(exc).__name__}: {line}", traceback.format_exc())
with open(out, "wb") as f:
    pickle.dump(result, f)
"""


class BackendCrash(Exception):
    """The isolated call crashed, timed out or raised; `str()` is one line for the user."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def call_isolated(func_path: str, *args, timeout: float = 120.0, env: dict | None = None, **kwargs):
    """Call `func_path(*args, **kwargs)` in a fresh Python process; return its result or raise BackendCrash."""
    with tempfile.TemporaryDirectory(prefix="onnx-surgery-call-") as tmp:
        req, out = os.path.join(tmp, "req.pkl"), os.path.join(tmp, "out.pkl")
        with open(req, "wb") as f:
            pickle.dump((func_path, args, kwargs), f)
        child_env = dict(os.environ, **(env or {}))
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _CHILD, req, out],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=child_env,
            )
        except subprocess.TimeoutExpired:
            raise BackendCrash(f"backend timed out after {timeout:g} s") from None
        if proc.returncode < 0:
            sig = -proc.returncode
            raise BackendCrash(f"backend crashed: signal {sig} ({_signal_name(sig)})", proc.stderr[-4000:])
        if not os.path.exists(out):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise BackendCrash(f"backend exited with code {proc.returncode}: {tail}", proc.stderr[-4000:])
        with open(out, "rb") as f:
            result = pickle.load(f)
    if result[0] == "ok":
        return result[1]
    raise BackendCrash(result[1], result[2])


def crash_for_test(sig: int = signal.SIGSEGV) -> None:
    """Kill the current process with `sig` (used by the tests to prove a crash becomes a verdict)."""
    os.kill(os.getpid(), sig)
