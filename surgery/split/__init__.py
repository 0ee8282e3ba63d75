"""Split a model for deployment, the TF-TRT / TVM BYOC way: the regions a target supports become parts it runs,
the rest becomes parts a general runtime runs (the fallback, onnxruntime by default), and the chain of parts
still computes the original function.

    plan = make_plan(load_model("m.onnx"), "tensorrt")       # parts, crossings, each part checked, verified
    plan.save("out/")                                         # out/part0_onnxruntime.onnx, ..., out/plan.json
    outputs = run(load("out/"), {"text": ...})                # the parts chained: a usable result

How nodes are placed (surgery.split.regions): a node the target supports goes to the target; a rejected node and
a node without a verdict (`unknown`, e.g. a TensorRT-RTX plugin gap that full TensorRT may fill: "cannot
confirm") go to the fallback — the safe choice, since nobody confirmed the target runs them. Constants are not
placed: each part gets the constants it reads (surgery.split.cut). Every target part is then checked alone by the
target; a node it refuses there goes to the fallback and the plan is made again (at most MAX_ROUNDS times).

Verification: the original (onnxruntime) and the chain (each part through its backend where this machine can run
it, else onnxruntime; see surgery.split.runners) on the same seeded inputs; max abs and mean relative error per
output (surgery.verify's definitions). The chain reproduces the original when every output is within the exact
thresholds of surgery.verify (fp32 mean relative 1e-6, integers and strings equal) when every part ran on
onnxruntime, or within RTOL_OTHER_BACKEND where another backend computed a part (its own arithmetic). When it
does not, the first crossing tensor (in execution order) that differs is named.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import ModelProto

from surgery.split.cut import CutError, cut, describe_tensor, type_text, typed
from surgery.split.regions import FALLBACK, TARGET, constant_nodes, group

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

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for part in self.parts:
            external = has_external_data(part.model) or None  # else beside it only past 2 GiB
            save_model(part.model, d / part.file, self.base_dir, external=external)
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


# -- running -------------------------------------------------------------------------------------------------


def run(plan: Plan | str | Path, inputs: dict, *, own_backends: bool = True) -> dict[str, np.ndarray]:
    """Run the parts of `plan` (a Plan, or the folder / plan.json Plan.save wrote) chained on `inputs` (graph
    input name -> array) and return the original's outputs by name. Each part runs through its own backend where
    this machine can run it (`own_backends`), else onnxruntime."""
    if not isinstance(plan, Plan):
        plan = load(plan)
    env, _ = _execute(plan, inputs, own_backends=own_backends)
    return {o: env[o] for o in plan.outputs}


def _execute(plan: Plan, inputs: dict, *, own_backends: bool = True) -> tuple[dict, list[tuple[str, str]]]:
    """Every tensor the chain computed, and per part (the backend that ran it, a note)."""
    from surgery.split.runners import make_runner

    missing = [t.name for t in plan.inputs if t.name not in inputs]
    if missing:
        raise ValueError(f"no value for input(s) {missing}")
    env = dict(inputs)
    ran = []
    for part in plan.parts:
        key = (part.index, own_backends)
        if key not in plan._runners:
            backend = part.backend if own_backends else "onnxruntime"
            try:
                plan._runners[key] = make_runner(backend, part.model, plan.base_dir)
            except Exception as exc:
                raise PartFailed(part, f"could not load: {_line(exc)}") from None
        runner, on, note = plan._runners[key]
        try:
            env.update(runner({k: env[k] for k in part.inputs}))
        except Exception as exc:
            raise PartFailed(part, f"failed on {on}: {_line(exc)}") from None
        ran.append((on, note))
    return env, ran


class PartFailed(Exception):
    def __init__(self, part: Part, message: str):
        super().__init__(f"part {part.index} ({part.file}) {message}")
        self.part = part


def _line(exc: BaseException) -> str:
    from surgery.text import error_line

    return error_line(exc)


# -- inputs ------------------------------------------------------------------------------------------------------


def _vocabulary(model: ModelProto) -> list[str]:
    """Strings the model's nodes list (LabelEncoder keys, TfIdf pools, CategoryMapper categories, stopwords...):
    seeded string inputs are drawn from them, plus one word none of them holds."""
    from surgery.graph import iter_subgraphs

    words: list[str] = []
    graphs = [model.graph, *(s.graph for s in iter_subgraphs(model.graph))]
    for g in graphs:
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.STRINGS:
                    words.extend(s.decode("utf-8", "replace") for s in a.strings)
    words = [w for w in dict.fromkeys(words) if w][:256]
    return [*(words or ["a", "b", "c"]), "onnx-surgery"]


def seeded_feeds(
    model: ModelProto, seed: int = 0, shapes: dict[str, list[int]] | None = None, default_dim: int = 2
) -> dict[str, np.ndarray]:
    """Deterministic inputs for every graph input: numbers as surgery.feeds.seeded_inputs makes them, strings drawn
    from the model's own vocabulary. `shapes` fixes an input's shape (name -> dims; '' for every input)."""
    from surgery.feeds import seeded_inputs
    from surgery.graph import tensor_info_from_type

    shapes = shapes or {}
    inits = {t.name for t in model.graph.initializer}
    numeric = ModelProto()
    strings = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        info = tensor_info_from_type(vi.name, vi.type)
        fixed = shapes.get(vi.name, shapes.get(""))
        copy = numeric.graph.input.add()
        copy.CopyFrom(vi)
        if fixed is not None:
            old = list(copy.type.tensor_type.shape.dim)
            del copy.type.tensor_type.shape.dim[:]
            for k, d in enumerate(fixed):
                dim = copy.type.tensor_type.shape.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                elif d is None and k < len(old):  # '?': the input's own dim there
                    dim.CopyFrom(old[k])
                else:  # a name, or '?' where the input has no dim: dynamic, seeded at default_dim
                    dim.dim_param = d or f"{vi.name}_dim{k}"
        if info.dtype == onnx.TensorProto.STRING:
            strings.append(copy)
            numeric.graph.input.pop()
    feeds = seeded_inputs(numeric, seed=seed, default_dim=default_dim)
    rng = np.random.default_rng(seed + 1)
    vocab = _vocabulary(model)
    for vi in strings:
        info = tensor_info_from_type(vi.name, vi.type)
        if info.shape is None:
            raise ValueError(f"input '{vi.name}' has no shape; give its shape to generate inputs")
        shape = [d if isinstance(d, int) else default_dim for d in info.shape]
        feeds[vi.name] = np.array(rng.choice(vocab, size=shape), dtype=object)
    order = [vi.name for vi in model.graph.input]
    return {k: feeds[k] for k in order if k in feeds}


# -- making a plan -----------------------------------------------------------------------------------------------


def _file_name(k: int, backend: str) -> str:
    return f"part{k}_{backend.replace('@', '-')}.onnx"


def _nbytes(dtype: int, shape) -> int | None:
    if not dtype or shape is None or any(not isinstance(d, int) for d in shape):
        return None
    try:
        item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(dtype)).itemsize
    except (KeyError, TypeError, ValueError):
        return None
    if dtype == onnx.TensorProto.STRING:
        return None
    return int(np.prod(shape, dtype=np.int64)) * item


def _value_bytes(value) -> int | None:
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "OUS":
            return int(sum(len(str(x).encode()) for x in value.reshape(-1)))
        return int(value.nbytes)
    return None


def make_plan(
    model,
    target: str,
    *,
    fallback: str = "onnxruntime",
    min_nodes: int = DEFAULT_MIN_NODES,
    depth=None,
    base_dir=None,
    source: str = "",
    seed: int = 0,
    shapes: dict[str, list[int]] | None = None,
    verify: bool = True,
    progress: Callable[[float, str], None] | None = None,
    keep_off: frozenset[str] = frozenset(),
    _built_rounds: int = 0,
) -> Plan:
    """A deployment plan for `model` (a surgery.model.Model, or a ModelProto with `base_dir`) on `target` with
    `fallback` for the rest. Where the target's builder runs here (TensorRT-RTX builds ahead of time on the
    CPU), every target part is built at the shapes of the verification run: a part the builder refuses goes to
    the fallback (the node it names, else the whole part) and the plan is made again, with the builder's words in
    its notes. `keep_off`: node keys that go to the fallback whatever the target says. Raises SplitError for what
    cannot be split (message names the node or tensor), surgery.backends.UnknownBackend for a target id that does
    not exist."""
    from surgery.backends import get_backend
    from surgery.diagnose import check_one
    from surgery.graph import GraphFacts, cycle_nodes
    from surgery.model import Model
    from surgery.verdict import Outcome, Status

    t0 = time.perf_counter()

    def say(fraction: float, message: str) -> None:
        if progress:
            progress(fraction, message)

    if isinstance(model, Model):
        base_dir, source, proto = model.base_dir, source or model.source, model.proto
    else:
        proto = model
    if fallback not in FALLBACKS:
        raise SplitError(
            f"fallback '{fallback}' cannot run parts here. Note: use one of {', '.join(FALLBACKS)}"
        )
    fb = get_backend(fallback)
    if not fb.availability().ok:
        raise SplitError(f"fallback {fallback} is not available here: {fb.availability().reason}")
    if min_nodes < 1:
        raise SplitError(f"--min-nodes must be at least 1 (got {min_nodes})")
    say(0.05, f"checking with {target}")
    report = check_one(proto, target, base_dir, depth=depth)
    if report.outcome is Outcome.UNAVAILABLE:
        reason = "; ".join(m.text() for m in report.messages)
        raise SplitError(f"target {target} is not available here: {reason}")
    facts = GraphFacts.of(proto)
    unknown = sorted(set(shapes or {}) - set(facts.graph_inputs) - {""})
    if unknown:
        raise SplitError(
            f"--input-shape names {', '.join(map(repr, unknown))}, which the model does not take. Note: its inputs "
            f"are {', '.join(facts.graph_inputs)}"
        )
    cyclic = cycle_nodes(facts)
    if cyclic:
        raise SplitError(
            f"the graph has a cycle (through node '{facts.keys[cyclic[0]]}'): ONNX graphs are acyclic, and no "
            "backend imports this one"
        )
    graph = proto.graph
    consts = constant_nodes(facts)
    status = {v.index: v.status for v in report.verdicts}
    kinds = {
        i: TARGET if status.get(i) is Status.SUPPORTED and facts.keys[i] not in keep_off else FALLBACK
        for i in range(len(graph.node))
        if i not in consts
    }
    compute = len(kinds)
    notes: list[str] = []
    second = _second_look(proto, facts, report, kinds, target, base_dir, depth)
    second = [i for i in second if facts.keys[i] not in keep_off]
    if second:
        for i in second:
            kinds[i] = TARGET
            status[i] = Status.SUPPORTED
        notes.append(
            f"{len(second)} node(s) the whole-model check left without a verdict were checked again without the "
            "nodes it refused, and are supported: "
            + ", ".join(facts.keys[i] for i in second[:5])
            + (" …" if len(second) > 5 else "")
        )
    if status and not any(s is Status.SUPPORTED for s in status.values()):
        raise SplitError(
            f"no supported region: {report.label} supports none of the {len(graph.node)} node(s); "
            + "; ".join(report.reasons()[:2])
        )
    if not any(k == TARGET for k in kinds.values()):
        raise SplitError(
            f"no supported region: {report.label} supports only constant nodes of this model; every one of its "
            f"{compute} compute node(s) would fall back"
        )
    unknown = [v for v in report.unknown if v.index in kinds and kinds[v.index] == FALLBACK]
    if unknown:
        notes.append(
            f"{len(unknown)} node(s) without a verdict ({report.label} cannot confirm them) go to the fallback: "
            + ", ".join(f"{v.op_type} '{v.node}'" for v in unknown[:5])
            + (" …" if len(unknown) > 5 else "")
        )
    rejected_consts = {
        v.index for v in report.verdicts if v.index in consts and v.status is not Status.SUPPORTED
    }
    fold: set[str] = set()
    sized = None  # (free dim size, feeds, the original runs on them)
    problems: list[str] = []  # why a run with onnxruntime could not type a tensor
    types: dict[str, onnx.TypeProto] = {}
    values: dict = {}
    rounds = 0
    while True:
        rounds += 1
        say(0.1 + 0.1 * rounds, f"grouping, round {rounds}")
        groups = group(facts, kinds, min_nodes)
        if not any(k == TARGET for k in kinds.values()):
            raise SplitError(
                f"no supported region: {report.label} refused every node it supports in the whole model when it "
                "checked them in parts of their own; " + "; ".join(notes[-1:])
            )
        if not any(g.kind == TARGET for g in groups):
            raise SplitError(
                f"no supported region of at least {min_nodes} compute node(s): {report.label} supports "
                f"{sum(k == TARGET for k in kinds.values())} scattered node(s), each region smaller than "
                f"--min-nodes {min_nodes}. Note: lower --min-nodes to keep smaller regions on the target"
            )
        owner = {i: k for k, g in enumerate(groups) for i in g.nodes}
        part_in: list[list[str]] = [[] for _ in groups]
        part_out: list[list[str]] = [[] for _ in groups]
        readers: dict[str, list[int]] = {}
        inside: dict[str, int] = {}  # tensor read only inside a subgraph -> the node that reads it
        from surgery.graph import all_inputs

        for k, g in enumerate(groups):
            for i in g.nodes:
                node = graph.node[i]
                direct = set(node.input)
                for x in all_inputs(node):
                    if not x or facts.is_constant(x):
                        continue
                    p = facts.producer.get(x)
                    if p is not None and owner.get(p) == k:
                        continue
                    if x not in part_in[k]:
                        part_in[k].append(x)
                    if x not in direct:
                        inside.setdefault(x, i)
                    if p is not None:
                        readers.setdefault(x, [])
                        if k not in readers[x]:
                            readers[x].append(k)
                        src = owner[p]
                        if x not in part_out[src]:
                            part_out[src].append(x)
        for o in facts.graph_outputs:
            p = facts.producer.get(o)
            if p is None and o in facts.graph_inputs:
                continue  # an input passed straight through: the chain hands it on
            k = (
                owner.get(p, len(groups) - 1) if p is not None else len(groups) - 1
            )  # a constant output: the last part computes it too
            if o not in part_out[k]:
                part_out[k].append(o)
        boundary = list(
            dict.fromkeys([x for ins in part_in for x in ins] + [o for outs in part_out for o in outs])
        )
        untyped = [
            t for t in boundary if not facts.info(t).dtype and t not in types and t not in facts.graph_inputs
        ]
        if untyped:
            if sized is None:
                sized = runnable_feeds(proto, seed, shapes, base_dir)
            if sized[1] is not None:
                runs = [sized[:2]]
                other = _feeds_or_none(proto, seed, shapes, default_dim=sized[0] + 1)
                if other is not None:
                    runs.append((sized[0] + 1, other))
                types.update(isolated_types(proto, untyped, runs, base_dir, problems))
        say(0.2 + 0.1 * rounds, f"cutting {len(groups)} part(s)")
        parts: list[Part] = []
        cuts = []
        for k, g in enumerate(groups):
            backend = target if g.kind == TARGET else fallback
            part_fold = set(fold)
            if g.kind == TARGET:  # a constant the target refuses to compute is handed over as a value
                for x in {x for i in g.nodes for x in all_inputs(graph.node[i])}:
                    if facts.is_constant(x) and set(facts.constant_producers(x)) & rejected_consts:
                        part_fold.add(x)
            try:
                c = cut(
                    proto,
                    facts,
                    g.nodes,
                    part_out[k],
                    fold=part_fold,
                    values=values,
                    types=types,
                    base_dir=base_dir,
                    name=f"{graph.name or 'graph'}_part{k}",
                )
            except CutError as exc:
                why = problems[-1] if problems else ""
                if not why and sized is not None and not sized[2]:
                    why = "the original does not run on onnxruntime here"
                raise SplitError(
                    _boundary_message(exc, facts, groups, k, inside, target, fallback)
                    + (f" ({why})" if why else "")
                ) from None
            parts.append(
                Part(
                    k,
                    g.kind,
                    backend,
                    _file_name(k, backend),
                    [facts.keys[i] for i in c.nodes],
                    c.inputs,
                    list(part_out[k]),
                    c.folded,
                    model=c.model,
                )
            )
            cuts.append(c)
        # every part checked alone by its backend; nodes a target part refuses there go back to the fallback
        moved, more_fold = [], set()
        for n, part in enumerate(parts):
            say(0.3 + 0.4 * n / max(len(parts), 1), f"checking part {part.index} with {part.backend}")
            r = check_one(part.model, part.backend, base_dir, depth=depth if part.role == TARGET else None)
            part.check = {
                "backend": r.backend,
                "label": r.label,
                "outcome": r.outcome.value,
                "reasons": r.reasons()[:3],
                "seconds": round(r.seconds, 3),
            }
            if part.role != TARGET:
                continue
            c = cuts[n]
            for v in r.verdicts:
                if v.status is Status.SUPPORTED or v.index < 0:
                    continue
                i = c.original_index(v.index)
                if i in kinds:
                    moved.append(i)
                else:  # a copied constant node the target refuses alone: hand its value over instead
                    more_fold.update(o for o in graph.node[i].output if o)
        if (moved or more_fold - fold) and rounds < MAX_ROUNDS:
            for i in moved:
                kinds[i] = FALLBACK
            fold |= more_fold
            notes.append(
                f"round {rounds}: {len(moved)} node(s) the target refused in a part of their own went to the "
                "fallback"
                + (f": {', '.join(facts.keys[i] for i in moved[:5])}" if moved else "")
                + (f"; {len(more_fold)} constant(s) handed over by value" if more_fold else "")
            )
            continue
        break

    def tensor(name: str, source: int | None, targets: list[int]) -> Tensor:
        try:
            vi = typed(facts, name, types)
        except CutError:
            return Tensor(name, "?", None, None, source, targets)
        dtype, shape = type_text(vi)
        return Tensor(name, dtype, shape, _nbytes(vi.type.tensor_type.elem_type, shape), source, targets)

    owner_part = {o: p.index for p in parts for o in p.outputs}
    crossings = [
        tensor(x, owner_part.get(x), sorted(readers.get(x, [])))
        for p in parts
        for x in p.outputs
        if x in readers
    ]
    inputs = [tensor(x, None, [p.index for p in parts if x in p.inputs]) for x in facts.graph_inputs]
    plan = Plan(
        source=source,
        target=target,
        target_label=report.label,
        fallback=fallback,
        min_nodes=min_nodes,
        parts=parts,
        inputs=inputs,
        outputs=list(facts.graph_outputs),
        crossings=crossings,
        nodes=len(graph.node),
        compute_nodes=compute,
        rounds=rounds,
        notes=notes,
        base_dir=None if base_dir is None else Path(base_dir),
    )
    if verify:
        say(0.75, "running the chain against the original")
        if sized is None:
            sized = runnable_feeds(proto, seed, shapes, base_dir)
        plan.verification = verify_isolated(plan, proto, feeds=sized[1], seed=seed, shapes=shapes)
    say(0.9, f"building the target parts with {target}")
    refused = build_target_parts(plan, target, base_dir)
    if refused and _built_rounds < MAX_ROUNDS:
        again = make_plan(
            model,
            target,
            fallback=fallback,
            min_nodes=min_nodes,
            depth=depth,
            base_dir=base_dir,
            source=source,
            seed=seed,
            shapes=shapes,
            verify=verify,
            progress=progress,
            keep_off=keep_off | refused.keys(),
            _built_rounds=_built_rounds + 1,
        )
        words = sorted(set(refused.values()))
        again.notes.insert(
            0,
            f"the builder refused {len(refused)} node(s) in a target part ({', '.join(sorted(refused)[:5])}"
            f"{' …' if len(refused) > 5 else ''}), which went to the fallback; it said: {'; '.join(words)[:400]}",
        )
        again.seconds = time.perf_counter() - t0
        return again
    plan.seconds = time.perf_counter() - t0
    say(1.0, "done")
    return plan


def build_target_parts(plan: Plan, target: str, base_dir) -> dict[str, str]:
    """Build every target part where the target's builder runs here, at the shapes its inputs had in the
    verification run (a profile of that one shape for each dynamic input), and record the result in
    `part.build`. Returns the nodes that should go to the fallback, with the builder's words: the node the
    builder names where it names one in the part, else every node of the part."""
    from surgery.backends import get_backend
    from surgery.backends.base import BuildOptions
    from surgery.backends.build import build_model
    from surgery.graph import tensor_info_from_type

    backend = get_backend(target)
    builds = getattr(backend, "builds_in_check", False) and backend.availability().ok
    if not builds or target.startswith("tensorrt-static"):
        why = f"{target} has no builder on this machine: its parts were checked at parse only"
        for part in plan.target_parts:
            part.build = {"depth": "parse", "why": why}
        return {}
    v = plan.verification
    seen = dict((v.feeds if v is not None else {}) or {})
    seen.update({c.name: c.measured_shape for c in plan.crossings if c.measured_shape is not None})
    refused: dict[str, str] = {}
    for part in plan.target_parts:
        profiles, missing = {}, []
        for vi in part.model.graph.input:
            info = tensor_info_from_type(vi.name, vi.type)
            if vi.name in part.inputs and info.is_dynamic:
                shape = seen.get(vi.name)
                if shape is None:
                    missing.append(vi.name)
                else:
                    profiles[vi.name] = (tuple(shape),) * 3
        if missing:
            part.build = {
                "depth": "parse",
                "why": f"not built: no shape known for its dynamic input(s) {', '.join(missing)} (the plan's "
                "verification did not run); give --input-shape",
            }
            continue
        r = build_model(target, part.model, BuildOptions(measure=False, profiles=profiles), base_dir=base_dir)
        part.build = {
            "depth": "build",
            "ok": r.ok,
            "builder": r.label,
            "words": r.error,
            "profiles": {k: list(lo) for k, (lo, _, _) in profiles.items()},
        }
        if r.ok:
            continue
        named = [r.node] if r.node in part.nodes else []  # the builder names a node by its name (its key)
        for key in named or part.nodes:
            refused[key] = first_words(r.error)
    return refused


def first_words(text: str) -> str:
    from surgery.text import telling_line

    return telling_line(text, 200)


def _numeric(facts, tensor: str) -> bool:
    """A typed tensor of numbers or booleans: what an accelerator can take at a boundary."""
    dtype = facts.info(tensor).dtype
    return bool(dtype) and dtype != onnx.TensorProto.STRING


def _second_look(proto, facts, report, kinds: dict[int, str], target: str, base_dir, depth) -> list[int]:
    """Nodes without a verdict (the parser stopped at an error not tied to a node, e.g. a string graph input it
    cannot import; or a node fed by a refused one), checked again in a model of the nodes it did not refuse and
    that read and write only numeric tensors. Returns the ones it supports there. A verdict of 'unknown' for a
    reason that holds there too (a plugin TensorRT-RTX lacks) stays unknown, and the node falls back."""
    from surgery.diagnose import check_one
    from surgery.graph import all_inputs
    from surgery.verdict import Status

    graph = proto.graph
    status = {v.index: v.status for v in report.verdicts}
    unknown = [i for i in kinds if status.get(i) is Status.UNKNOWN]
    if not unknown:
        return []

    def clean(i: int) -> bool:
        node = graph.node[i]
        ins = [x for x in all_inputs(node) if x and not facts.is_constant(x)]
        return all(_numeric(facts, x) for x in [*ins, *(o for o in node.output if o)])

    keep = [i for i in kinds if status.get(i) is not Status.REJECTED and clean(i)]
    if not any(i in set(keep) for i in unknown):
        return []
    kept = set(keep)
    outs = []
    for i in keep:
        for o in graph.node[i].output:
            if o and (o in facts.graph_outputs or any(j not in kept for j in facts.consumers.get(o, []))):
                outs.append(o)
    try:
        c = cut(proto, facts, keep, outs or [graph.node[keep[-1]].output[0]], base_dir=base_dir)
        again = check_one(c.model, target, base_dir, depth=depth)
    except Exception:  # a second look is a bonus: without it those nodes fall back
        return []
    found = []
    for v in again.verdicts:
        if v.index >= 0 and v.status is Status.SUPPORTED:
            i = c.original_index(v.index)
            if status.get(i) is Status.UNKNOWN and i in kinds:
                found.append(i)
    pos = facts.position
    return sorted(found, key=pos.__getitem__)


def runnable_feeds(
    model: ModelProto, seed: int = 0, shapes=None, base_dir=None
) -> tuple[int, dict | None, bool]:
    """(size, feeds, the original runs on them): seeded inputs whose symbolic dims nobody gave take the first of
    2 and surgery.verify's larger FREE_DIM_SIZES (16, 512, 16000: an audio front end needs a window of samples)
    at which onnxruntime runs the original (in a child process: a size that crashes it is passed over), within
    its FEED_LIMIT; the first size's feeds when none runs, None when inputs cannot be made (an input without a
    shape)."""
    from surgery.isolate import BackendCrash, call_isolated
    from surgery.verify import FEED_LIMIT, FREE_DIM_SIZES, RUN_FAILURE

    first = None
    tried: list = []
    for size in (2, *(d for d in FREE_DIM_SIZES if d > 2)):
        feeds = _feeds_or_none(model, seed, shapes, default_dim=size)
        if feeds is None:
            return size, None, False
        dims = {k: np.shape(v) for k, v in feeds.items()}
        if tried and (dims in tried or max(map(np.prod, dims.values()), default=0) > FEED_LIMIT):
            break
        tried.append(dims)
        first = first or (size, feeds, False)
        try:
            error = call_isolated("surgery.split:_runs", model, feeds, base_dir, timeout=RUN_TIMEOUT_S)
        except BackendCrash:
            continue  # onnxruntime died at this size (SIGFPE on an empty scan, ...): try a larger one
        if not error:
            return size, feeds, True
        if RUN_FAILURE not in error:
            break
    return first


def _runs(model: ModelProto, feeds: dict, base_dir=None) -> str:
    """Empty when onnxruntime runs `model` on `feeds`, else its error (called in a child process)."""
    from surgery.ort import make_session

    try:
        sess = make_session(model, base_dir)
        wanted = {i.name for i in sess.get_inputs()}
        sess.run(None, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        return str(exc) or type(exc).__name__
    return ""


# Runs on seeded inputs can crash onnxruntime itself (an integer division by a random zero is SIGFPE): they run in
# a child process (surgery.isolate), and a crash is reported, never the caller's death.
RUN_TIMEOUT_S = 600.0


def isolated_types(model: ModelProto, tensors: list[str], runs, base_dir=None, problems=None) -> dict:
    """surgery.split.cut.learn_types in a child process ({} where that crashes; the crash is appended to
    `problems`)."""
    from surgery.isolate import BackendCrash, call_isolated

    try:
        return call_isolated(
            "surgery.split.cut:learn_types", model, tensors, runs, base_dir, timeout=RUN_TIMEOUT_S
        )
    except BackendCrash as exc:
        if problems is not None:
            problems.append(f"the run with onnxruntime crashed ({exc})")
        return {}


def verify_isolated(plan: Plan, original: ModelProto, **kwargs) -> Verification:
    """verify_plan in a child process: a run that crashes or runs out of time is a failed verification."""
    import dataclasses

    from surgery.isolate import BackendCrash, call_isolated

    try:
        v, measured = call_isolated(
            "surgery.split:_verify_and_measure",
            dataclasses.replace(plan, _runners={}),
            original,
            kwargs,
            timeout=RUN_TIMEOUT_S,
        )
    except BackendCrash as exc:
        feeds = kwargs.get("feeds") or {}
        return Verification(
            "failed",
            kwargs.get("seed", 0),
            {k: list(np.shape(v)) for k, v in feeds.items()},
            message=f"running the original or the chain on seeded inputs: {exc}",
        )
    for c in plan.crossings:
        c.measured_bytes, c.measured_shape = measured.get(c.name, (None, None))
    return v


def _verify_and_measure(plan: Plan, original: ModelProto, kwargs: dict) -> tuple[Verification, dict]:
    v = verify_plan(plan, original, **kwargs)
    return v, {c.name: (c.measured_bytes, c.measured_shape) for c in plan.crossings}


def _feeds_or_none(proto, seed, shapes, default_dim: int = 2):
    try:
        return seeded_feeds(proto, seed=seed, shapes=shapes, default_dim=default_dim)
    except ValueError:
        return None


def _boundary_message(exc: CutError, facts, groups, k: int, inside: dict, target: str, fallback: str) -> str:
    where = f"part {k} ({target if groups[k].kind == TARGET else fallback})"
    if exc.tensor and exc.tensor in inside:
        i = inside[exc.tensor]
        node = facts.model.graph.node[i]
        return (
            f"cannot split at a subgraph-bearing node: {node.op_type} '{facts.keys[i]}' reads "
            f"{describe_tensor(facts, exc.tensor)} inside its subgraph, from another part, and that tensor has no "
            f"known dtype, so {where} cannot declare it as an input. Note: give the model's shapes (onnx shape "
            "inference must type it), or keep the node and its producer on one backend"
        )
    if exc.tensor:
        readers = [facts.keys[i] for i in facts.consumers.get(exc.tensor, [])][:3]
        return (
            f"cannot split: {describe_tensor(facts, exc.tensor)} crosses into or out of {where} (read by "
            f"{', '.join(readers) or 'a graph output'}) but has no known dtype: neither shape inference nor a run "
            "with onnxruntime types it. Note: a part's inputs and outputs must be typed tensors (a sequence, map or "
            "optional cannot cross between backends)"
        )
    return f"cannot split {where}: {exc}"


# -- verification ------------------------------------------------------------------------------------------------


def _compare(a, b) -> tuple[float, float, str]:
    """max abs, mean rel, and a note (shape or dtype change) for a reference value `a` and a chained one `b`."""
    from surgery.verify import _maps_as_rows, max_abs_error, mean_relative_error

    a, _ = _maps_as_rows(a, None)
    b, _ = _maps_as_rows(b, None)
    if a.shape != b.shape:
        return float("inf"), float("inf"), f"shape {a.shape} became {b.shape}"
    if a.dtype.kind in "OUS" or b.dtype.kind in "OUS":
        same = bool(np.all(a.astype(str) == b.astype(str)))
        return (0.0, 0.0, "") if same else (float("inf"), float("inf"), "strings differ")
    note = "" if a.dtype == b.dtype else f"dtype {a.dtype} became {b.dtype}"
    return max_abs_error(a, b), mean_relative_error(a, b), note


def _within(value, mean_rel: float, note: str, exact: bool) -> bool:
    from surgery.verify import exact_threshold

    if note:
        return False
    dtype = np.asarray(value).dtype
    if dtype.kind in "OUSb" or dtype.kind in "iu":
        return mean_rel == 0
    return mean_rel <= (exact_threshold(dtype) if exact else RTOL_OTHER_BACKEND)


def verify_plan(
    plan: Plan,
    original: ModelProto,
    *,
    feeds: dict | None = None,
    seed: int = 0,
    shapes: dict[str, list[int]] | None = None,
) -> Verification:
    """Run the original (onnxruntime) and the chained parts on the same seeded inputs; compare every output, and
    name the first crossing tensor that differs when an output does."""
    from surgery.ort import make_session
    from surgery.verify import _with_outputs

    if feeds is None:
        try:
            feeds = seeded_feeds(original, seed=seed, shapes=shapes)
        except ValueError as exc:
            return Verification("not verified", seed, message=f"no inputs to run with: {exc}")
    shape_of = {k: list(np.shape(v)) for k, v in feeds.items()}
    crossing = [c.name for c in plan.crossings]
    try:
        sess = make_session(_with_outputs(original, crossing), plan.base_dir)
        names = [o.name for o in sess.get_outputs()]
        wanted = {i.name for i in sess.get_inputs()}
        ref = dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted})))
    except Exception as exc:
        return Verification(
            "not verified",
            seed,
            shape_of,
            message=f"the original does not run on onnxruntime, so there is nothing to compare with ({_line(exc)})",
        )
    try:
        env, ran = _execute(plan, feeds)
    except PartFailed as exc:
        return Verification("failed", seed, shape_of, message=str(exc))
    except Exception as exc:
        return Verification("failed", seed, shape_of, message=_line(exc))
    exact = all(on == "onnxruntime" for on, _ in ran)
    notes = sorted({f"part {k}: {note}" for k, (_, note) in enumerate(ran) if note})
    for c in plan.crossings:
        c.measured_bytes = _value_bytes(env.get(c.name))
        value = env.get(c.name)
        c.measured_shape = list(np.shape(value)) if isinstance(value, np.ndarray) else None
    outputs, all_ok = [], True
    for name in plan.outputs:
        a, b = ref.get(name), env.get(name)
        if a is None or b is None:
            outputs.append(
                {
                    "name": name,
                    "max_abs": float("inf"),
                    "mean_rel": float("inf"),
                    "ok": False,
                    "note": "missing",
                }
            )
            all_ok = False
            continue
        max_abs, mean_rel, note = _compare(a, b)
        ok = _within(a, mean_rel, note, exact)
        all_ok &= ok
        arr = np.asarray(a) if isinstance(a, np.ndarray) else None
        outputs.append(
            {
                "name": name,
                "dtype": str(arr.dtype) if arr is not None else type(a).__name__,
                "shape": list(arr.shape) if arr is not None else None,
                "max_abs": max_abs,
                "mean_rel": mean_rel,
                "ok": ok,
                "note": note,
            }
        )
    first = None
    if not all_ok:
        source = {o: p.index for p in plan.parts for o in p.outputs}
        for c in plan.crossings:
            if c.name in ref and c.name in env:
                max_abs, mean_rel, note = _compare(ref[c.name], env[c.name])
                if not _within(ref[c.name], mean_rel, note, exact):
                    first = {
                        "tensor": c.name,
                        "part": source.get(c.name),
                        "max_abs": max_abs,
                        "mean_rel": mean_rel,
                    }
                    break
        if first is None:
            bad = next(o for o in outputs if not o["ok"])
            first = {
                "tensor": bad["name"],
                "part": source.get(bad["name"]),
                "max_abs": bad["max_abs"],
                "mean_rel": bad["mean_rel"],
            }
    return Verification(
        "reproduces" if all_ok else "differs",
        seed,
        shape_of,
        [on for on, _ in ran],
        notes,
        outputs,
        first,
    )


# -- drawing -------------------------------------------------------------------------------------------------------

PART_COLORS = {TARGET: "#2e9d57", FALLBACK: "#4a78b5"}  # target green (as a supported node), fallback blue


def to_dot(plan: Plan, max_names: int = 3) -> str:
    """The plan as a Graphviz graph: graph inputs, the parts in execution order coloured by backend (a target
    part the target refuses alone outlined red), the tensors crossing between them on the edges."""

    def q(text: str) -> str:  # a DOT string: quotes and backslashes escaped, newlines as \\n
        text = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{text}"'

    def names(tensors: list[str]) -> str:
        shown = [n if len(n) <= 40 else n[:39] + "…" for n in tensors[:max_names]]
        more = [f"+{len(tensors) - max_names} more"] if len(tensors) > max_names else []
        return "\n".join(shown + more)

    lines = [
        "digraph plan {",
        '  rankdir=LR; node [fontname="Helvetica", fontsize=11]; edge [fontname="Helvetica", fontsize=9];',
    ]
    for t in plan.inputs:
        lines.append(
            f'  {q("in:" + t.name)} [label={q(t.name)}, shape=ellipse, style=filled, fillcolor="#dfe6ee"];'
        )
    for p in plan.parts:
        ok = p.accepted or p.role != TARGET
        outcome = p.check.get("outcome", "not checked")
        label = f"part {p.index}: {p.backend}\n{len(p.nodes)} node(s)\n{outcome} alone"
        lines.append(
            f'  {q(f"part{p.index}")} [label={q(label)}, shape=box, style="filled,rounded", '
            f'fillcolor="{PART_COLORS[p.role]}", fontcolor="white", color="{"#333333" if ok else "#d64545"}", '
            f"penwidth={1 if ok else 3}];"
        )
    for o in plan.outputs:
        lines.append(f'  {q("out:" + o)} [label={q(o)}, shape=ellipse, style=filled, fillcolor="#dfe6ee"];')
    edges: dict[tuple[str, str], list[str]] = {}
    for t in plan.inputs:
        for k in t.targets:
            edges.setdefault((f"in:{t.name}", f"part{k}"), []).append(t.name)
    for c in plan.crossings:
        for k in c.targets:
            edges.setdefault((f"part{c.source}", f"part{k}"), []).append(c.name)
    for p in plan.parts:
        for o in p.outputs:
            if o in plan.outputs:
                edges.setdefault((f"part{p.index}", f"out:{o}"), [])
    for o in plan.outputs:
        if o in {t.name for t in plan.inputs}:
            edges.setdefault((f"in:{o}", f"out:{o}"), [])
    for (a, b), tensors in edges.items():
        label = f" [label={q(names(tensors))}]" if tensors and a.startswith("part") else ""
        lines.append(f"  {q(a)} -> {q(b)}{label};")
    lines.append("}")
    return "\n".join(lines)
