"""Where a survey's cells run: on this machine with N threads, each driving its own child ("local"), or as Ray
tasks ("ray": a local Ray runtime, or a cluster joined by its address; the same cell function, retried where a
Ray worker dies)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed

from surgery.usecases.survey.cells import isolated_cell
from surgery.usecases.survey.request import Job, SurveyInputError, SurveyRequest

# -- engines ---------------------------------------------------------------------------------------------------


def run_local(
    jobs: list[Job], args_of, request: SurveyRequest, done: Callable, stop: threading.Event
) -> None:
    """N threads, each driving its own child process (surgery.isolate keeps one per thread)."""
    pool = ThreadPoolExecutor(max_workers=max(1, request.workers), thread_name_prefix="survey")
    futures = {pool.submit(isolated_cell, request.cell, args_of(j), request.timeout): j for j in jobs}
    try:
        for fut in as_completed(futures):
            done(futures[fut], fut.result())
    except (
        BaseException
    ):  # interrupted: the cells not started are dropped, those running end with their limit
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def run_on_ray(
    jobs: list[Job], args_of, request: SurveyRequest, done: Callable, stop: threading.Event
) -> None:
    try:
        import ray
    except ImportError:
        raise SurveyInputError("--ray: Ray is not installed (pip install 'onnx-surgery[ray]')") from None
    started = False
    if not ray.is_initialized():
        if request.ray_address:
            ray.init(address=request.ray_address, log_to_driver=False)
        else:
            ray.init(num_cpus=max(1, request.workers), include_dashboard=False, log_to_driver=False)
        started = True
    try:
        # a Ray worker that dies is retried (max_retries); one that leaks is replaced now and then (max_calls)
        task = ray.remote(num_cpus=1, max_retries=2, max_calls=100)(isolated_cell)
        pending = {task.remote(request.cell, args_of(j), request.timeout): j for j in jobs}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ready[0])
            try:
                out = ray.get(ready[0])
            except (
                Exception
            ) as exc:  # the task failed past its retries: that cell is an error, the rest go on
                line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                out = {"facts": None, "cell": {"outcome": "error", "error": f"Ray task failed: {line}"}}
            done(job, out)
    finally:
        if started:
            ray.shutdown()
