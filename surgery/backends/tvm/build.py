"""TVM build: the Relax ONNX frontend, `tvm.compile` for this machine's CPU (an llvm target whose `mcpu` is
LLVM's own host CPU detection, `tvm.target.codegen.llvm_get_system_cpu`, e.g. znver4), run in the Relax VM;
the library (`export_library`, a .so) is the artifact.

With `tune_trials` > 0 the model is also tuned with MetaSchedule: its fused TIR functions (tasks) are searched
for schedules, measured on this CPU, and the best go into a JSON tuning database (`tune_dir`: beside the
TensorRT timing cache when one is given, else $ONNX_SURGERY_CACHE/tvm-tuning or ~/.cache/onnx-surgery/tvm-tuning).
A task the database already holds from a build with at least this trial budget is reused, not tuned again: a
second build of the same model on the same CPU runs no new trials. The report keeps the untuned latency next to the tuned one."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
from onnx import ModelProto

from surgery.backends.base import BuildOptions, BuildReport
from surgery.backends.measure import measure_into, opt_shapes, timing_progress
from surgery.isolate import report_progress
from surgery.model import with_weights
from surgery.text import error_line

DEFAULT_TUNE_DIR = "~/.cache/onnx-surgery/tvm-tuning"  # the root is $ONNX_SURGERY_CACHE where set
TUNED = "tuned.json"  # beside the database: task key -> the largest trial budget it was tuned with


def flat_outputs(value) -> list:
    if hasattr(value, "numpy"):
        return [value]
    return [x for v in value for x in flat_outputs(v)]


def host_target():
    """(target, how): llvm for this CPU. `mcpu` is LLVM's host CPU name as TVM reports it; `num-cores` (which
    MetaSchedule needs) is the CPUs this process may run on."""
    import tvm
    from tvm.target import codegen

    cpu = codegen.llvm_get_system_cpu()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    spec = {"kind": "llvm", "num-cores": cores}
    how = f"llvm -mcpu={cpu} (LLVM's host CPU detection), {cores} cores"
    if cpu and cpu != "generic":
        spec["mcpu"] = cpu
    else:
        how = f"llvm, generic CPU (LLVM detected no host CPU name: {cpu!r}), {cores} cores"
    return tvm.target.Target(spec), how


def tune_dir(options: BuildOptions) -> Path:
    if options.tune_dir:
        return Path(options.tune_dir).expanduser()
    if options.timing_cache:
        return Path(options.timing_cache).expanduser().resolve().parent / "tvm-tuning"
    if os.environ.get("ONNX_SURGERY_CACHE"):
        return Path(os.environ["ONNX_SURGERY_CACHE"]).expanduser() / "tvm-tuning"
    return Path(DEFAULT_TUNE_DIR).expanduser()


def _meta_schedule():
    try:
        from tvm.s_tir import meta_schedule as ms  # TVM 0.22+
    except ImportError:  # older TVM
        from tvm import meta_schedule as ms
    return ms


def _host_tensor_intrinsics() -> None:
    """MetaSchedule's TuneContext imports tvm.s_tir.tensor_intrin, which registers the tensor intrinsics of every
    target (CUDA's alone parse for about 20 s on the 2-core dev machine). Only this CPU's are needed (x86: VNNI,
    AVX-512, which the llvm rules use on a CPU that has them), so this (isolated, short-lived) worker imports the
    package's host module alone, under a stand-in package with the real folder."""
    import importlib
    import importlib.util
    import platform

    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return
    package = types.ModuleType(name)
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules[name] = package
    machine = platform.machine().lower()
    host = {"x86_64": "x86", "amd64": "x86", "aarch64": "arm_cpu", "arm64": "arm_cpu"}.get(machine)
    if machine.startswith("riscv"):
        host = "riscv_cpu"
    if host:
        importlib.import_module(f"{name}.{host}")


def _in_process(ms, tvm):
    """A builder and a runner that compile and time candidates in this worker: MetaSchedule's LocalBuilder and
    LocalRunner start a process pool per batch, and each of those processes imports the tensor intrinsics
    again (tens of seconds a batch here). The build is already isolated in its own process."""
    from tvm.driver import build as tir_build  # what MetaSchedule's default builder calls
    from tvm.ir.utils import derived_object
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    built: dict[str, object] = {}

    @derived_object
    class Builder(ms.builder.PyBuilder):
        def build(self, build_inputs):
            results = []
            for bi in build_inputs:
                try:
                    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(bi.mod)
                    key = f"in-process:{len(built)}"
                    built[key] = tir_build(mod, target=bi.target)
                    results.append(ms.builder.BuilderResult(key, None))
                except Exception as exc:  # a candidate that does not compile is a failed trial
                    results.append(ms.builder.BuilderResult(None, error_line(exc, 400)))
            return results

    @derived_object
    class Future(ms.runner.PyRunnerFuture):
        def __init__(self, result):
            super().__init__()
            self._result = result

        def done(self):
            return True

        def result(self):
            return self._result

    @derived_object
    class Runner(ms.runner.PyRunner):
        def run(self, runner_inputs):
            futures = []
            rng = np.random.default_rng(0)
            for ri in runner_inputs:
                try:
                    rt = built.pop(ri.artifact_path)
                    dev = tvm.cpu()
                    args = []
                    for info in (a.as_json() for a in ri.args_info):
                        _, dtype, shape = info
                        data = rng.standard_normal([int(d) for d in shape]).astype(str(dtype))
                        args.append(tvm.runtime.tensor(data, dev))
                    timer = rt.time_evaluator(rt.entry_name, dev, number=3, repeat=1, min_repeat_ms=20)
                    secs = list(timer(*args).results)
                    futures.append(Future(ms.runner.RunnerResult(secs, None)))
                except Exception as exc:  # a candidate that fails to run is a failed trial
                    futures.append(Future(ms.runner.RunnerResult(None, error_line(exc, 400))))
            return futures

    return Builder(), Runner()


def _progress_callback(ms, budget: int, names: list[str], count: list[int]):
    """A measure callback that reports each batch of trials (count: trials so far, failed ones)."""
    from tvm.ir.utils import derived_object

    @derived_object
    class Progress(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            count[0] += len(measure_candidates)
            count[1] += sum(1 for b, r in zip(builder_results, runner_results) if b.error_msg or r.error_msg)
            n = min(count[0], budget)
            report_progress(
                0.3 + 0.4 * n / max(budget, 1),
                f"tvm: tuning, {n}/{budget} trials (task {task_id + 1}/{len(names)} {names[task_id]})",
            )

    return Progress()


def _task_key(task, target) -> str:
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(task.dispatched[0])}|{target}"


def _tune(tvm, relax, mod, target, options: BuildOptions, log: list[str]):
    """Tune `mod` (Relax with fused TIR) into the database at tune_dir; returns the database and the stats."""
    ms = _meta_schedule()
    folder = tune_dir(options)
    folder.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(
        path_workload=str(folder / "database_workload.json"),
        path_tuning_record=str(folder / "database_tuning_record.json"),
    )
    tuned_file = folder / TUNED
    tuned = json.loads(tuned_file.read_text()) if tuned_file.exists() else {}
    tasks = ms.relax_integration.extract_tasks(mod, target)
    budget = int(options.tune_trials)
    todo = [t for t in tasks if tuned.get(_task_key(t, target), 0) < budget]
    stats = {
        "trials_budget": budget,
        "trials_run": 0,
        "trials_failed": 0,
        "tasks": len(tasks),
        "tasks_reused": len(tasks) - len(todo),
        "database": str(folder),
        "cost_model": "",
        "seconds": 0.0,
    }
    t0 = time.perf_counter()
    if todo:
        _host_tensor_intrinsics()
        try:
            import xgboost  # noqa: F401  (MetaSchedule's default cost model)

            cost_model = "xgb"
        except ImportError:
            cost_model = "random"
        stats["cost_model"] = cost_model
        names = [t.task_name for t in todo]
        report_progress(0.3, f"tvm: tuning {len(todo)} task(s), {budget} trials (MetaSchedule)")
        cores = int(target.attrs["num-cores"])
        with tempfile.TemporaryDirectory(prefix="onnx-surgery-tvm-tune-") as work:
            per_iter = min(64, max(budget // len(todo), 2))
            # TVM's evolutionary search with its population scaled down to small budgets (its default, 512
            # candidates replayed and mutated per round, is most of the time of a budget of a few trials)
            population = min(512, max(32, 16 * per_iter))
            strategy = ms.search_strategy.EvolutionarySearch(
                population_size=population, init_min_unmeasured=min(50, population // 4)
            )
            contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
                todo, work, strategy=strategy, num_threads=cores, seed=0
            )
            builder, runner = _in_process(ms, tvm)
            count = [0, 0]
            # the default callbacks less RemoveBuildArtifact: candidates are built in memory, not to files
            callbacks = [
                ms.measure_callback.AddToDatabase(),
                ms.measure_callback.UpdateCostModel(),
                _progress_callback(ms, budget, names, count),
            ]
            ms.tune.tune_tasks(
                tasks=contexts,
                task_weights=weights,
                work_dir=work,
                max_trials_global=budget,
                num_trials_per_iter=per_iter,
                builder=builder,
                runner=runner,
                database=db,
                cost_model=ms.cost_model.CostModel.create(cost_model),
                measure_callbacks=callbacks,
            )
            stats["trials_run"], stats["trials_failed"] = count
        for t in todo:
            tuned[_task_key(t, target)] = max(budget, tuned.get(_task_key(t, target), 0))
        tmp = tuned_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(tuned, indent=1, sort_keys=True))
        os.replace(tmp, tuned_file)
    stats["seconds"] = time.perf_counter() - t0
    log.append(
        f"MetaSchedule: {len(tasks)} task(s), {stats['tasks_reused']} reused from {folder}, "
        f"{stats['trials_run']} new trial(s) of a budget of {budget} ({stats['trials_failed']} failed)"
        + (f" (cost model {stats['cost_model']})" if stats["cost_model"] else "")
        + f", {stats['seconds']:.1f} s"
    )
    return db, stats


def _fused(tvm, relax, mod, target):
    """The Relax module as MetaSchedule sees it: ops legalized to TIR and fused (as relax.pipeline does)."""
    t = relax.transform
    with target:
        return tvm.transform.Sequential(
            [
                t.DecomposeOpsForInference(),
                t.LegalizeOps(),
                t.AnnotateTIROpPattern(),
                t.FoldConstant(),
                t.FuseOps(),
                t.FuseTIR(),
            ]
        )(mod)


def compile_untuned(mod) -> tuple[str | None, str]:
    """In the isolated process: compile an imported Relax module for this CPU as `build` does untuned (a check at
    depth build). (None, label) when it compiles, else (the compiler's words as build gives them, label)."""
    import tvm

    target, how = host_target()
    label = f"TVM {tvm.__version__} (Relax, {how.split(' (')[0]})"
    try:
        tvm.compile(mod, target=target)
    except Exception as exc:  # the compiler's refusal is the verdict
        return error_line(exc, 500), label
    return None, label


def build(data: bytes, options: BuildOptions, base_dir=None) -> BuildReport:
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = ModelProto()
    model.ParseFromString(data)
    target, how = host_target()
    label = f"TVM {tvm.__version__} (Relax, {how.split(' (')[0]})"
    if options.precision != "fp32":
        return BuildReport(
            "tvm",
            False,
            error=f"precision {options.precision} is not offered for TVM here. Note: available: fp32",
            label=label,
        )
    tuning = options.tune_trials > 0
    notes: list[str] = []
    # MetaSchedule tunes static shapes: a dynamic model is tuned at its profile's opt shape
    shape_dict = opt_shapes(options) if tuning and options.profiles else None
    report_progress(0.1, "tvm: importing with the Relax ONNX frontend")
    t = time.perf_counter()
    log = [f"{label}; target {target} ({how})"]
    try:
        mod = from_onnx(
            with_weights(model, base_dir), shape_dict={k: list(v) for k, v in (shape_dict or {}).items()}
        )
        report_progress(0.2, f"tvm: compiling for {how.split(' (')[0]}")
        ex = tvm.compile(mod, target=target)  # as compile_untuned, which a check at depth build runs
    except Exception as exc:  # the frontend's or compiler's refusal
        return BuildReport(
            "tvm",
            False,
            error=error_line(exc, 500),
            log=str(exc)[-4000:],
            build_seconds=time.perf_counter() - t,
            label=label,
        )
    seconds = time.perf_counter() - t
    stats = None
    if tuning:
        try:
            fused = _fused(tvm, relax, mod, target)
            db, stats = _tune(tvm, relax, fused, target, options, log)
            report_progress(0.75, "tvm: compiling with the tuned schedules")
            with target, db, tvm.transform.PassContext(opt_level=3):
                applied = relax.transform.MetaScheduleApplyDatabase()(fused)
            tuned_ex = tvm.compile(applied, target=target)
        except Exception as exc:  # the untuned build stands; tuning's failure is said
            notes.append(f"tuning failed, the untuned build is reported: {error_line(exc, 300)}")
            log.append(str(exc)[-2000:])
            stats = None
        seconds = time.perf_counter() - t
    artifact = Path(options.out_dir) / "model.tvm.so" if options.artifact else None
    final = tuned_ex if stats else ex
    if artifact is not None:
        final.export_library(str(artifact))
        log.append(
            f"library {artifact.name}, {artifact.stat().st_size} bytes" + (" (tuned)" if stats else "")
        )
    if shape_dict and stats:
        notes.append(
            "tuned at the profile's opt shape (MetaSchedule tunes static shapes): min and max are not measured"
        )
    report = BuildReport(
        "tvm",
        True,
        log="\n".join(log),
        build_seconds=seconds,
        artifact=str(artifact) if artifact else None,
        label=label,
        note="; ".join(notes),
    )
    inits = {i.name for i in model.graph.initializer}
    order = [i.name for i in model.graph.input if i.name not in inits]
    names = [o.name for o in model.graph.output]

    def preparer(executable):
        vm = relax.VirtualMachine(executable, tvm.cpu())

        def prepare(feeds):
            args = [tvm.runtime.tensor(feeds[n]) for n in order]
            return lambda: {n: np.asarray(v.numpy()) for n, v in zip(names, flat_outputs(vm["main"](*args)))}

        return prepare

    report_progress(0.8, "tvm: timing")
    if shape_dict and stats:  # both libraries were compiled for the opt shape only
        options.profiles = {n: (tuple(opt), tuple(opt), tuple(opt)) for n, opt in shape_dict.items()}
    if stats is not None:
        untuned = BuildReport("tvm", True)
        measure_into(
            untuned, model, base_dir, options, preparer(ex), timing_progress("tvm (untuned)", 0.8, 0.89)
        )
        stats["untuned_ms"] = untuned.latency_ms
        if untuned.latency_points:
            stats["untuned_points"] = untuned.latency_points
        report.tuning = stats
    measure_into(
        report, model, base_dir, options, preparer(final), timing_progress("tvm", 0.89 if stats else 0.8)
    )
    if shape_dict and stats:
        report.latency_points = None
        stats.pop("untuned_points", None)
    return report
