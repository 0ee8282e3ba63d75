"""isolate.Beside: work that is mostly a wait on a worker runs in a thread of its own, and its caller learns when
that thread is in the worker (its own Python before the call done), so that the caller's work then overlaps the
worker's and not the thread's analysis. The worker pipes are wide: a serialized model crosses them in a few
pieces, not thousands (each piece waits for the GIL while another thread runs Python)."""

from __future__ import annotations

import fcntl
import threading
import time

import pytest

from surgery import isolate
from surgery.isolate import Beside, call_isolated


@pytest.fixture(autouse=True)
def _empty_pool():
    isolate.shutdown()
    yield
    isolate.shutdown()


def test_in_worker_returns_once_the_thread_waits_on_its_worker_and_result_waits_for_the_answer():
    before_call = threading.Event()

    def work():
        before_call.set()
        return call_isolated("time:sleep", 1.5) is None, call_isolated("os:getpid")

    pending = Beside(work)
    pending.in_worker(timeout=60)
    started = time.monotonic()
    assert before_call.is_set()
    assert pending._thread.is_alive()  # in the worker's sleep, not finished
    (slept, pid) = pending.result()
    assert slept and pid > 0
    assert time.monotonic() - started > 0.5  # result() waited for the sleep to end


def test_in_worker_returns_for_work_that_never_calls_a_worker_and_result_raises_its_error():
    def fails():
        time.sleep(0.2)
        raise ValueError("broken")

    pending = Beside(fails)
    pending.in_worker(timeout=60)
    assert not pending._thread.is_alive()
    with pytest.raises(ValueError, match="broken"):
        pending.result()


def test_a_failed_call_in_the_worker_is_raised_by_result():
    pending = Beside(lambda: call_isolated("json:loads", "{not json"))
    pending.in_worker(timeout=60)
    with pytest.raises(isolate.BackendCrash):
        pending.result()


def test_the_worker_pipes_hold_a_mebibyte():
    worker = isolate._take(None)
    try:
        for pipe in (worker.proc.stdin, worker.proc.stdout):
            assert fcntl.fcntl(pipe.fileno(), fcntl.F_GETPIPE_SZ) >= isolate.PIPE_SIZE
    finally:
        worker.kill()


def test_cancel_stops_the_worker_the_thread_waits_on_and_refuses_its_later_calls():
    later = []

    def work():
        try:
            call_isolated("time:sleep", 60)
        except isolate.BackendCrash as exc:
            later.append(str(exc))
        try:
            call_isolated("os:getpid")
        except isolate.BackendCrash as exc:
            later.append(str(exc))
        return "went on"

    pending = Beside(work)
    pending.in_worker(timeout=60)
    (worker,) = isolate._busy.values()
    started = time.monotonic()
    pending.cancel()
    assert time.monotonic() - started < 10  # not the sleep's 60 s
    assert worker.proc.poll() is not None  # the process is gone
    assert later[0].startswith("backend crashed: signal 9") and later[1] == "cancelled"
    assert pending.result() == "went on" and not isolate._busy and not isolate._cancelled
    assert call_isolated("os:getpid") > 0  # other threads' calls, this one's included, are not refused
