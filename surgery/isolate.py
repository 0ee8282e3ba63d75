"""Run backend calls that can crash (TensorRT, OpenVINO, TVM) in a child process with a time limit.

A crash (signal), a timeout or an exception in the child becomes `BackendCrash` with a one-line message;
the caller never dies with the backend. The function is named as "package.module:function" so the child
imports it itself; arguments and result travel by pickle over a pipe.

The child is a worker that stays alive between calls (imports such as `tvm` or `openvino` are paid once per
worker, not once per call); a worker that crashed or timed out is killed and replaced on the next call. Each
call has a worker to itself (threads get one each), and `fresh=True` asks for a one-shot process instead.

`Beside(fn)` runs work that is mostly a wait on a worker (a fix step's verification) in a thread of its own, and
tells its caller when that thread has reached the worker, so that the caller's own work overlaps the worker's.

`prewarm(modules)` starts a worker ahead of its first call, importing those modules while the caller does its own
work (a one-shot CLI check reads and parses the model meanwhile): on two cores the backend's import no longer
follows the parent's. The worker is started fresh, never forked from the caller (forking a process that holds
onnxruntime's or OpenBLAS's threads is unsafe, microsoft/onnxruntime#31961).
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
from collections.abc import Callable
from typing import Any

from surgery import resources

# The worker: reads requests on fd 0 (the pickle's length and how many large byte strings travel beside it, the
# pickle, then each of those with its length), answers on a private copy of the original stdout; the function's
# own prints go to stderr so they cannot corrupt the answer.
_WORKER = r"""
import importlib, os, pickle, struct, sys, traceback
answer = os.fdopen(os.dup(1), "wb", buffering=0)
os.dup2(2, 1)
requests = os.fdopen(0, "rb", buffering=0)
for name in sys.argv[1:]:  # prewarm: import now, while the parent works; a failure is the first call's to report
    try:
        importlib.import_module(name)
    except BaseException:  # SystemExit too: the worker must live to serve the call, which imports again
        pass

def read_exact(n):
    buf = bytearray(n)  # read in place: a request holding a serialized model is not copied again
    view, got = memoryview(buf), 0
    while got < n:
        k = requests.readinto(view[got : got + (1 << 20)])
        if not k:
            sys.exit(0)
        got += k
    return buf

while True:
    size, count = struct.unpack("<QQ", read_exact(16))
    pickled = read_exact(size)
    beside = [bytes(read_exact(struct.unpack("<Q", read_exact(8))[0])) for _ in range(count)]
    func_path, args, kwargs, progress_file = pickle.loads(pickled, buffers=beside)
    del pickled, beside
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
BESIDE_FROM = 1 << 20  # bytes: a byte string argument this large travels beside the request's pickle
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


# A pipe's buffer is 64 KiB by default: a serialized model crosses it in that many pieces, and a caller thread
# waits for the GIL before each (up to sys.getswitchinterval(), 5 ms, while another thread runs Python), so 20 MB
# took 2.7 s beside a busy thread instead of 0.05 s. 1 MiB is Linux's limit for an unprivileged process
# (/proc/sys/fs/pipe-max-size).
PIPE_SIZE = 1 << 20


def _widen(fd: int) -> None:
    import fcntl

    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no F_SETPIPE_SZ off Linux
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)


class _Worker:
    def __init__(self, env: dict | None, nice: int = 0, imports: tuple[str, ...] = ()):
        self.env_key = _pool_key(env, nice)
        self.warm = frozenset(imports)  # the modules it imported when it started (prewarm)
        self.tmp = tempfile.TemporaryDirectory(prefix="onnx-surgery-worker-")
        self.err_path = os.path.join(self.tmp.name, "stderr")
        self.err = open(self.err_path, "w+b")  # noqa: SIM115 - lives as long as the worker
        child_env = dict(os.environ, **(env or {}))
        child_env["PYTHONPATH"] = _pythonpath(env)
        # the child's temporary files live in a folder this process owns and removes, even when the child dies
        child_env["TMPDIR"] = os.path.join(self.tmp.name, "tmp")
        os.mkdir(child_env["TMPDIR"])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, *imports],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            env=child_env,
            start_new_session=True,
        )
        if nice:  # set from here, not in the child (preexec_fn is unsafe in a threaded server)
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, self.proc.pid, nice)
        os.set_blocking(self.proc.stdin.fileno(), False)  # written by _send, which keeps the call's deadline
        for pipe in (self.proc.stdin, self.proc.stdout):
            _widen(pipe.fileno())
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
        # a large byte string argument (a serialized model) travels beside the pickle, not in it: pickling it
        # copied it once more (a 73 MB model sent twice to compare: the fix's peak)
        beside = [pickle.PickleBuffer(a) if type(a) is bytes and len(a) >= BESIDE_FROM else a for a in args]
        ours = {id(a) for a in beside if type(a) is pickle.PickleBuffer}
        buffers: list = []

        def out_of_band(buffer) -> bool:  # numpy's own buffers stay in the pickle, as before
            if id(buffer) not in ours:
                return True
            buffers.append(buffer)
            return False

        data = pickle.dumps(
            (func_path, tuple(beside), kwargs, progress_file), protocol=5, buffer_callback=out_of_band
        )
        deadline = time.monotonic() + timeout
        try:  # the header, then each part: joining them would copy a serialized model once more
            sent = self._send(struct.pack("<QQ", len(data), len(buffers)), deadline) and self._send(
                data, deadline
            )
            for buffer in buffers:
                view = buffer.raw()
                sent = (
                    sent and self._send(struct.pack("<Q", len(view)), deadline) and self._send(view, deadline)
                )
        except BrokenPipeError:
            return self._died(err_offset)
        if not sent:
            self._timed_out(timeout, err_offset)
        me = threading.get_ident()
        with _waiting_changed:  # this thread now waits on the worker (see Beside)
            _waiting.add(me)
            _waiting_changed.notify_all()
        try:
            return self._answer(timeout, deadline, err_offset, progress_file, progress)
        finally:
            with _waiting_changed:
                _waiting.discard(me)

    def _answer(self, timeout: float, deadline: float, err_offset: int, progress_file: str, progress):
        fd, buf, need, seen = self.proc.stdout.fileno(), bytearray(), None, 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._timed_out(timeout, err_offset)
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

    def _send(self, data: bytes, deadline: float) -> bool:
        """Write `data` to the worker before `deadline` (False: not all of it in time). A prewarmed worker may still
        be importing its backend and not reading yet: a request larger than the pipe's buffer (a serialized model)
        would block a plain write past the call's time limit, so the pipe is non-blocking and waited on here."""
        fd, view, done = self.proc.stdin.fileno(), memoryview(data), 0
        while done < len(view):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _, ready, _ = select.select([], [fd], [], left)
            if ready:
                with contextlib.suppress(BlockingIOError):
                    done += os.write(fd, view[done : done + (1 << 20)])
        return True

    def _timed_out(self, timeout: float, err_offset: int):
        detail = self.stderr_since(err_offset)
        self.kill()
        raise BackendCrash(f"backend timed out after {timeout:g} s", detail)

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
_waiting: set[int] = set()  # threads whose request a worker has, its answer not yet read
_waiting_changed = threading.Condition()
_busy: dict[int, _Worker] = {}  # thread ident -> the worker its call is on (Beside.cancel stops it)
_cancelled: set[int] = set()  # threads whose calls are refused (a cancelled Beside)


class Beside:
    """`fn()` in a thread of its own, for work that is mostly a wait on isolated workers (verification's
    onnxruntime runs), so that the caller can do its own work meanwhile on a second core. `in_worker()` returns
    once the thread waits on a worker or has finished: the caller's Python then does not compete for the GIL with
    the thread's own Python before its call (a verification's region analysis), which would only delay the
    worker's start. `result()` waits for the thread: fn's value, or what it raised."""

    def __init__(self, fn: Callable[[], Any]):
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = False
        # a daemon: an interrupted caller does not wait for the worker's answer at exit (the worker is killed then)
        self._thread = threading.Thread(target=self._run, args=(fn,), name="onnx-surgery-beside", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # handed to result()'s caller
            self._error = exc
        finally:
            with _lock:
                _cancelled.discard(threading.get_ident())
            with _waiting_changed:
                self._done = True
                _waiting_changed.notify_all()

    def in_worker(self, timeout: float | None = None) -> None:
        with _waiting_changed:
            _waiting_changed.wait_for(lambda: self._done or self._thread.ident in _waiting, timeout)

    def cancel(self) -> None:
        """Stop the work and wait for its thread: the worker it waits on is killed (the call raises BackendCrash
        there) and any later call of that thread is refused. What a caller interrupted (Ctrl-C) does, instead of
        waiting minutes for an answer nobody reads."""
        ident = self._thread.ident
        with _lock:
            _cancelled.add(ident)
            worker = _busy.get(ident)
        if worker is not None:  # a signal, not kill(): the thread itself reads the pipe's end and closes it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.proc.pid, signal.SIGKILL)
        self._thread.join()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _take(env: dict | None, nice: int = 0, module: str = "") -> _Worker:
    """An idle worker of this environment and priority, preferring one prewarmed with `module` (two prewarmed
    workers, one per backend, each go to their own backend's call); else a new one."""
    key = _pool_key(env, nice)
    while True:
        with _lock:
            mine = [w for w in _idle if w.env_key == key]
            if not mine:
                return _Worker(env, nice)
            w = max(mine, key=lambda w: module in w.warm)  # the first of the best: max keeps the earliest
            _idle.remove(w)
        if w.alive():
            return w
        w.kill()  # died idle (a prewarm that crashed, say): the call gets a new worker and meets any crash itself


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


def prewarm(modules: tuple[str, ...] | list[str], env: dict | None = None, nice: int = 0) -> bool:
    """Start a worker now that imports `modules` (a backend and our module that calls it) while this process goes
    on: the next `call_isolated` with the same `env` and `nice` takes it, its interpreter started and its imports
    done. A CLI check calls this before it reads the model, so on two cores the worker's start (OpenVINO: ~0.6 s)
    overlaps the model's loading. Does nothing (False) when such a worker is idle already. An import that fails or
    crashes is no error here: the call imports again and meets it. A worker no call takes is stopped at exit. Never forks this process
    (forking one that holds onnxruntime's or OpenBLAS's threads is unsafe: microsoft/onnxruntime#31961)."""
    key = _pool_key(env, nice)
    with _lock:
        if any(w.env_key == key and w.alive() for w in _idle):
            return False
    _park(_Worker(env, nice, tuple(modules)))
    return True


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
    me = threading.get_ident()
    if me in _cancelled:
        raise BackendCrash("cancelled")
    worker = _Worker(env, nice) if fresh else _take(env, nice, func_path.partition(":")[0])
    with _lock:
        _busy[me] = worker
        cancelled = me in _cancelled  # cancelled while the worker started: its signal found no worker to stop
    try:
        if cancelled:
            raise BackendCrash("cancelled")
        result = worker.call(func_path, args, kwargs, timeout, progress)
    except BackendCrash:
        if worker.alive() and not fresh and not cancelled:
            _give_back(worker)  # a Python exception leaves the worker healthy
        else:
            worker.kill()
        raise
    except BaseException:  # KeyboardInterrupt, unpicklable arguments: do not leave a half-read pipe around
        worker.kill()
        raise
    finally:
        with _lock:
            _busy.pop(me, None)
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


def already_imported(*names: str) -> list[bool]:
    """Which of `names` the worker had imported before this call (the tests prove a prewarmed worker did its
    imports ahead of the call)."""
    return [n in sys.modules for n in names]
