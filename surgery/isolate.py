"""Run backend calls that can crash (TensorRT, OpenVINO, TVM) in a child process with a time limit.

A crash (signal), a timeout or an exception in the child becomes `BackendCrash` with a one-line message;
the caller never dies with the backend. The function is named as "package.module:function" so the child
imports it itself; arguments and result travel by pickle over a pipe.

The child is a worker that stays alive between calls (imports such as `tvm` or `openvino` are paid once per
worker, not once per call); a worker that crashed or timed out is killed and replaced on the next call. Each
call has a worker to itself (threads get one each), and `fresh=True` asks for a one-shot process instead.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

from surgery import resources

# The worker: reads length-prefixed pickled requests on fd 0, answers on a private copy of the original
# stdout; the function's own prints go to stderr so they cannot corrupt the answer.
_WORKER = r"""
import importlib, os, pickle, struct, sys, traceback
answer = os.fdopen(os.dup(1), "wb", buffering=0)
os.dup2(2, 1)
requests = os.fdopen(0, "rb", buffering=0)

def read_exact(n):
    buf = bytearray()
    while len(buf) < n:
        chunk = requests.read(min(n - len(buf), 1 << 20))
        if not chunk:
            sys.exit(0)
        buf += chunk
    return bytes(buf)

for preload in sys.argv[1:]:  # what the coming call will import, imported while the parent still works (prewarm)
    try:
        importlib.import_module(preload)
    except BaseException:  # the call itself imports it again and reports the failure as its own
        pass

while True:
    size = struct.unpack("<Q", read_exact(8))[0]
    func_path, args, kwargs, progress_file = pickle.loads(read_exact(size))
    os.environ["ONNX_SURGERY_PROGRESS"] = progress_file
    mod, _, name = func_path.partition(":")
    try:
        result = ("ok", getattr(importlib.import_module(mod), name)(*args, **kwargs))
        data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:  # report any failure (and an unpicklable result) to the parent as data
        line = (str(exc).strip().splitlines() or [""])[0]
        data = pickle.dumps(("error", f"{type(exc).__name__}: {line}", traceback.format_exc()))
    sys.stdout.flush()
    sys.stderr.flush()
    answer.write(struct.pack("<Q", len(data)) + data)
"""

# the priority of a server's background work (shape inference, checks that read every weight): a CPU weight ~1/9
# of a normal process's (Linux CFS), so on a busy machine the page and the browser come first
BACKGROUND_NICE = 10
MAX_CALLS_PER_WORKER = 200  # recycle a worker now and then (backends keep caches)
MAX_IDLE_WORKERS = 2


class BackendCrash(Exception):
    """The isolated call crashed, timed out or raised; `str()` is one line for the user, `detail` the log."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


def _signal_name(num: int) -> str:
    try:
        return f"signal {num} ({signal.Signals(num).name})"
    except ValueError:
        return f"signal {num}"


def _pythonpath(extra: dict | None) -> str:
    """The child must import `surgery` from wherever the parent did, whatever its working directory (a checkout
    goes on its PYTHONPATH; site-packages, where it finds an installed package by itself, does not)."""
    root = [] if resources.installed_in_site_packages() else [str(resources.IMPORT_ROOT)]
    parts = root + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if extra and extra.get("PYTHONPATH"):
        parts = extra["PYTHONPATH"].split(os.pathsep) + parts
    return os.pathsep.join(dict.fromkeys(parts))


def _pool_key(env: dict | None, nice: int) -> tuple:
    return (nice, *sorted((env or {}).items()))


class _Worker:
    def __init__(self, env: dict | None, nice: int = 0, preload: tuple[str, ...] = ()):
        self.env_key = _pool_key(env, nice)
        self.tmp = tempfile.TemporaryDirectory(prefix="onnx-surgery-worker-")
        self.err_path = os.path.join(self.tmp.name, "stderr")
        self.err = open(self.err_path, "w+b")  # noqa: SIM115 - lives as long as the worker
        child_env = dict(os.environ, **(env or {}))
        child_env["PYTHONPATH"] = _pythonpath(env)
        # the child's temporary files live in a folder this process owns and removes, even when the child dies
        child_env["TMPDIR"] = os.path.join(self.tmp.name, "tmp")
        os.mkdir(child_env["TMPDIR"])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            env=child_env,
            start_new_session=True,
        )
        if nice:  # set from here, not in the child (preexec_fn is unsafe in a threaded server)
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, self.proc.pid, nice)
        self.calls = 0
        self.dead = False

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def kill(self) -> None:
        if self.dead:
            return
        self.dead = True
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.err):
            with contextlib.suppress(OSError):
                f.close()
        self.tmp.cleanup()

    def stderr_since(self, offset: int) -> str:
        self.err.flush()
        with open(self.err_path, "rb") as f:
            f.seek(offset)
            return f.read()[-4000:].decode(errors="replace")

    def call(self, func_path, args, kwargs, timeout: float, progress):
        progress_file = os.path.join(self.tmp.name, f"progress{self.calls}")
        err_offset = os.path.getsize(self.err_path)
        self.calls += 1
        data = pickle.dumps((func_path, args, kwargs, progress_file), protocol=pickle.HIGHEST_PROTOCOL)
        deadline = time.monotonic() + timeout
        try:  # the header, then the data: joining them would copy a serialized model once more
            self.proc.stdin.write(struct.pack("<Q", len(data)))
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._died(err_offset)
        fd, buf, need, seen = self.proc.stdout.fileno(), bytearray(), None, 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                detail = self.stderr_since(err_offset)
                self.kill()
                raise BackendCrash(f"backend timed out after {timeout:g} s", detail)
            ready, _, _ = select.select([fd], [], [], min(left, 0.05 if progress else 0.5))
            seen = _forward_progress(progress_file, seen, progress)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return self._died(err_offset)
            buf += chunk
            if need is None and len(buf) >= 8:
                need = struct.unpack("<Q", buf[:8])[0] + 8
            if need is not None and len(buf) >= need:
                _forward_progress(progress_file, seen, progress)
                result = pickle.loads(buf[8:need])
                if result[0] == "ok":
                    return result[1]
                raise BackendCrash(result[1], result[2])

    def _died(self, err_offset: int):
        code = self.proc.wait()
        detail = self.stderr_since(err_offset)
        self.kill()
        if code < 0:
            raise BackendCrash(f"backend crashed: {_signal_name(-code)}", detail)
        tail = (detail.strip().splitlines() or ["no output"])[-1]
        raise BackendCrash(f"backend exited with code {code}: {tail}", detail)


_idle: list[_Worker] = []
_lock = threading.Lock()


def _take(env: dict | None, nice: int = 0) -> _Worker:
    key = _pool_key(env, nice)
    with _lock:
        for w in list(_idle):
            if w.env_key == key:
                _idle.remove(w)
                if w.alive():
                    return w
                w.kill()
    return _Worker(env, nice)


def _give_back(worker: _Worker) -> None:
    if not worker.alive() or worker.calls >= MAX_CALLS_PER_WORKER:
        worker.kill()
        return
    _park(worker)


def _park(worker: _Worker) -> None:
    """Keep `worker` idle for the next call; the oldest idle ones past MAX_IDLE_WORKERS stop."""
    with _lock:
        _idle.append(worker)
        extra = _idle[:-MAX_IDLE_WORKERS] if len(_idle) > MAX_IDLE_WORKERS else []
        del _idle[: len(extra)]
    for w in extra:
        w.kill()


def prewarm(modules: tuple[str, ...] | list[str], env: dict | None = None, nice: int = 0) -> None:
    """Start a worker now that imports `modules` (a backend and our module that calls it) while this process goes
    on: the next `call_isolated` with the same `env` and `nice` takes it, its interpreter started and its imports
    done. A CLI check calls this before it reads the model, so on two cores the worker's start (OpenVINO: ~0.6 s)
    overlaps the model's loading. Does nothing when such a worker is idle already. Never forks this process
    (forking one that holds onnxruntime's or OpenBLAS's threads is unsafe: microsoft/onnxruntime#31961)."""
    key = _pool_key(env, nice)
    with _lock:
        if any(w.env_key == key and w.alive() for w in _idle):
            return
    _park(_Worker(env, nice, tuple(modules)))


def shutdown() -> None:
    """Stop every idle worker (they also stop by themselves when this process exits)."""
    with _lock:
        workers, _idle[:] = list(_idle), []
    for w in workers:
        w.kill()


atexit.register(shutdown)


def call_isolated(
    func_path: str,
    *args,
    timeout: float = 120.0,
    env: dict | None = None,
    progress=None,
    fresh: bool = False,
    nice: int = 0,
    **kwargs,
):
    """Call `func_path(*args, **kwargs)` ("package.module:function") in a worker process; return its result or
    raise BackendCrash ("backend crashed: signal 11 (SIGSEGV)", "backend timed out after 60 s", or the
    exception's first line).

    `progress(fraction, message)` receives what the child reports with `report_progress`, while it runs.
    `env` adds environment variables for the child; `fresh=True` uses a new process just for this call; `nice`
    (0-19) lowers the worker's CPU priority (workers of each priority are pooled apart)."""
    worker = _Worker(env, nice) if fresh else _take(env, nice)
    try:
        result = worker.call(func_path, args, kwargs, timeout, progress)
    except BackendCrash:
        if worker.alive() and not fresh:
            _give_back(worker)  # a Python exception leaves the worker healthy
        else:
            worker.kill()
        raise
    except BaseException:  # KeyboardInterrupt, unpicklable arguments: do not leave a half-read pipe around
        worker.kill()
        raise
    if fresh:
        worker.kill()
    else:
        _give_back(worker)
    return result


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


def crash_for_test(sig: int = signal.SIGSEGV, *_args) -> None:
    """Kill the current process with `sig` (used by the tests to prove a crash becomes a verdict; extra
    arguments are ignored, so it can stand in for any worker function)."""
    os.kill(os.getpid(), sig if isinstance(sig, int) else signal.SIGFPE)


def leave_a_temp_file_and_crash(sig: int = signal.SIGSEGV) -> str:
    """Write a temporary file, then die (the tests prove the parent removes what a dead child left behind)."""
    fd, path = tempfile.mkstemp(suffix=".onnx")
    os.write(fd, b"x")
    os.close(fd)
    print(path, file=sys.stderr, flush=True)
    os.kill(os.getpid(), sig)
    return path
