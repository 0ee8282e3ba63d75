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
import time
from pathlib import Path

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


def call_isolated(
    func_path: str, *args, timeout: float = 120.0, env: dict | None = None, progress=None, **kwargs
):
    """Call `func_path(*args, **kwargs)` in a fresh Python process; return its result or raise BackendCrash.

    `progress(fraction, message)` receives what the child reports with `report_progress`, while it runs."""
    with tempfile.TemporaryDirectory(prefix="onnx-surgery-call-") as tmp:
        req, out = os.path.join(tmp, "req.pkl"), os.path.join(tmp, "out.pkl")
        progress_file, err_file = os.path.join(tmp, "progress"), os.path.join(tmp, "stderr")
        with open(req, "wb") as f:
            pickle.dump((func_path, args, kwargs), f)
        child_env = dict(os.environ, **(env or {}), ONNX_SURGERY_PROGRESS=progress_file)
        with open(err_file, "w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, req, out],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=child_env,
                start_new_session=True,
            )
            deadline, seen = time.monotonic() + timeout, 0
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise BackendCrash(f"backend timed out after {timeout:g} s")
                seen = _forward_progress(progress_file, seen, progress)
                time.sleep(0.05)
            _forward_progress(progress_file, seen, progress)
        stderr = Path(err_file).read_text(errors="replace")[-4000:]
        if proc.returncode < 0:
            sig = -proc.returncode
            raise BackendCrash(f"backend crashed: signal {sig} ({_signal_name(sig)})", stderr)
        if not os.path.exists(out):
            tail = (stderr.strip().splitlines() or ["no output"])[-1]
            raise BackendCrash(f"backend exited with code {proc.returncode}: {tail}", stderr)
        with open(out, "rb") as f:
            result = pickle.load(f)
    if result[0] == "ok":
        return result[1]
    raise BackendCrash(result[1], result[2])


def _forward_progress(path: str, seen: int, progress) -> int:
    if progress is None or not os.path.exists(path):
        return seen
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines[seen:]:
        fraction, _, message = line.partition("\t")
        try:
            progress(float(fraction), message)
        except ValueError:
            continue
    return len(lines)


def report_progress(fraction: float, message: str) -> None:
    """From inside an isolated call: tell the caller how far along it is."""
    path = os.environ.get("ONNX_SURGERY_PROGRESS")
    if path:
        with open(path, "a") as f:
            f.write(f"{fraction:.4f}\t{message}\n")


def crash_for_test(sig: int = signal.SIGSEGV) -> None:
    """Kill the current process with `sig` (used by the tests to prove a crash becomes a verdict)."""
    os.kill(os.getpid(), sig)
