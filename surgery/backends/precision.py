"""Lower a model's float32 math to float16 or bfloat16 in the graph itself — how strongly typed builders
(TensorRT 11, TensorRT-RTX) are given reduced precision. Graph inputs and outputs stay float32, with Casts at
the boundary; inputs whose type ONNX fixes to float32 (Resize/Upsample scales) keep it."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

KEEP_FLOAT32 = {("Resize", 1), ("Resize", 2), ("Upsample", 1)}
TARGETS = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}


def _lower(t: TensorProto, to: int) -> TensorProto:
    a = numpy_helper.to_array(t)
    if to == TensorProto.FLOAT16:
        return numpy_helper.from_array(a.astype(np.float16), t.name)
    lowered = helper.make_tensor(
        t.name, TensorProto.BFLOAT16, a.shape, a.astype(np.float32).reshape(-1).tolist()
    )
    return lowered


def lower_precision(model: ModelProto, precision: str, base_dir=None) -> ModelProto:
    """A copy of `model` computing in `precision` ("fp16" | "bf16"). External weights are read from `base_dir`
    and the lowered ones are kept in the copy itself."""
    to = TARGETS[precision]
    out = ModelProto()
    out.CopyFrom(model)
    if base_dir is not None:
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(out, str(base_dir))
    g = out.graph
    keep = {n.input[k] for n in g.node for (op, k) in KEEP_FLOAT32 if n.op_type == op and len(n.input) > k}
    for k, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT and t.name not in keep:
            g.initializer[k].CopyFrom(_lower(t, to))
    for n in g.node:
        if n.op_type in ("Constant", "ConstantOfShape") and n.output[0] not in keep:
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                    a.t.CopyFrom(_lower(a.t, to))
        if n.op_type == "Cast" and n.output[0] not in keep:
            for a in n.attribute:
                if a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = to
    inits = {t.name for t in g.initializer}
    casts = []
    for vi in g.input:
        if vi.name not in inits and vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            low = f"{vi.name}__{precision}"
            for n in g.node:
                for k, x in enumerate(n.input):
                    if x == vi.name:
                        n.input[k] = low
            casts.append(helper.make_node("Cast", [vi.name], [low], name=f"{low}/Cast", to=to))
    tail = []
    for vo in g.output:
        if vo.type.tensor_type.elem_type == TensorProto.FLOAT:
            low = f"{vo.name}__{precision}"
            for n in g.node:
                for k, x in enumerate(n.output):
                    if x == vo.name:
                        n.output[k] = low
                for k, x in enumerate(n.input):
                    if x == vo.name:
                        n.input[k] = low
            tail.append(
                helper.make_node("Cast", [low], [vo.name], name=f"{vo.name}/Cast_fp32", to=TensorProto.FLOAT)
            )
    nodes = casts + list(g.node) + tail
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]  # types changed: let the builder infer them again
    return out
