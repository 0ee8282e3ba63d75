"""`inspect`: what a model is, without running or reading its weights."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from onnx import TensorProto, helper

from surgery.graph import count_nodes, iter_subgraphs, tensor_info_from_type
from surgery.model import Model, decoded
from surgery.text import size_text

STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training")


def tensor_nbytes(t: TensorProto) -> int:
    """Bytes of a tensor's data from its dims and type (never reads external data)."""
    if t.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        if info.get("length"):
            return int(info["length"])
    n = int(np.prod(t.dims)) if len(t.dims) else 1
    if t.data_type == TensorProto.STRING:
        return sum(len(s) for s in t.string_data)
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except Exception:
        itemsize = 1
    if t.data_type in (TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1):
        return (n + 1) // 2
    return n * itemsize


@dataclass
class IOInfo:
    name: str
    dtype: str
    shape: list[int | str | None] | None
    dynamic: bool


@dataclass
class Inspection:
    source: str
    ir_version: int
    opsets: dict[str, int]
    producer: str
    graph_name: str
    nodes: int
    nodes_main_graph: int
    subgraphs: int
    functions: list[str]
    op_histogram: dict[str, int]
    domains: dict[str, int]
    custom_ops: list[str]
    inputs: list[IOInfo]
    outputs: list[IOInfo]
    initializers: int
    initializer_bytes: int
    external_files: list[dict[str, Any]] = field(default_factory=list)
    file_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _io(vi) -> IOInfo:
    info = tensor_info_from_type(vi.name, vi.type)
    if not vi.type.HasField("tensor_type"):
        kind = vi.type.WhichOneof("value") or "?"
        return IOInfo(vi.name, kind.replace("_type", ""), None, True)
    return IOInfo(vi.name, info.dtype_name, None if info.shape is None else list(info.shape), info.is_dynamic)


def inspect_model(model: Model) -> Inspection:
    proto = model.proto
    g = proto.graph
    ops: Counter[str] = Counter()
    domains: Counter[str] = Counter()
    custom: set[str] = set()
    graphs = [g, *(s.graph for s in iter_subgraphs(g))]
    for graph in graphs:
        for n in graph.node:
            d, op = decoded(n.domain or ""), decoded(n.op_type)  # text even where the file's is not UTF-8
            ops[f"{d}::{op}" if d not in ("", "ai.onnx") else op] += 1
            domains[d or "ai.onnx"] += 1
            if d not in STANDARD_DOMAINS:
                custom.add(f"{d}::{op}")
    inits = [t for graph in graphs for t in graph.initializer]
    init_names = {t.name for t in g.initializer}
    return Inspection(
        source=model.source,
        ir_version=proto.ir_version,
        opsets={(o.domain or "ai.onnx"): o.version for o in proto.opset_import},
        producer=" ".join(x for x in (proto.producer_name, proto.producer_version) if x),
        graph_name=g.name,
        nodes=count_nodes(proto),
        nodes_main_graph=len(g.node),
        subgraphs=len(graphs) - 1,
        functions=[f"{f.domain}::{f.name}" for f in proto.functions],
        op_histogram=dict(ops.most_common()),
        domains=dict(domains.most_common()),
        custom_ops=sorted(custom),
        inputs=[_io(vi) for vi in g.input if vi.name not in init_names],
        outputs=[_io(vi) for vi in g.output],
        initializers=len(inits),
        initializer_bytes=sum(tensor_nbytes(t) for t in inits),
        external_files=[
            {"location": f.location, "bytes": f.size, "tensors": len(f.tensors)} for f in model.external
        ],
        file_bytes=model.file_bytes,
    )


def _fmt_shape(io: IOInfo) -> str:
    if io.shape is None:
        return "?"
    return "[" + ", ".join("?" if d is None else str(d) for d in io.shape) + "]"


def format_inspection(r: Inspection, top: int = 15) -> str:
    lines = [
        f"model      {r.source}",
        f"ir         {r.ir_version}   opsets: " + ", ".join(f"{d} {v}" for d, v in r.opsets.items()),
        f"producer   {r.producer or '-'}   graph: {r.graph_name or '-'}",
        f"nodes      {r.nodes} ({r.nodes_main_graph} in the main graph, {r.subgraphs} subgraphs"
        + (f", {len(r.functions)} local functions" if r.functions else "")
        + ")",
        f"weights    {r.initializers} initializers, {size_text(r.initializer_bytes)}"
        + (f"   file: {size_text(r.file_bytes)}" if r.file_bytes else ""),
    ]
    for f in r.external_files:
        lines.append(f"external   {f['location']}: {size_text(f['bytes'])}, {f['tensors']} tensors")
    if r.custom_ops:
        lines.append("custom ops " + ", ".join(r.custom_ops))
    lines.append("domains    " + ", ".join(f"{d} ({n})" for d, n in r.domains.items()))
    lines.append("inputs")
    for io in r.inputs:
        lines.append(f"  {io.name}: {io.dtype} {_fmt_shape(io)}" + ("  (dynamic)" if io.dynamic else ""))
    lines.append("outputs")
    for io in r.outputs:
        lines.append(f"  {io.name}: {io.dtype} {_fmt_shape(io)}" + ("  (dynamic)" if io.dynamic else ""))
    lines.append("ops")
    items = list(r.op_histogram.items())
    for op, n in items[:top]:
        lines.append(f"  {n:6d}  {op}")
    if len(items) > top:
        lines.append(f"  ... {len(items) - top} more op types")
    return "\n".join(lines)
