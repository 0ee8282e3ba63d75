"""Reduced precision emulated honestly on the CPU, node by node: what an fp16 / bf16 engine computes, and INT8 as
the Q/DQ nodes `quantize` writes.

Why not run the float16 model in onnxruntime: its CPU provider computes many float16 ops in float32 (it casts up
where it lacks a float16 kernel and drops the casts between such ops), so an intermediate past 65504 never
becomes inf there and a hand-written LayerNorm whose squares overflow looks fine. An fp16 engine stores every
intermediate in float16.

How: the float32 model is run by onnxruntime with graph optimizations off, each node still computing in float32
(as engines do inside a kernel: fp32 accumulation), but with every float32 value a reduced node reads or writes
rounded to the format (Cast to float16 or bfloat16 and back: round to nearest even, inf past the range, zero
below it). Whether node k is reduced is the k-th element of a boolean input, so one onnxruntime session answers
every "this set reduced, the rest float32" question at native speed; the mixed model `mixed_precision` writes
for a keep set computes the same values (the same roundings, at the same places).

INT8: the model `quantize` writes, where each node's quantized inputs come through Where(reduced[k], DQ(Q(x)), x):
the same one session answers "only these nodes quantized" (`quantize --exclude` for the rest).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

from surgery.mixed_precision import FIXED_FLOAT32, fixed_float32_nodes
from surgery.verify import max_abs_error, mean_relative_error, share_of_range

MASK = "onnx_surgery__reduced"


@dataclass(frozen=True)
class Format:
    name: str
    elem_type: int | None  # the ONNX type values are rounded to (None: INT8 by Q/DQ)
    max: float  # the largest finite value
    tiny: float  # the smallest positive value (subnormal); below it a value becomes 0


FORMATS = {
    "fp16": Format("fp16", TensorProto.FLOAT16, 65504.0, 2.0**-24),
    "bf16": Format("bf16", TensorProto.BFLOAT16, float(np.finfo(np.float32).max) * (1 - 2.0**-8), 2.0**-133),
    "int8": Format("int8", None, float("inf"), 0.0),
}


@dataclass
class NodeFacts:
    """One node of the float32 model as the reference run saw it."""

    index: int
    key: str
    op_type: str
    max_abs: float = 0.0  # largest |value| of its float inputs and outputs (float32 reference, every sample)
    out_max_abs: float = 0.0  # of its float outputs only
    cost: float = 0.0  # a compute estimate: multiply-adds x2 for MatMul/Gemm/Conv, else output elements
    float_math: bool = False  # it reads or writes float32: there is something to reduce
    fixed: bool = False  # stays float32 whatever is asked (a subgraph, or read by one)


@dataclass
class OutputNumbers:
    name: str
    mean_rel: float
    max_abs: float
    of_range: float
    nonfinite: int = 0  # elements inf/NaN in the emulation where the reference is finite

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Result:
    outputs: list[OutputNumbers]
    nonfinite_nodes: list[int] = field(default_factory=list)  # nodes whose outputs hold inf/NaN (full runs)

    @property
    def error(self) -> float:
        """The worst output's mean relative error (inf when an output holds inf/NaN the reference does not)."""
        return max((o.mean_rel for o in self.outputs), default=0.0)


def _session(model: ModelProto):
    import onnxruntime as ort

    from surgery.ort import runnable_copy

    so = ort.SessionOptions()
    so.log_severity_level = 3
    # off: a Cast pair must not be folded away, and no op may be fused into one computing past the roundings
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(
        runnable_copy(model).SerializeToString(), so, providers=["CPUExecutionProvider"]
    )


def _cost(node, shapes: dict[str, tuple]) -> float:
    outs = [shapes[o] for o in node.output if o in shapes]
    elems = float(sum(np.prod(s, dtype=np.float64) for s in outs))
    if not outs:
        return 0.0
    if node.op_type in ("MatMul", "Gemm") and node.input[0] in shapes:
        a = shapes[node.input[0]]
        trans = node.op_type == "Gemm" and any(x.name == "transA" and x.i for x in node.attribute)
        k = a[0] if trans and len(a) == 2 else (a[-1] if a else 1)
        return 2.0 * elems * k
    if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1 and node.input[1] in shapes:
        w = shapes[node.input[1]]
        per = float(np.prod(w[1:], dtype=np.float64))
        if node.op_type == "ConvTranspose" and node.input[0] in shapes:
            return 2.0 * float(np.prod(shapes[node.input[0]], dtype=np.float64)) * per
        return 2.0 * elems * per
    return elems


class Emulator:
    """The float32 reference and the reduced runs of one model on fixed samples.

    `run(reduced)` emulates the model with the nodes (indices into `model.graph.node`) in `reduced` computing in
    the format and the others in float32, and compares every output with the float32 reference."""

    def __init__(
        self,
        model: ModelProto,
        precision: str,
        samples: list[dict[str, np.ndarray]],
        *,
        base_dir=None,
        quantized: ModelProto | None = None,
        progress: Callable[[float, str], None] | None = None,
    ):
        from surgery.graph import node_keys
        from surgery.model import with_weights

        if precision not in FORMATS:
            raise ValueError(f"precision must be one of {sorted(FORMATS)}, got {precision!r}")
        if not samples:
            raise ValueError("no samples to run the model on")
        self.format = FORMATS[precision]
        self.precision = precision
        self.model = with_weights(model, base_dir)
        self.samples = samples
        self._progress = progress or (lambda f, m: None)
        g = self.model.graph
        keys = node_keys(g.node)
        self.nodes = [NodeFacts(i, k, n.op_type) for i, (k, n) in enumerate(zip(keys, g.node))]
        self.index = {f.key: f.index for f in self.nodes}
        self.output_names = [o.name for o in g.output]
        self._reference_run()
        if precision == "int8":
            if quantized is None:
                raise ValueError("int8 needs the quantized (Q/DQ) model")
            self._build_int8(quantized)
        else:
            self._build_float()
        self._sess = _session(self._masked)
        self.runs = 0

    # -- the float32 reference ---------------------------------------------------------------------------------
    def _reference_run(self) -> None:
        g = self.model.graph
        every = []
        seen = {o.name for o in g.output}
        for n in g.node:
            for o in n.output:
                if o and o not in seen:
                    seen.add(o)
                    every.append(o)
        probe = ModelProto()
        probe.CopyFrom(self.model)
        probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in every)
        self._progress(0.0, "float32 reference run")
        sess = _session(probe)
        names = [o.name for o in sess.get_outputs()]
        self.dtypes: dict[str, np.dtype] = {}
        shapes: dict[str, tuple] = {}
        peak: dict[str, float] = {}
        self.reference: list[dict[str, np.ndarray]] = []
        for s in self.samples:
            got = dict(zip(names, sess.run(names, s)))
            for k, v in got.items():
                if not isinstance(v, np.ndarray):
                    continue
                self.dtypes[k] = v.dtype
                shapes.setdefault(k, v.shape)
                if v.dtype == np.float32 and v.size:
                    finite = v[np.isfinite(v)]
                    m = float(np.max(np.abs(finite))) if finite.size else 0.0
                    peak[k] = max(peak.get(k, 0.0), m)
            for k, v in s.items():
                v = np.asarray(v)
                self.dtypes[k] = v.dtype
                shapes.setdefault(k, v.shape)
                if v.dtype == np.float32 and v.size:
                    peak[k] = max(peak.get(k, 0.0), float(np.max(np.abs(v[np.isfinite(v)]), initial=0.0)))
            self.reference.append({k: got[k] for k in self.output_names})
        for t in g.initializer:
            if t.data_type == TensorProto.FLOAT:
                a = numpy_helper.to_array(t)
                self.dtypes[t.name] = np.dtype(np.float32)
                shapes[t.name] = a.shape
                peak[t.name] = float(np.max(np.abs(a), initial=0.0))
        self.floats = {k for k, d in self.dtypes.items() if d == np.float32}
        self.peak = peak
        fixed = fixed_float32_nodes(self.model)
        for f, n in zip(self.nodes, g.node):
            edges = [x for x in [*n.input, *n.output] if x in self.floats]
            f.float_math = bool(edges)
            f.max_abs = max((peak.get(x, 0.0) for x in edges), default=0.0)
            f.out_max_abs = max((peak.get(x, 0.0) for x in n.output if x in self.floats), default=0.0)
            f.cost = _cost(n, shapes) if f.float_math else 0.0
            f.fixed = f.index in fixed

    # -- the masked models -------------------------------------------------------------------------------------
    def _gate(self, nodes: list, k: int, gates: dict[int, str]) -> str:
        if k not in gates:
            idx = f"{MASK}__i{k}"
            gates[k] = f"{MASK}__{k}"
            self._extra_inits.append(numpy_helper.from_array(np.array(k, np.int64), idx))
            nodes.append(helper.make_node("Gather", [MASK, idx], [gates[k]], name=f"{MASK}/gate{k}"))
        return gates[k]

    def _build_float(self) -> None:
        """Each candidate node k: its float inputs and outputs through Where(gate_k, round(x), x)."""
        to = self.format.elem_type
        m = ModelProto()
        m.CopyFrom(self.model)
        g = m.graph
        self._extra_inits: list = []
        nodes: list = []
        gates: dict[int, str] = {}
        rounded: dict[str, str] = {}

        def rounding(x: str) -> str:
            if x not in rounded:
                low, back = f"{x}__{self.precision}", f"{x}__{self.precision}_rt"
                nodes.append(helper.make_node("Cast", [x], [low], name=f"{low}/Cast", to=to))
                nodes.append(
                    helper.make_node("Cast", [low], [back], name=f"{back}/Cast", to=TensorProto.FLOAT)
                )
                rounded[x] = back
            return rounded[x]

        self.candidates = [f.index for f in self.nodes if f.float_math and not f.fixed]
        cand = set(self.candidates)
        self.node_outputs: dict[int, list[str]] = {}
        for k, n in enumerate(g.node):
            node = type(n)()
            node.CopyFrom(n)
            if k not in cand:
                nodes.append(node)
                continue
            gate = self._gate(nodes, k, gates)
            for j, x in enumerate(node.input):
                if x in self.floats and (node.op_type, j) not in FIXED_FLOAT32:
                    y = f"{x}__in{k}_{j}"
                    nodes.append(helper.make_node("Where", [gate, rounding(x), x], [y], name=f"{y}/Where"))
                    node.input[j] = y
            outs = []
            renamed = []
            for j, o in enumerate(node.output):
                if o in self.floats:
                    node.output[j] = f"{o}__raw"
                    renamed.append((f"{o}__raw", o))
                    outs.append(o)
            nodes.append(node)
            for raw, o in renamed:
                nodes.append(helper.make_node("Where", [gate, rounding(raw), raw], [o], name=f"{o}/Where"))
            self.node_outputs[k] = outs
        self._finish(m, nodes)

    def _build_int8(self, quantized: ModelProto) -> None:
        """In the Q/DQ model, an input DQ(Q(x)) becomes Where(gate, DQ(Q(x)), x), the gate that of the float32
        model's node of the same name (the quantizer keeps the names of the nodes it quantizes), or of any of
        them where several read it."""
        m = ModelProto()
        m.CopyFrom(quantized)
        g = m.graph
        self._extra_inits = []
        nodes: list = []
        gates: dict[int, str] = {}
        producer = {o: n for n in g.node for o in n.output}
        named = {f.key: f.index for f in self.nodes}
        cand: set[int] = set()
        self.node_outputs = {}
        # a DQ output read by several nodes is one tensor: `quantize --exclude` leaves an excluded node reading
        # it when another reader is quantized, so the gate of a shared DQ(Q(x)) is "any of its readers reduced"
        readers: dict[str, list[int]] = {}
        source: dict[str, str] = {}
        for n in g.node:
            k = named.get(n.name)
            if n.op_type in ("QuantizeLinear", "DequantizeLinear") or k is None:
                continue
            for x in n.input:
                dq = producer.get(x)
                if dq is None or dq.op_type != "DequantizeLinear":
                    continue
                q = producer.get(dq.input[0])
                if q is None or q.op_type != "QuantizeLinear":
                    continue  # an integer weight: nothing float to fall back to
                source[x] = q.input[0]
                readers.setdefault(x, [])
                if k not in readers[x]:
                    readers[x].append(k)
                cand.add(k)
        gated: dict[str, str] = {}
        for n in g.node:
            node = type(n)()
            node.CopyFrom(n)
            for j, x in enumerate(node.input):
                if x not in source:
                    continue
                if x not in gated:
                    gate = self._gate(nodes, readers[x][0], gates)
                    for i, k in enumerate(readers[x][1:]):
                        either = f"{x}__any{i}"
                        nodes.append(helper.make_node("Or", [gate, self._gate(nodes, k, gates)], [either]))
                        gate = either
                    gated[x] = f"{x}__gated"
                    nodes.append(
                        helper.make_node("Where", [gate, x, source[x]], [gated[x]], name=f"{x}/Where")
                    )
                node.input[j] = gated[x]
            nodes.append(node)
        self.candidates = sorted(cand)
        self._finish(m, nodes)

    def _finish(self, m: ModelProto, nodes: list) -> None:
        g = m.graph
        del g.node[:]
        g.node.extend(nodes)
        g.initializer.extend(self._extra_inits)
        g.input.append(helper.make_tensor_value_info(MASK, TensorProto.BOOL, [len(self.nodes)]))
        watched = [o for outs in self.node_outputs.values() for o in outs]
        have = {o.name for o in g.output}
        g.output.extend(helper.make_empty_tensor_value_info(o) for o in watched if o not in have)
        del g.value_info[:]
        self._masked = m

    # -- runs --------------------------------------------------------------------------------------------------
    def run(self, reduced: Iterable[int], *, watch: bool = False) -> Result:
        """Emulate with `reduced` in the format (the rest float32) on every sample; `watch`: also list the nodes
        whose outputs hold inf/NaN where the reference had finite values."""
        mask = np.zeros(len(self.nodes), np.bool_)
        idx = [k for k in reduced if k in set(self.candidates)]
        mask[idx] = True
        names = list(self.output_names)
        watched = [(k, o) for k, outs in self.node_outputs.items() for o in outs] if watch else []
        names += [o for _, o in watched if o not in names]
        got_all: list[dict] = []
        nonfinite: set[int] = set()
        for s in self.samples:
            got = dict(zip(names, self._sess.run(names, {**s, MASK: mask})))
            got_all.append({k: got[k] for k in self.output_names})
            for k, o in watched:
                v = got[o]
                if v.size and not np.isfinite(v).all():
                    nonfinite.add(k)
            self.runs += 1
        outputs = []
        for name in self.output_names:
            ref = [np.asarray(r[name]) for r in self.reference]
            got = [np.asarray(r[name]) for r in got_all]
            if not all(np.issubdtype(a.dtype, np.floating) for a in ref):
                a = np.concatenate([x.reshape(-1) for x in ref]).astype(np.float64)
                b = np.concatenate([x.reshape(-1) for x in got]).astype(np.float64)
            else:
                a = np.concatenate([x.reshape(-1) for x in ref])
                b = np.concatenate([x.reshape(-1) for x in got])
            mx = max_abs_error(a, b)
            bad = int(np.sum(np.isfinite(a) & ~np.isfinite(b)))
            outputs.append(OutputNumbers(name, mean_relative_error(a, b), mx, share_of_range(mx, a), bad))
        return Result(outputs, sorted(nonfinite))

    def overflow_origins(self, result: Result) -> list[int]:
        """The nodes where inf/NaN first appears in a full run (`run(..., watch=True)`): their outputs hold it,
        the outputs of the nodes they read did not."""
        bad = set(result.nonfinite_nodes)
        g = self.model.graph
        producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
        return [k for k in sorted(bad) if not any(producer.get(x) in bad for x in g.node[k].input)]

    def out_of_range(self) -> list[int]:
        """Candidate nodes whose float32 values (inputs or outputs) pass the format's largest value."""
        return [k for k in self.candidates if self.nodes[k].max_abs > self.format.max]

    def reduced_share(self, reduced: Iterable[int]) -> float:
        """The share of the float compute estimate (NodeFacts.cost) in `reduced`."""
        total = sum(f.cost for f in self.nodes if f.float_math)
        if total <= 0:
            return 0.0
        return sum(self.nodes[k].cost for k in set(reduced)) / total
