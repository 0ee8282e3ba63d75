"""The backend protocol: every target answers `availability()`, `check(model)` and `build(model, options)` with
the same small data types, so the CLI, the app and partitioning never special-case a backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from surgery.text import error_line, first_line, telling_line  # noqa: F401  (re-exported: older imports read them here)
from surgery.verdict import (  # noqa: F401  (the verdict words, re-exported: one home, surgery/verdict.py)
    CHECK_DID_NOT_FINISH,
    LIVE,
    SPEAKER,
    Evidence,
    Message,
    Outcome,
    Report,
    Stage,
    Status,
    Verdict,
    VerdictGroup,
    is_live,
    said_line,
    speaker,
    where_said,
)

if TYPE_CHECKING:  # annotations only: the registry (surgery.backends) imports this without onnx
    from onnx import ModelProto


def package_version(*dists: str) -> str:
    """The installed version of the first of `dists` that is installed, else ""."""
    from surgery.resources import installed_version

    return next(filter(None, map(installed_version, dists)), "")


def not_installed(module: str, extra: str, dist: str | None = None) -> Availability | None:
    """An unavailable Availability naming the pip extra when `module` cannot be imported, else None."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return Availability(False, f"{dist or module} not installed (pip install 'onnx-surgery[{extra}]')")
    return None


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: (
        str  # "tensorrt_rtx 1.7.1 (no GPU: checks and ahead-of-time builds only)", "openvino not installed"
    )


@dataclass
class BuildOptions:
    precision: str = "fp32"  # fp32 | fp16 | bf16 | int8
    profiles: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict
    )
    workspace_mb: int | None = None
    timing_cache: str | None = None
    timeout_s: float = 600.0
    runs: int = 20  # the most timed runs
    warmup: int = 3
    # timing stops at this many seconds (after at least MIN_TIMED_RUNS): a slow engine is timed in seconds, not
    # minutes (untuned TVM took 23 runs x 3.4 s); None: exactly `runs` runs, whatever they take
    time_budget_s: float | None = 5.0
    out_dir: str | None = None
    measure: bool = True  # run the engine for latency and accuracy where this machine can (check: no)
    # write the engine / blob / library (check: no, it asks whether the model builds; TVM's export_library alone
    # links a shared library with the system compiler, 2.3 s on ResNet-18)
    artifact: bool = True
    tune_trials: int = 0  # TVM: MetaSchedule trials (0: untuned); tuned tasks are reused from tune_dir
    tune_dir: str | None = None  # TVM tuning database (None: beside timing_cache, else ~/.cache/onnx-surgery)


@dataclass
class BuildReport:
    backend: str
    ok: bool
    error: str = ""  # the backend's own words
    node: str | None = None  # node named by the failure, when one is
    log: str = ""
    build_seconds: float = 0.0
    artifact: str | None = None  # path of the engine / blob / library / optimized model
    latency_ms: dict[str, float] | None = None  # {"median": ..., "p90": ...}
    accuracy: dict[str, dict[str, float]] | None = None  # output -> {"max_abs": ..., "mean_rel": ...}
    note: str = ""  # e.g. "engine built ahead of time; running it needs a GPU"
    label: str = ""  # the builder that ran, e.g. "TensorRT-RTX 1.7.1.116", "OpenVINO 2026.4.1"
    precision: str = ""  # what the engine computes in: fp32 | fp16 | bf16 | int8 (a Q/DQ model is int8)
    # with profiles: latency at each profile point, {"min": {"shapes": {...}, "median", "p90", "runs",
    # "worst_mean_rel"} or {"shapes": ..., "error": ...}, "opt": ..., "max": ...}
    latency_points: dict[str, dict[str, Any]] | None = None
    # TVM with tune_trials: {"untuned_ms": {...}, "trials_run", "trials_budget", "tasks", "tasks_reused",
    # "database", "cost_model", "seconds"}
    tuning: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Progress = Callable[[float, str], None]  # fraction 0..1, message


class Backend(Protocol):
    id: str
    label: str
    version: str
    default_depth: Stage  # how far `check` goes unless told: parse, or build where building is the check
    builds_in_check: (
        bool  # whether `check --depth build` builds through surgery.backends.build (else check does it)
    )
    # whether its check reads every weight into the calling process (onnxruntime's session creation): a server
    # runs such checks in a worker process (diagnose.check_one(in_worker=True))
    reads_weights: bool
    # optional: True where `check` takes `path=`, the file the model was read from unedited, and reads it there
    # (as the backend's own call would) instead of a serialization of the model (diagnose.check_one(path=...))
    # reads_file: bool

    def availability(self) -> Availability: ...

    def check(self, model: ModelProto, base_dir: str | None = None, depth: Stage = Stage.PARSE) -> Report: ...

    def build(
        self,
        model: ModelProto,
        options: BuildOptions,
        progress: Progress | None = None,
        base_dir: str | None = None,
    ) -> BuildReport: ...
