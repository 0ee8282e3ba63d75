"""Partial values of shape tensors: which elements of a small integer tensor (a scalar or a 1-D tensor, what
Shape/Gather/Concat/... compute from shapes) are known before the model runs, through the shape arithmetic that
onnx's data propagation does not follow (Div, Cast, Mul, Mod, Where, ...).

An element is an int (known: a static dim, or arithmetic on known elements), a str (a named symbolic dim, as
the inferred shapes name it: the same name is the same run-time value) or None (unknown). Only known elements
are ever folded; a dynamic dim stays computed. `propagate` gives every such tensor's elements; `output_shapes`
the output shapes of Reshape/Expand/ConstantOfShape that the partial values imply where shape inference left
dims unknown (fed back to the next inference: tensors after the Reshape get static dims, their Shape folds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from surgery.graph import FLOAT_TYPES, INT_TYPES

Elem = int | float | str | None

MAX_ELEMENTS = 64  # a longer tensor is not a shape: not tracked
_TRACKED = INT_TYPES | FLOAT_TYPES | {TensorProto.BOOL}


@dataclass(frozen=True)
class Value:
    elems: tuple[Elem, ...]
    dtype: int  # TensorProto data type
    scalar: bool  # rank 0 (else rank 1)

    @cached_property
    def known(self) -> bool:
        return all(_is_num(e) for e in self.elems)

    def array(self) -> np.ndarray:
        a = np.array(self.elems, dtype=helper.tensor_dtype_to_np_dtype(self.dtype))
        return a.reshape(()) if self.scalar else a


def _is_num(e) -> bool:
    return e is not None and not isinstance(e, str)


def _from_array(a: np.ndarray, dtype: int) -> Value | None:
    if a.ndim > 1 or a.size > MAX_ELEMENTS or dtype not in _TRACKED:
        return None
    # tolist gives the same Python numbers as item() per element, in one call
    return Value(tuple(a.reshape(-1).tolist()), dtype, a.ndim == 0)


def _values(get, names) -> list | None:
    """The partial values of `names`, or None as soon as one has none: the inputs after it are not read (a
    small weight's value costs a conversion; an Add of an activation and a bias never needs the bias's)."""
    out = []
    for x in names:
        v = get(x)
        if v is None:
            return None
        out.append(v)
    return out


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def refine(facts) -> tuple[dict[str, Value], dict[str, tuple]]:
    """One pass in topological order: the partial values of the small tensors of `facts`' graph (scalars and
    1-D tensors of at most MAX_ELEMENTS; constants read from initializers and Constant nodes), and the shapes
    they imply beyond what inference found: a Reshape/Expand/ConstantOfShape output's dims from the partial value
    of its shape input, then every node after it inferred again (onnx's inference of that one node) from the
    better input shapes, so that a later Shape reads them in the same pass (a chain of channel shuffles, each
    reshaping with dims computed from the previous one's Shape, resolves at once). Returns (values, tensor ->
    better dims)."""
    graph = facts.model.graph
    values: dict[str, Value] = {}
    weights_cache: dict[str, Value | None] = {}
    better: dict[str, tuple] = {}

    shapes: dict[str, tuple | None] = {}  # shape_of's answers, dropped when `better` changes one

    def shape_of(name: str):
        """The dims of `name`; an unnamed dynamic dim named after its tensor and axis: it is one value, and so
        cancels in a Reshape's -1 (Reshape(t, [Shape(t)[0], -1])) as a named one does."""
        if name in shapes:
            return shapes[name]
        d = better.get(name)
        if d is None:
            d = facts.info(name).shape
        if d is not None and any(x is None or x == "" for x in d):
            d = tuple(f"{name}#{k}" if x is None or x == "" else x for k, x in enumerate(d))
        shapes[name] = d
        return d

    # the nodes that read a tensor `better` or `computed` holds (a superset: facts.consumers also counts what a
    # body reads): only those, and the ops with a rule, are looked at below. Most nodes of a large model are
    # neither, and reading a node's fields from the proto is most of what a pass over them costs.
    after_better: set[int] = set()
    after_computed: set[int] = set()
    consumers = facts.consumers

    def improve(name: str, dims) -> None:
        have = shape_of(name)
        if _better(dims, have):
            better[name] = _merged(dims, have)
            shapes.pop(name, None)
            after_better.update(consumers.get(name, ()))

    def get(name: str) -> Value | None:
        if not name:
            return None
        v = values.get(name)
        if v is not None:
            return v
        if name in weights_cache:
            return weights_cache[name]
        t = facts.weights_tensor(name)
        out = None
        if t is not None and len(t.dims) <= 1 and t.data_location != TensorProto.EXTERNAL:
            n = t.dims[0] if t.dims else 1
            if n <= MAX_ELEMENTS and t.data_type in _TRACKED:
                try:
                    out = _from_array(numpy_helper.to_array(t), t.data_type)
                except Exception:  # noqa: BLE001 - an unreadable tensor: not tracked
                    out = None
        weights_cache[name] = out
        return out

    computed: set[str] = set()  # tensors whose value is known here and was not to shape inference
    infer = _NodeInference(facts, shape_of, get)
    ops = facts.ops
    for i in facts.order:
        op = ops[i]
        if op not in _LOOKED_AT and i not in after_better and i not in after_computed:
            continue  # no rule, and no input refine knows more of than inference did: nothing to do here
        node = graph.node[i]
        if node.domain not in ("", "ai.onnx") or not node.output:
            continue
        if op in infer.ops and (
            (i in after_better and not better.keys().isdisjoint(node.input))
            # a value shape inference did not see (computed here, not a weight) that this op's inference reads
            or (op not in _FAST and i in after_computed and not computed.isdisjoint(node.input))
        ):
            for name, dims in infer(node).items():
                improve(name, dims)
        if op in _SHAPED and node.output[0]:
            dims = _shaped_dims(node, get, shape_of)
            if dims is not None:
                improve(node.output[0], dims)
        rule = _RULES.get(op)
        if rule is None or not node.output[0]:
            continue
        try:
            v = rule(node, get, shape_of)
        except Exception:  # noqa: BLE001 - a case a rule does not expect: unknown, as before
            v = None
        if v is not None and len(v.elems) <= MAX_ELEMENTS:
            values[node.output[0]] = v
            if v.known and op not in ("Shape", "Size"):  # a Shape's value inference has already
                computed.add(node.output[0])
                after_computed.update(consumers.get(node.output[0], ()))
    return values, better


class BetterShapes(Mapping):
    """A tensor table (GraphFacts.tensors) with the dims `refine` found better: what a fold's facts read."""

    def __init__(self, base: Mapping, better: dict[str, tuple]):
        self._base, self._better = base, better
        self._done: dict = {}

    def __getitem__(self, name: str):
        from surgery.graph import TensorInfo

        dims = self._better.get(name)
        if dims is None:
            return self._base[name]
        info = self._done.get(name)
        if info is None:
            base = self._base.get(name)
            info = TensorInfo(name, base.dtype if base is not None else 0, tuple(dims))
            self._done[name] = info
        return info

    def __contains__(self, name: object) -> bool:
        return name in self._better or name in self._base

    def __iter__(self):
        yield from self._base
        yield from (n for n in self._better if n not in self._base)

    def __len__(self) -> int:
        return len(self._base) + sum(n not in self._base for n in self._better)


class _NodeInference:
    """onnx's shape inference of one node, from the current input shapes (and the values of small constant
    inputs, which Reshape/Slice/Unsqueeze/... read): tensor -> dims."""

    def __init__(self, facts, shape_of, get):
        from onnx import defs

        self.facts, self.shape_of, self.get = facts, shape_of, get
        self.opset = next((o.version for o in facts.model.opset_import if o.domain in ("", "ai.onnx")), None)
        self.ops = _standard_ops_without_bodies() if self.opset else frozenset()
        self.defs = defs
        self.schemas: dict = {}
        self.data: dict = {}

    def __call__(self, node) -> dict[str, tuple]:
        fast = _FAST.get(node.op_type)
        if fast is not None:
            try:
                dims = fast(node, self.shape_of, self.get)
            except Exception:  # noqa: BLE001 - a case the Python shape does not expect: onnx's inference
                dims = None
            if dims is not None:
                return {node.output[0]: dims}
        return self._onnx(node)

    def _onnx(self, node) -> dict[str, tuple]:
        from onnx.shape_inference import infer_node_outputs

        schema = self.schemas.get(node.op_type, 0)
        if schema == 0:
            try:
                schema = self.defs.get_schema(node.op_type, self.opset, "")
            except Exception:  # noqa: BLE001 - no schema: nothing inferred
                schema = None
            self.schemas[node.op_type] = schema
        if schema is None:
            return {}
        types, data = {}, {}
        for x in node.input:
            if not x or x in types:
                continue
            info = self.facts.info(x)
            if not info.dtype:
                return {}
            shape = self.shape_of(x)
            dims = (
                None
                if shape is None
                else [d if isinstance(d, (int, str)) and d != "" else None for d in shape]
            )
            types[x] = helper.make_tensor_type_proto(info.dtype, dims)
            t = self._data(x)
            if t is not None:
                data[x] = t
        try:
            out = infer_node_outputs(
                schema, node, types, data, opset_imports=list(self.facts.model.opset_import)
            )
        except Exception:  # noqa: BLE001 - inference refuses the node: nothing better
            return {}
        result = {}
        for name, tp in out.items():
            if tp.HasField("tensor_type") and tp.tensor_type.HasField("shape"):
                result[name] = tuple(
                    d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                    for d in tp.tensor_type.shape.dim
                )
        return result

    def _data(self, name: str):
        if name in self.data:
            return self.data[name]
        from surgery.graph import INFER_KEEP_ELEMENTS, INFER_KEEP_FLOATS

        t = self.facts.weights_tensor(name)
        if t is not None and (
            t.data_location == TensorProto.EXTERNAL
            or math.prod(t.dims) > (INFER_KEEP_ELEMENTS if t.data_type in INT_TYPES else INFER_KEEP_FLOATS)
        ):
            t = None  # what shape inference does not read (a light copy holds no data for it)
        if t is None:
            v = self.get(name)
            if v is not None and v.known:
                t = numpy_helper.from_array(v.array(), name)
        self.data[name] = t
        return t


# -- the output shapes of common ops, in Python (onnx's inference of one node costs ~0.2 ms from Python) -----------


def _same(node, shape_of, get=None):
    return shape_of(node.input[0])


def _broadcast(node, shape_of, get=None):
    shapes = [shape_of(x) for x in node.input if x]
    if not shapes or any(s is None for s in shapes):
        return None
    return _broadcast_dims(shapes)


def _broadcast_dims(shapes):
    r = max(len(s) for s in shapes)
    out = []
    for k in range(r):
        ds = {s[k - (r - len(s))] for s in shapes if k - (r - len(s)) >= 0}
        ds.discard(1)
        ints = {d for d in ds if isinstance(d, int)}
        if not ds:
            out.append(1)
        elif len(ints) > 1:
            return None  # not broadcastable: leave it to onnx
        elif ints:
            out.append(ints.pop())  # a dynamic dim beside a static one (not 1) is that one in a valid model
        elif len(ds) == 1:
            out.append(ds.pop())
        else:
            out.append(None)  # two dims of unknown relation: 1 and n, or n and n
    return tuple(out)


def _transpose_shape(node, shape_of, get=None):
    shape = shape_of(node.input[0])
    if shape is None:
        return None
    perm = _attr(node, "perm") or list(range(len(shape)))[::-1]
    if sorted(perm) != list(range(len(shape))):
        return None
    return tuple(shape[p] for p in perm)


def _shape_shape(node, shape_of, get=None):
    shape = shape_of(node.input[0])
    if shape is None:
        return None
    r = len(shape)
    start, end = _attr(node, "start", 0), _attr(node, "end", r)
    start = min(max(0, start + r if start < 0 else start), r)
    end = min(max(0, end + r if end < 0 else end), r)
    return (max(end - start, 0),)


def _gather_shape(node, shape_of, get=None):
    data, idx = shape_of(node.input[0]), shape_of(node.input[1])
    if data is None or idx is None:
        return None
    r = len(data)
    axis = _attr(node, "axis", 0)
    axis = axis + r if axis < 0 else axis
    if not 0 <= axis < r:
        return None
    return tuple(data[:axis]) + tuple(idx) + tuple(data[axis + 1 :])


_UNKNOWN = object()


def _given_axes(node, get):
    """The node's axes as given (attribute, or constant second input; opset 13 moved them): a list, None where
    absent, _UNKNOWN where an input computes them and its value is not known."""
    axes = _attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        v = get(node.input[1])
        if v is None or not v.known:
            return _UNKNOWN
        axes = [int(a) for a in v.elems]
    return axes


def _axes(node, get, r: int):
    """The node's axes (attribute, or constant second input), normalised; None where unknown, [] where absent."""
    axes = _given_axes(node, get)
    if axes is _UNKNOWN:
        return None
    axes = [int(a) + r if int(a) < 0 else int(a) for a in (axes or [])]
    return axes if all(0 <= a < r for a in axes) else None


def _unsqueeze_shape(node, shape_of, get):
    shape = shape_of(node.input[0])
    if shape is None:
        return None
    axes = _attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        v = get(node.input[1])
        axes = None if v is None or not v.known else [int(a) for a in v.elems]
    if not axes:
        return None
    r = len(shape) + len(axes)
    listed = len(axes)
    axes = {int(a) + r if int(a) < 0 else int(a) for a in axes}
    if len(axes) != listed or any(not 0 <= a < r for a in axes):
        return None
    it = iter(shape)
    return tuple(1 if k in axes else next(it) for k in range(r))


def _squeeze_shape(node, shape_of, get):
    shape = shape_of(node.input[0])
    if shape is None:
        return None
    axes = _axes(node, get, len(shape))
    if axes is None or (not axes and any(not isinstance(d, int) for d in shape)):
        return None
    if not axes:
        return tuple(d for d in shape if d != 1)
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def _concat_shape(node, shape_of, get):
    shapes = [shape_of(x) for x in node.input if x]
    if not shapes or any(s is None or len(s) != len(shapes[0]) for s in shapes):
        return None
    r = len(shapes[0])
    axis = _attr(node, "axis", 0)
    axis = axis + r if axis < 0 else axis
    out = []
    for k in range(r):
        ds = [s[k] for s in shapes]
        if k == axis:
            out.append(sum(ds) if all(isinstance(d, int) for d in ds) else None)
        else:
            ints = [d for d in ds if isinstance(d, int)]
            out.append(ints[0] if ints else ds[0])  # all equal in a valid model
    return tuple(out)


def _reduce_shape(node, shape_of, get):
    shape = shape_of(node.input[0])
    if shape is None:
        return None
    axes = _axes(node, get, len(shape))
    if axes is None:
        return None
    if not axes:
        if _attr(node, "noop_with_empty_axes", 0):
            return tuple(shape)
        axes = list(range(len(shape)))
    if _attr(node, "keepdims", 1):
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def _matmul_shape(node, shape_of, get):
    a, b = shape_of(node.input[0]), shape_of(node.input[1])
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return None
    batch = _broadcast_dims([a[:-2], b[:-2]])
    return None if batch is None else (*batch, a[-2], b[-1])


def _gemm_shape(node, shape_of, get):
    a, b = shape_of(node.input[0]), shape_of(node.input[1])
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    m = a[1] if _attr(node, "transA", 0) else a[0]
    n = b[0] if _attr(node, "transB", 0) else b[1]
    return (m, n)


def _reshape_shape(node, shape_of, get):
    dims = _shaped_dims(node, get, shape_of)
    return None if dims is None else tuple(dims)


_UNARY = [
    "Relu",
    "Sqrt",
    "Cast",
    "Softmax",
    "LogSoftmax",
    "Erf",
    "Tanh",
    "Sigmoid",
    "Neg",
    "Abs",
    "Exp",
    "Log",
    "Reciprocal",
    "Not",
    "Identity",
    "LeakyRelu",
    "HardSwish",
    "HardSigmoid",
    "Clip",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Softplus",
    "Gelu",
    "Elu",
    "Selu",
    "Sin",
    "Cos",
    "IsNaN",
    "IsInf",
]
_BINARY = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Where",
    "Max",
    "Min",
    "Mod",
]
_FAST = {
    **dict.fromkeys(_UNARY, _same),
    **dict.fromkeys(_BINARY, _broadcast),
    "Transpose": _transpose_shape,
    "Shape": _shape_shape,
    "Gather": _gather_shape,
    "Unsqueeze": _unsqueeze_shape,
    "Squeeze": _squeeze_shape,
    "Concat": _concat_shape,
    "MatMul": _matmul_shape,
    "Gemm": _gemm_shape,
    "Reshape": _reshape_shape,
    **dict.fromkeys(
        ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1"],
        _reduce_shape,
    ),
}


_SHAPED = ("Reshape", "Expand", "ConstantOfShape", "Slice")


def _standard_ops_without_bodies():
    from surgery.graph import _standard_ops_without_bodies as ops

    return ops()


# -- rules: node -> Value of its first output, or None ----------------------------------------------------------


def _shape(node, get, shape_of):
    shape = shape_of(node.input[0])
    if shape is None:
        return None
    # an unnamed dynamic dim is still one value: named after its tensor and axis, it cancels in a Reshape's -1
    # (Reshape(t, [Shape(t)[0], -1])) as a named one does
    x = node.input[0]
    dims = [d if isinstance(d, int) else (d or f"{x}#{k}") for k, d in enumerate(shape)]
    r = len(dims)
    start, end = _attr(node, "start", 0), _attr(node, "end", r)
    start = min(max(0, start + r if start < 0 else start), r)
    end = min(max(0, end + r if end < 0 else end), r)
    return Value(tuple(dims[start:end]), TensorProto.INT64, False)


def _size(node, get, shape_of):
    shape = shape_of(node.input[0])
    if shape is None or any(not isinstance(d, int) for d in shape):
        return None
    return Value((math.prod(shape),), TensorProto.INT64, True)


def _gather(node, get, shape_of):
    data, idx = get(node.input[0]), get(node.input[1])
    if idx is None or not idx.known or _attr(node, "axis", 0) not in (0, -1):
        return None
    if (
        data is None
    ):  # a 1-D tensor of unknown value (the Shape of a tensor of unknown rank): unknown elements
        shape = shape_of(node.input[0])
        if shape is None or len(shape) != 1 or any(int(k) < 0 for k in idx.elems):
            return None
        return Value((None,) * len(idx.elems), TensorProto.INT64, idx.scalar)
    if data.scalar:
        return None
    n = len(data.elems)
    picked = []
    for k in idx.elems:
        k = int(k)
        if not -n <= k < n:
            return None
        picked.append(data.elems[k])
    return Value(tuple(picked), data.dtype, idx.scalar)


def _slice(node, get, shape_of):
    data = get(node.input[0])
    if data is None or data.scalar:
        return None
    if len(node.input) >= 3:  # opset >= 10: inputs
        params = [get(x) if k < len(node.input) and node.input[k] else None for k, x in enumerate(node.input)]
        starts, ends = params[1], params[2]
        axes = params[3] if len(params) > 3 else None
        steps = params[4] if len(params) > 4 else None
        if starts is None or ends is None or not starts.known or not ends.known:
            return None
        if (len(node.input) > 3 and node.input[3] and (axes is None or not axes.known)) or (
            len(node.input) > 4 and node.input[4] and (steps is None or not steps.known)
        ):
            return None
        s, e = starts.elems, ends.elems
        ax = axes.elems if axes is not None else (0,)
        st = steps.elems if steps is not None else (1,)
    else:
        s, e = _attr(node, "starts"), _attr(node, "ends")
        ax, st = _attr(node, "axes", [0]), (1,)
        if s is None or e is None:
            return None
    if len(s) != 1 or len(e) != 1 or list(ax) not in ([0], [-1]) or len(st) != 1 or int(st[0]) == 0:
        return None
    n = len(data.elems)
    s0, e0, step = int(s[0]), int(e[0]), int(st[0])
    s0, e0 = max(min(s0, 2**62), -(2**62)), max(min(e0, 2**62), -(2**62))
    return Value(tuple(data.elems[slice(s0, e0, step)]), data.dtype, False) if n else None


def _concat(node, get, shape_of):
    if _attr(node, "axis", 0) not in (0, -1):
        return None
    parts = _values(get, node.input)
    if not parts or any(p.scalar for p in parts):
        return None
    return Value(tuple(e for p in parts for e in p.elems), parts[0].dtype, False)


def _unsqueeze(node, get, shape_of):
    v = get(node.input[0])
    if v is None or not v.scalar:
        return None
    axes = _given_axes(node, get)  # a scalar becomes a 1-element vector: axes [0] (or [-1]) only
    if axes is None or axes is _UNKNOWN or list(axes) not in ([0], [-1]):
        return None
    return Value(v.elems, v.dtype, False)


def _squeeze(node, get, shape_of):
    v = get(node.input[0])
    if v is None or v.scalar or len(v.elems) != 1:
        return None
    axes = _given_axes(node, get)  # none given squeezes every 1: the one axis of a 1-element vector
    if axes is _UNKNOWN or (axes is not None and list(axes) not in ([0], [-1])):
        return None
    return Value(v.elems, v.dtype, True)


def _identity(node, get, shape_of):
    return get(node.input[0])


def _reshape(node, get, shape_of):
    v, shape = get(node.input[0]), get(node.input[1])
    if v is None or shape is None or not shape.known:
        return None
    target = [int(x) for x in shape.elems]
    n = len(v.elems)
    if target in ([], [1], [-1], [n], [0]) and (target != [] or n == 1) and (n == 1 or target != [1]):
        return Value(v.elems, v.dtype, target == [])
    return None


def _cast(node, get, shape_of):
    v = get(node.input[0])
    to = _attr(node, "to")
    if v is None or to not in _TRACKED:
        return None
    np_to = helper.tensor_dtype_to_np_dtype(to)
    out = []
    for e in v.elems:
        if _is_num(e):
            if to in INT_TYPES and isinstance(e, float) and not math.isfinite(e):
                return None
            with np.errstate(all="ignore"):
                x = np.array([e], dtype=helper.tensor_dtype_to_np_dtype(v.dtype)).astype(np_to)[0]
            out.append(x.item())
        elif to in INT_TYPES and v.dtype in INT_TYPES and isinstance(e, str):
            out.append(e)  # a dim stays the same dim through an integer cast (dims fit any signed int type)
        else:
            out.append(None)
    return Value(tuple(out), to, v.scalar)


def _elementwise(fn, result_dtype=None):
    def rule(node, get, shape_of):
        vs = _values(get, node.input)
        if not vs:
            return None
        n = max(len(v.elems) for v in vs)
        if any(len(v.elems) not in (1, n) for v in vs):
            return None
        scalar = all(v.scalar for v in vs)
        dtypes = {v.dtype for v in vs if not (result_dtype and v.dtype == TensorProto.BOOL)}
        dtype = vs[-1].dtype if len(dtypes) != 1 else dtypes.pop()
        np_dtypes = [helper.tensor_dtype_to_np_dtype(v.dtype) for v in vs]
        out = []
        for k in range(n):
            es = [v.elems[k if len(v.elems) > 1 else 0] for v in vs]
            if all(_is_num(e) for e in es):
                args = [np.array([e], dtype=d) for e, d in zip(es, np_dtypes)]
                with np.errstate(all="ignore"):
                    r = fn(node, *args)
                if r is None:
                    out.append(None)
                    continue
                out.append(np.asarray(r).reshape(-1)[0].item())
            else:
                out.append(_symbolic(node.op_type, es))
        return Value(tuple(out), result_dtype or dtype, scalar)

    return rule


def _symbolic(op: str, es: list) -> Elem:
    """An element with a symbolic operand: a dim through ops that keep it (x*1, x+0, x/1), a comparison of a
    dim (never negative) with a negative number (Equal(dim, -1): torch's expand sizes), else unknown."""
    if len(es) == 2 and op in ("Equal", "Less", "GreaterOrEqual"):
        a, b = es
        if isinstance(a, str) and _is_num(b) and b < 0:
            return op == "GreaterOrEqual"
        if isinstance(b, str) and _is_num(a) and a < 0:
            return False if op == "Equal" else op == "Less"
        return None
    if op in ("Mul", "Div") and len(es) == 2 and es[1] == 1 and isinstance(es[0], str):
        return es[0]
    if op == "Mul" and len(es) == 2 and es[0] == 1 and isinstance(es[1], str):
        return es[1]
    if op in ("Add", "Sub") and len(es) == 2 and es[1] == 0 and isinstance(es[0], str):
        return es[0]
    return None


def _int_div(node, a, b):
    if a.dtype.kind in "iu":
        if b[0] == 0:
            return None
        q = abs(int(a[0])) // abs(int(b[0]))
        return np.array([q if (a[0] < 0) == (b[0] < 0) else -q], dtype=a.dtype)
    return a / b


def _mod(node, a, b):
    if a.dtype.kind in "iu":
        if b[0] == 0:
            return None
        if _attr(node, "fmod", 0):
            return np.fmod(a, b)
        return np.mod(a, b)
    return np.fmod(a, b) if _attr(node, "fmod", 0) else None


def _where(node, get, shape_of):
    c, x, y = (get(t) for t in node.input[:3])
    if c is None or x is None or y is None:
        return None
    n = max(len(c.elems), len(x.elems), len(y.elems))
    if any(len(v.elems) not in (1, n) for v in (c, x, y)):
        return None
    out = []
    for k in range(n):
        ce, xe, ye = (v.elems[k if len(v.elems) > 1 else 0] for v in (c, x, y))
        out.append(None if not _is_num(ce) else (xe if ce else ye))
    return Value(tuple(out), x.dtype, c.scalar and x.scalar and y.scalar)


def _constant_of_shape(node, get, shape_of):
    shape = get(node.input[0])
    if shape is None or not shape.known or len(shape.elems) > 1:
        return None
    n = int(shape.elems[0]) if shape.elems else 1  # shape []: a scalar
    if not 0 <= n <= MAX_ELEMENTS:
        return None
    t = _attr(node, "value")
    value = numpy_helper.to_array(t).reshape(-1) if t is not None else np.zeros(1, np.float32)
    dtype = t.data_type if t is not None else TensorProto.FLOAT
    if dtype not in _TRACKED or value.size != 1:
        return None
    return Value((value[0].item(),) * n, dtype, not shape.elems)


def _range(node, get, shape_of):
    vs = _values(get, node.input[:3])
    if vs is None or any(not v.known or len(v.elems) != 1 for v in vs):
        return None
    a = [v.array() for v in vs]
    if a[2] == 0:
        return None
    n = max(int(np.ceil((a[1] - a[0]) / a[2])), 0)
    if n > MAX_ELEMENTS:
        return None
    return Value(tuple((a[0] + a[2] * k).item() for k in range(n)), vs[0].dtype, False)


_RULES = {
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Shape": _shape,
    "Size": _size,
    "Gather": _gather,
    "Slice": _slice,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Identity": _identity,
    "Reshape": _reshape,
    "Cast": _cast,
    "Add": _elementwise(lambda n, a, b: a + b),
    "Sub": _elementwise(lambda n, a, b: a - b),
    "Mul": _elementwise(lambda n, a, b: a * b),
    "Div": _elementwise(_int_div),
    "Mod": _elementwise(_mod),
    "Max": _elementwise(lambda n, *xs: np.maximum.reduce(xs)),
    "Min": _elementwise(lambda n, *xs: np.minimum.reduce(xs)),
    "Neg": _elementwise(lambda n, a: -a),
    "Abs": _elementwise(lambda n, a: np.abs(a)),
    "Floor": _elementwise(lambda n, a: np.floor(a)),
    "Ceil": _elementwise(lambda n, a: np.ceil(a)),
    "Sqrt": _elementwise(lambda n, a: np.sqrt(a)),
    "Equal": _elementwise(lambda n, a, b: a == b, TensorProto.BOOL),
    "Less": _elementwise(lambda n, a, b: a < b, TensorProto.BOOL),
    "Greater": _elementwise(lambda n, a, b: a > b, TensorProto.BOOL),
    "LessOrEqual": _elementwise(lambda n, a, b: a <= b, TensorProto.BOOL),
    "GreaterOrEqual": _elementwise(lambda n, a, b: a >= b, TensorProto.BOOL),
    "Not": _elementwise(lambda n, a: ~a, TensorProto.BOOL),
    "Where": _where,
}


# -- output shapes implied by partial values --------------------------------------------------------------------


def _shaped_dims(node, get, shape_of) -> list | None:
    """A Reshape/Expand/ConstantOfShape output's dims from the partial value of its shape input (None where
    that has none)."""
    op = node.op_type
    if op == "Slice":
        return _slice_dims(node, get, shape_of)
    src = node.input[0] if op == "ConstantOfShape" else node.input[1] if len(node.input) > 1 else ""
    target = get(src)
    if target is None or target.scalar or target.dtype not in INT_TYPES:
        return None
    if op == "ConstantOfShape":
        return [e if _is_num(e) and e >= 0 else (e if isinstance(e, str) else None) for e in target.elems]
    if op == "Reshape":
        return _reshape_dims(shape_of(node.input[0]), list(target.elems), _attr(node, "allowzero", 0))
    return _expand_dims(shape_of(node.input[0]), list(target.elems))


def _slice_dims(node, get, shape_of) -> list | None:
    """A Slice output's dims: the axes it does not slice keep the input's dims (onnx's inference gives up on
    every dim when one end is computed), a sliced one is computed where its bounds and the dim are known."""
    shape = shape_of(node.input[0])
    if shape is None or len(node.input) < 3:
        return None
    r = len(shape)
    params = [get(node.input[k]) if k < len(node.input) and node.input[k] else None for k in range(5)]
    starts, ends, axes, steps = params[1], params[2], params[3], params[4]
    if starts is None or ends is None:
        return None
    n = len(starts.elems)
    if len(node.input) > 3 and node.input[3]:
        if axes is None or not axes.known:
            return None
        ax = [int(a) + r if int(a) < 0 else int(a) for a in axes.elems]
    else:
        ax = list(range(n))
    if len(node.input) > 4 and node.input[4]:
        if steps is None or not steps.known:
            return None
        st = [int(x) for x in steps.elems]
    else:
        st = [1] * n
    if len(ax) != n or len(st) != n or len(ends.elems) != n or any(not 0 <= a < r for a in ax):
        return None
    dims = [d if isinstance(d, (int, str)) and d != "" else None for d in shape]
    for a, s0, e0, step in zip(ax, starts.elems, ends.elems, st):
        d = dims[a]
        if not _is_num(s0) or not _is_num(e0) or step == 0:
            dims[a] = None
        elif isinstance(d, int):
            dims[a] = len(range(*slice(int(s0), int(e0), step).indices(d)))
        elif step == 1 and int(s0) == 0 and int(e0) >= 2**31 - 1:
            dims[a] = d  # the whole axis
        else:
            dims[a] = None
    return dims


def _merged(dims, have) -> tuple:
    """`dims`, with what `have` knows where `dims` does not (a static dim over a named one, a name over none)."""
    if have is None or len(have) != len(dims):
        return tuple(dims)
    out = []
    for d, h in zip(dims, have):
        if isinstance(h, int) and not isinstance(d, int) or d is None and isinstance(h, str) and h:
            out.append(h)
        else:
            out.append(d)
    return tuple(out)


def _score(dims) -> int:
    return sum(2 if isinstance(d, int) else 1 if isinstance(d, str) else 0 for d in dims)


def _better(dims, have) -> bool:
    """Whether `dims` (merged with `have`) tells more than `have`; never where they disagree on a rank or a
    static dim (inference is trusted then: nothing changes)."""
    if have is None:
        return True  # a rank is news
    if len(have) != len(dims):
        return False
    for d, h in zip(dims, have):
        if isinstance(d, int) and isinstance(h, int) and d != h:
            return False
    return _score(_merged(dims, have)) > _score(have)


def _reshape_dims(in_shape, target: list, allowzero: int) -> list | None:
    dims: list = []
    minus = None
    for k, e in enumerate(target):
        if e == 0 and not allowzero:
            if in_shape is None or k >= len(in_shape):
                return None
            d = in_shape[k]
            dims.append(d if isinstance(d, (int, str)) and d != "" else None)
        elif e == -1:
            if minus is not None:
                return None
            minus = k
            dims.append(None)
        elif isinstance(e, int) and e < -1:
            return None
        else:
            dims.append(e if isinstance(e, (int, str)) else None)
    if minus is not None:
        dims[minus] = _infer_minus_one(in_shape, [d for k, d in enumerate(dims) if k != minus])
    return dims


def _infer_minus_one(in_shape, others: list) -> int | None:
    """The -1 dim of a Reshape: the input's element count over the other dims', symbolic factors cancelled
    (batch*48*28*28 / (batch*2*28*28) = 24). None where a factor is unknown or does not cancel."""
    if in_shape is None:
        return None
    num, den = 1, 1
    syms: dict[str, int] = {}
    for d in in_shape:
        if isinstance(d, int):
            num *= d
        elif isinstance(d, str) and d:
            syms[d] = syms.get(d, 0) + 1
        else:
            return None
    for d in others:
        if isinstance(d, int):
            den *= d
        elif isinstance(d, str) and syms.get(d):
            syms[d] -= 1
        else:
            return None
    if any(syms.values()) or den == 0 or num % den:
        return None
    return num // den


def _expand_dims(in_shape, target: list) -> list | None:
    if in_shape is None:
        return None
    r = max(len(in_shape), len(target))
    a = [1] * (r - len(in_shape)) + [d if isinstance(d, (int, str)) and d != "" else None for d in in_shape]
    b = [1] * (r - len(target)) + [e if isinstance(e, (int, str)) else None for e in target]
    dims = []
    for x, y in zip(a, b):
        if x == 1:
            dims.append(y)
        elif y == 1 or x == y:
            dims.append(x)
        elif isinstance(x, int) and isinstance(y, int):
            return None  # not broadcastable: leave it to inference
        else:
            dims.append(None)
    return dims


# the ops refine looks at whatever their inputs: those with a value rule or a shape from partial values
_LOOKED_AT = frozenset(_RULES) | frozenset(_SHAPED)
