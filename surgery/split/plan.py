"""A split plan as data: its parts (the target's and the fallback's), the tensors that cross between them, how it
was verified, and its files (plan.json beside one .onnx per part; `load` reads them back)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import ModelProto

from surgery.model import Model
from surgery.split.regions import TARGET

PLAN_FORMAT = "onnx-surgery-split-plan/1"
MAX_ROUNDS = 4
RTOL_OTHER_BACKEND = 1e-4
DEFAULT_MIN_NODES = 3  # TF-TRT's minimum_segment_size
FALLBACKS = ("onnxruntime", "openvino", "tvm")


class SplitError(Exception):
    """The model cannot be split as asked; the message names the node or tensor and what would work."""


@dataclass
class Tensor:
    """A tensor at a boundary: a graph input or a tensor passed from one part to another."""

    name: str
    dtype: str
    shape: list | None
    bytes: int | None  # from the inferred shape; None where a dim is dynamic
    source: int | None  # index of the part that produces it; None for a graph input
    targets: list[int] = field(default_factory=list)  # parts that read it
    measured_bytes: int | None = None  # its size in the verification run
    measured_shape: list[int] | None = None  # its shape in the verification run

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Part:
    index: int
    role: str  # "target" | "fallback"
    backend: str  # the backend meant to run it
    file: str
    nodes: list[str]  # node keys in the original model
    inputs: list[str]
    outputs: list[str]
    folded: list[str] = field(default_factory=list)  # constants stored by value in this part
    check: dict = field(default_factory=dict)  # its backend's verdict on this part alone
    # how far a target part was taken alone: {"depth": "build", "ok", "builder", "words", "profiles"} where its
    # builder runs here, else {"depth": "parse", "why"} (no builder here, or the plan was not verified)
    build: dict = field(default_factory=dict)
    model: ModelProto | None = field(default=None, repr=False, compare=False)

    @property
    def accepted(self) -> bool:
        """Accepted by its backend alone, and built where a build was tried."""
        return self.check.get("outcome") == "accepts" and self.build.get("ok", True)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("model")
        return d


@dataclass
class Verification:
    status: str  # "reproduces" | "differs" | "failed" (a part did not run) | "not verified"
    seed: int = 0
    feeds: dict = field(default_factory=dict)  # input -> shape it ran with
    ran_on: list[str] = field(default_factory=list)  # per part, the backend that computed it
    notes: list[str] = field(default_factory=list)
    outputs: list[dict] = field(default_factory=list)  # name, dtype, shape, max_abs, mean_rel, ok
    first_difference: dict | None = None  # tensor, part, max_abs, mean_rel
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "reproduces"

    def summary(self) -> str:
        if self.status in ("not verified", "failed"):
            return f"{self.status}: {self.message}"
        per = "; ".join(
            f"{o['name']}: max abs {_num(o['max_abs'])}, mean rel {_num(o['mean_rel'])}" for o in self.outputs
        )
        text = f"{self.status} (seed {self.seed}): {per}"
        if self.first_difference:
            d = self.first_difference
            text += (
                f" — first tensor that differs: '{d['tensor']}' from part {d['part']} "
                f"(max abs {_num(d['max_abs'])}, mean rel {_num(d['mean_rel'])})"
            )
        return text

    def to_dict(self) -> dict:
        return asdict(self)


def _num(x) -> str:
    return f"{x:.3g}" if isinstance(x, int | float) else str(x)


@dataclass
class Plan:
    source: str
    target: str
    target_label: str
    fallback: str
    min_nodes: int
    parts: list[Part]
    inputs: list[Tensor]  # the original's graph inputs
    outputs: list[str]  # the original's graph outputs, in order
    crossings: list[Tensor]  # tensors passed from one part to another
    nodes: int  # nodes in the original's main graph
    compute_nodes: int  # nodes that are not constants
    rounds: int = 1  # times the plan was made (a target part refused alone sends nodes back)
    notes: list[str] = field(default_factory=list)
    verification: Verification | None = None
    seconds: float = 0.0
    base_dir: Path | None = field(default=None, repr=False, compare=False)
    # the original as loaded, when its large weights stay in its file (Model.own_file): the parts refer to them
    original: Model | None = field(default=None, repr=False, compare=False)
    _runners: dict = field(default_factory=dict, repr=False, compare=False)

    # -- figures ---------------------------------------------------------------------------------------------
    @property
    def target_parts(self) -> list[Part]:
        return [p for p in self.parts if p.role == TARGET]

    @property
    def on_target(self) -> int:
        return sum(len(p.nodes) for p in self.target_parts)

    @property
    def crossing_bytes(self) -> int | None:
        sizes = [c.bytes for c in self.crossings]
        return None if any(b is None for b in sizes) else sum(sizes)

    @property
    def measured_crossing_bytes(self) -> int | None:
        sizes = [c.measured_bytes for c in self.crossings]
        return None if not sizes or any(b is None for b in sizes) else sum(sizes)

    @property
    def accepted(self) -> bool:
        """Every target part is accepted by the target on its own."""
        return all(p.accepted for p in self.target_parts)

    @property
    def ok(self) -> bool:
        """What exit code 0 means: every target part accepted, and the chain reproduces the original."""
        return self.accepted and self.verification is not None and self.verification.ok

    def summary(self) -> str:
        nb = self.crossing_bytes
        measured = self.measured_crossing_bytes
        size = (
            f"{nb:,} bytes"
            if nb is not None
            else (
                f"{measured:,} bytes at the verification inputs" if measured is not None else "size unknown"
            )
        )
        share = self.on_target / max(self.compute_nodes, 1)
        return (
            f"{len(self.parts)} part(s) ({len(self.target_parts)} on {self.target}, "
            f"{len(self.parts) - len(self.target_parts)} on {self.fallback}); {self.on_target} of "
            f"{self.compute_nodes} compute node(s) on the target ({share:.0%}); {len(self.crossings)} crossing(s), "
            f"{size}"
        )

    def to_dict(self) -> dict:
        return {
            "format": PLAN_FORMAT,
            "source": self.source,
            "target": self.target,
            "target_label": self.target_label,
            "fallback": self.fallback,
            "min_nodes": self.min_nodes,
            "nodes": self.nodes,
            "compute_nodes": self.compute_nodes,
            "on_target": self.on_target,
            "crossing_count": len(self.crossings),
            "crossing_bytes": self.crossing_bytes,
            "measured_crossing_bytes": self.measured_crossing_bytes,
            "rounds": self.rounds,
            "ok": self.ok,
            "summary": self.summary(),
            "parts": [p.to_dict() for p in self.parts],
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": self.outputs,
            "crossings": [c.to_dict() for c in self.crossings],
            "verification": None if self.verification is None else self.verification.to_dict(),
            "notes": self.notes,
            "seconds": round(self.seconds, 3),
        }

    # -- files -----------------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write every part (external data beside a part when the original had any, or past 2 GiB) and
        plan.json into `directory`. Returns plan.json's path."""
        from surgery.model import has_external_data, save_model

        own = None if self.original is None else self.original.own_file
        if self.original is not None:
            self.original.check_unchanged()  # the parts' weights are read from its file
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for part in self.parts:
            # beside it when the original had external data, else only past 2 GiB
            external = has_external_data(part.model, besides=own) or None
            save_model(part.model, d / part.file, self.base_dir, external=external, own_file=own)
        from surgery.outputs import write_atomic

        return write_atomic(d / "plan.json", self.to_json())

    def to_json(self) -> str:
        """plan.json's text: strict JSON (non-finite numbers as strings), names that are not UTF-8 escaped."""
        from surgery.model import dumps

        return dumps(plain(self.to_dict()), indent=2, default=_json_default, allow_nan=False)

    def to_zip(self) -> bytes:
        """The parts and plan.json as a zip archive (what the app offers for download)."""
        import io
        import tempfile
        import zipfile

        buf = io.BytesIO()
        with tempfile.TemporaryDirectory(prefix="onnx-surgery-split-") as tmp:
            self.save(tmp)
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                for f in sorted(Path(tmp).iterdir()):
                    z.write(f, f.name)
        return buf.getvalue()


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def plain(value):
    """`value` with non-finite floats as the strings "inf" / "nan": plan.json is strict JSON."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float | np.floating) and not np.isfinite(value):
        return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def load(path: str | Path) -> Plan:
    """A plan written by Plan.save: `path` is its folder or its plan.json. Part models are read from beside it."""
    p = Path(path)
    if p.is_dir():
        p = p / "plan.json"
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise SplitError(f"{p}: not a readable plan ({exc})") from None
    if not isinstance(d, dict) or d.get("format") != PLAN_FORMAT:
        raise SplitError(f"{p}: not an onnx-surgery split plan (expected format {PLAN_FORMAT})")
    parts = []
    for raw in d["parts"]:
        part = Part(**{k: v for k, v in raw.items() if k in Part.__dataclass_fields__ and k != "model"})
        part.model = onnx.load(str(p.parent / part.file), load_external_data=False)
        parts.append(part)
    ver = d.get("verification")
    return Plan(
        source=d["source"],
        target=d["target"],
        target_label=d.get("target_label", d["target"]),
        fallback=d["fallback"],
        min_nodes=d["min_nodes"],
        parts=parts,
        inputs=[Tensor(**t) for t in d["inputs"]],
        outputs=d["outputs"],
        crossings=[Tensor(**t) for t in d["crossings"]],
        nodes=d["nodes"],
        compute_nodes=d["compute_nodes"],
        rounds=d.get("rounds", 1),
        notes=d.get("notes", []),
        verification=None if ver is None else Verification(**ver),
        seconds=d.get("seconds", 0.0),
        base_dir=p.parent,
    )


def nbytes(dtype: int, shape) -> int | None:
    if not dtype or shape is None or any(not isinstance(d, int) for d in shape):
        return None
    try:
        item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(dtype)).itemsize
    except (KeyError, TypeError, ValueError):
        return None
    if dtype == onnx.TensorProto.STRING:
        return None
    return int(np.prod(shape, dtype=np.int64)) * item


def value_bytes(value) -> int | None:
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "OUS":
            return int(sum(len(str(x).encode()) for x in value.reshape(-1)))
        return int(value.nbytes)
    return None
