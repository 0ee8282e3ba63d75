"""isolate.prewarm: a worker started ahead of its call, importing what the call will (a CLI check starts its
backend's worker before reading the model). Its call finds the imports done; an unused one leaves no process and
no folder behind; a prewarm that hangs, raises or crashes changes nothing but where the call's own failure shows."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import textwrap
import time

import pytest

from surgery import isolate
from surgery.isolate import BackendCrash, call_isolated, prewarm, shutdown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _empty_pool():
    isolate.shutdown()
    yield
    isolate.shutdown()


def _idle_pids() -> list[int]:
    return [w.proc.pid for w in isolate._idle]


def test_the_call_runs_in_the_prewarmed_worker_with_its_imports_done():
    assert prewarm(["xml.dom.minidom"])
    (pid,) = _idle_pids()
    assert call_isolated("os:getpid") == pid
    # a module the worker's own code never imports: there because the prewarm imported it before the call
    assert call_isolated("surgery.isolate:already_imported", "xml.dom.minidom") == [True]
    assert call_isolated("surgery.isolate:already_imported", "xml.sax") == [False]


def test_an_unused_prewarmed_worker_is_gone_when_the_process_exits(tmp_path):
    script = textwrap.dedent(
        """
        from surgery import isolate
        isolate.prewarm(["xml.dom.minidom"])
        w = isolate._idle[0]
        print(w.proc.pid, w.tmp.name, flush=True)
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    pid, folder = out.stdout.split()
    assert not os.path.exists(folder)  # its temporary folder removed
    # killed and reaped by its parent at exit: no process (not even a zombie) under that id
    assert not os.path.exists(f"/proc/{pid}") or _not_our_worker(int(pid))


def _not_our_worker(pid: int) -> bool:
    """The id was reused by an unrelated process (rare): not a worker of ours."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"read_exact" not in f.read()
    except OSError:
        return True


def _module(tmp_path, monkeypatch, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(
        str(tmp_path)
    )  # found by prewarm's check here and by the worker (its PYTHONPATH)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_a_call_times_out_while_its_prewarmed_worker_still_imports(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "hangs_on_import", "import time\ntime.sleep(600)\n")
    assert prewarm(["hangs_on_import"])
    # a request larger than a pipe's buffer: the worker, still importing, does not read it; the limit holds anyway
    with pytest.raises(BackendCrash, match="timed out after 1 s"):
        call_isolated("operator:not_", b"x" * (8 << 20), timeout=1)
    assert call_isolated("operator:add", 2, 3) == 5


def test_a_prewarm_that_raises_is_reported_by_the_call_that_imports_it(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "raises_on_import", "raise RuntimeError('no device here')\n")
    assert prewarm(["raises_on_import"])
    with pytest.raises(BackendCrash, match="RuntimeError: no device here"):
        call_isolated("raises_on_import:anything")
    assert call_isolated("operator:add", 2, 3) == 5  # the worker itself was healthy


def test_a_prewarm_that_crashes_is_no_error_until_and_unless_the_call_meets_it(tmp_path, monkeypatch):
    _module(
        tmp_path,
        monkeypatch,
        "crashes_on_import",
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    )
    assert prewarm(["crashes_on_import"])
    (worker,) = isolate._idle
    worker.proc.wait(timeout=60)
    assert call_isolated("operator:add", 2, 3) == 5  # the dead prewarmed worker is replaced, silently
    shutdown()  # prewarm starts nothing while a worker is idle
    assert prewarm(["crashes_on_import"])
    isolate._idle[-1].proc.wait(timeout=60)
    with pytest.raises(BackendCrash, match="SIGSEGV"):  # the call that imports it meets the crash itself
        call_isolated("crashes_on_import:anything")


def _tiny(tmp_path) -> str:
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    path = tmp_path / "m.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _watch(monkeypatch) -> list:
    """What the check did, in order: ("load", the idle workers' prewarmed modules) when it reads the model, ("call",
    the worker's prewarmed modules) at each isolated call."""
    from surgery.cli import check_cmd

    events, real_load, real_call = [], check_cmd.load, isolate._Worker.call

    def load(args):
        events.append(("load", [set(w.warm) for w in isolate._idle]))
        return real_load(args)

    def call(self, *args, **kwargs):
        events.append(("call", set(self.warm)))
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(check_cmd, "load", load)
    monkeypatch.setattr(isolate._Worker, "call", call)
    return events


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="openvino not installed")
def test_check_starts_openvinos_worker_before_reading_the_model_and_checks_in_it(
    tmp_path, monkeypatch, capsys
):
    from surgery.cli import main

    events = _watch(monkeypatch)
    assert main(["check", _tiny(tmp_path), "-t", "openvino", "--no-cache"]) == 0
    warm = {"openvino", "surgery.backends.openvino.convert", "surgery.backends.openvino.build"}
    assert events[0] == ("load", [warm])  # started (and importing) before the model is read
    assert events[1:] == [("call", warm)]  # the check's one call ran in it
    assert "accepts" in capsys.readouterr().out


def test_openvinos_worker_modules_import_neither_onnx_nor_numpy():
    """What a check's OpenVINO worker imports before its call is on the check's critical path: onnx with numpy
    (~0.1 s) there made the worker, not the parent, the last to be ready on small models."""
    from surgery.backends import WORKER_IMPORTS

    ours = [m for m in WORKER_IMPORTS["openvino"] if m.startswith("surgery.")]
    code = f"import sys\nfor m in {ours!r}:\n    __import__(m)\nprint(sorted(set(sys.modules) & {{'onnx', 'numpy'}}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert ours and out.stdout.strip() == "[]", out.stdout


def test_check_starts_no_worker_for_an_in_process_target_or_a_model_it_cannot_read(
    tmp_path, monkeypatch, capsys
):
    from surgery.cli import main

    events = _watch(monkeypatch)
    assert main(["check", _tiny(tmp_path), "-t", "onnxruntime", "--no-cache"]) == 0
    assert events == [("load", [])]
    assert main(["check", str(tmp_path / "missing.onnx"), "-t", "openvino"]) == 2
    assert _idle_pids() == []
    capsys.readouterr()


def _probe_module(tmp_path) -> dict:
    (tmp_path / "probe_mod.py").write_text(
        "import os, time\nLOADED_AT = time.time()\n\ndef loaded_at():\n    return LOADED_AT, os.getpid()\n"
    )
    return {"PYTHONPATH": str(tmp_path)}


def test_the_next_call_finds_its_module_imported_in_the_prewarmed_worker(tmp_path):
    env = _probe_module(tmp_path)
    shutdown()
    prewarm(["probe_mod"], env=env)
    (worker,) = [w for w in isolate._idle if w.env_key == isolate._pool_key(env, 0)]
    time.sleep(1.0)  # the worker imports while this process does something else
    asked = time.time()
    loaded, pid = call_isolated("probe_mod:loaded_at", env=env)
    assert pid == worker.proc.pid  # the prewarmed worker answered, no new one
    assert loaded < asked  # imported before the call was made
    shutdown()


def test_a_preload_that_fails_is_no_error_until_the_call(tmp_path):
    shutdown()
    prewarm(["no_such_module_for_prewarm"])
    assert call_isolated("os:getpid") != os.getpid()
    shutdown()


def test_an_unused_prewarmed_worker_leaves_no_process_or_folder():
    shutdown()
    prewarm(["json"])
    (worker,) = list(isolate._idle)
    folder = worker.tmp.name
    shutdown()  # what atexit runs
    assert worker.proc.poll() is not None and not os.path.exists(folder)


def test_check_starts_the_worker_before_it_reads_the_model(tmp_path, monkeypatch):
    import surgery.cli.check_cmd as check_cmd
    from surgery.cli import main

    order = []
    monkeypatch.setattr(isolate, "prewarm", lambda modules, **_: order.append(("prewarm", tuple(modules))))

    def load(_args):
        order.append(("load",))
        raise SystemExit(2)

    monkeypatch.setattr(check_cmd, "load", load)
    (tmp_path / "m.onnx").write_bytes(b"")  # a file: a path that is none is refused with no worker started
    with contextlib.suppress(SystemExit):
        main(["check", str(tmp_path / "m.onnx"), "-t", "openvino", "-t", "onnxruntime", "-t", "tvm"])
    assert order[0][0] == "prewarm" and order[1] == ("load",)
    assert "openvino" in order[0][1] and "tvm" in order[0][1]  # one worker for both isolated targets
