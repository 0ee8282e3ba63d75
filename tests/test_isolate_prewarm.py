"""A worker started ahead (surgery.isolate.prewarm): it imports what the coming call needs while this process
goes on, the next call with the same environment takes it, an unused one leaves nothing behind, and `check`
starts it before it reads the model."""

from __future__ import annotations

import contextlib
import os
import time

import surgery.isolate as isolate
from surgery.isolate import call_isolated, prewarm, shutdown


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
    with contextlib.suppress(SystemExit):
        main(["check", str(tmp_path / "m.onnx"), "-t", "openvino", "-t", "onnxruntime", "-t", "tvm"])
    assert order[0][0] == "prewarm" and order[1] == ("load",)
    assert "openvino" in order[0][1] and "tvm" in order[0][1]  # one worker for both isolated targets
