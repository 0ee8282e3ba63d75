"""The backend protocol: every target answers `availability()`, `check(model)` and `build(model, options)` with
the same small data types, so the CLI, the app and partitioning never special-case a backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from onnx import ModelProto


def package_version(*dists: str) -> str:
    """The installed version of the first of `dists` that is installed, else ""."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in dists:
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return ""


def not_installed(module: str, extra: str, dist: str | None = None) -> Availability | None:
    """An unavailable Availability naming the pip extra when `module` cannot be imported, else None."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return Availability(False, f"{dist or module} not installed (pip install 'onnx-surgery[{extra}]')")
    return None


class Status(StrEnum):
    SUPPORTED = "supported"
    REJECTED = "rejected"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: (
        str  # "tensorrt_rtx 1.7.1 (no GPU: checks and ahead-of-time builds only)", "openvino not installed"
    )


@dataclass(frozen=True)
class Evidence:
    source: str  # "live parser" | "probe" | "support table" | "whole model" | "crash"
    detail: str = ""  # "TensorRT-RTX 1.7.1.116 ONNX parser", "onnx-tensorrt docs/operators.md @ 8.2-GA", ...


@dataclass
class Verdict:
    node: str  # node key (surgery.graph.node_keys)
    index: int  # index in graph.node, -1 when not tied to a node
    op_type: str
    status: Status
    message: str = ""  # the backend's own words
    code: str = ""  # backend's error code, e.g. UNSUPPORTED_NODE
    evidence: Evidence = field(default_factory=lambda: Evidence("unknown"))
    rules: tuple[str, ...] = ()  # ids of rules that usually fix this

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


@dataclass
class Report:
    backend: str  # id, e.g. "tensorrt-static@8.2"
    label: str
    version: str
    verdicts: list[Verdict] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # model-level messages (not tied to one node)
    accepted: bool | None = None  # whole-model outcome where the backend gave one
    seconds: float = 0.0
    backend_calls: int = 0

    @property
    def rejected(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status is Status.REJECTED]

    def by_node(self) -> dict[str, Verdict]:
        return {v.node: v for v in self.verdicts}

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "label": self.label,
            "version": self.version,
            "accepted": self.accepted,
            "seconds": round(self.seconds, 4),
            "backend_calls": self.backend_calls,
            "messages": self.messages,
            "verdicts": [v.to_dict() for v in self.verdicts],
        }


@dataclass
class BuildOptions:
    precision: str = "fp32"  # fp32 | fp16 | bf16 | int8
    profiles: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict
    )
    workspace_mb: int | None = None
    timing_cache: str | None = None
    timeout_s: float = 600.0
    runs: int = 20
    warmup: int = 3
    out_dir: str | None = None


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Progress = Callable[[float, str], None]  # fraction 0..1, message


class BuildsWithSurgeryBuild:
    """Mixin for backends whose builds live in surgery.build (one module per backend there)."""

    id: str

    def build(
        self,
        model: ModelProto,
        options: BuildOptions,
        progress: Progress | None = None,
        base_dir: str | None = None,
    ) -> BuildReport:
        from surgery.build import build_model

        return build_model(self.id, model, options, progress, base_dir)


class Backend(Protocol):
    id: str
    label: str
    version: str

    def availability(self) -> Availability: ...

    def check(self, model: ModelProto, base_dir: str | None = None) -> Report: ...

    def build(
        self,
        model: ModelProto,
        options: BuildOptions,
        progress: Progress | None = None,
        base_dir: str | None = None,
    ) -> BuildReport: ...
