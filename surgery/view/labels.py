"""The words drawn on and beside the graph: tensor labels and shapes on edges, node hover texts, constant values,
a target's verdict line, group labels, and the status a verdict colours a node with."""

from __future__ import annotations

import re
from collections import Counter

from surgery.graph import GraphFacts, TensorInfo
from surgery.verdict import Status, Verdict, said_line, speaker
from surgery.view.groups import constant_nodes


def status_of(verdict: Verdict | None) -> str:
    if verdict is None:
        return "not checked"
    return {Status.SUPPORTED: "supported", Status.REJECTED: "rejected"}.get(verdict.status, "unknown")


def constant_value(facts: GraphFacts, tensor: str, limit: int = 64):
    """The value of `tensor` when it is an initializer or a Constant node's output with at most `limit`
    elements (a numpy array), else None. External data is not read."""
    from onnx import numpy_helper

    t = facts.weights_tensor(tensor)
    if t is None or t.data_location == 1:  # EXTERNAL
        return None
    n = 1
    for d in t.dims:
        n *= d
    if n > limit:
        return None
    try:
        return numpy_helper.to_array(t)
    except Exception:  # an odd encoding: no preview rather than a broken inspector
        return None


def _dim(d) -> str:
    if (
        d is None
        or (isinstance(d, int) and d < 0)
        or (isinstance(d, str) and (not d or d.startswith("unk__")))
    ):
        return "?"
    return str(d)


EDGE_LABEL_CHARS = 36


# the names torch's exporter makes up for a dim it cannot name ("Reshapeoutput_0_dim_2",
# "LayerNormalizationoutput_0_dim_1"): numbered, as inference's unk__3, not chosen by anyone
_EXPORTER_NUMBERED = re.compile(r"[A-Za-z]+output_\d+_dim_\d+")
LONG_NAME_CHARS = 12


def _edge_dim(d) -> str:
    """A dim for "×"-joined text: an expression (symbolic inference's "floor(h/2 - 1/2) + 1") in parentheses,
    so that "16×(floor(h/2 - 1/2) + 1)" cannot be read as "16×floor(…) + 1"; a name the exporter numbered, "?"."""
    if isinstance(d, str) and _EXPORTER_NUMBERED.fullmatch(d):
        return "?"
    text = _dim(d)
    return f"({text})" if isinstance(d, str) and any(c in text for c in " +*/()") else text


def tensor_label(info: TensorInfo) -> str:
    """A tensor's dtype and shape as an edge shows it: "1×3×224×224" for float32, "int64 4" otherwise; "" when
    nothing is known. Dims that inference or the exporter only numbered (unk__0, Addoutput_0_dim_1) or that are
    negative show as "?"; a label longer than EDGE_LABEL_CHARS shows its expression dims as "(…)", then its
    names longer than LONG_NAME_CHARS as "…" (the hover text writes them out)."""
    if info.shape is None:
        return "" if not info.dtype else info.dtype_name.lower()
    parts = [_edge_dim(d) for d in info.shape]
    dims = "×".join(parts) or "scalar"
    if len(dims) > EDGE_LABEL_CHARS:
        parts = ["(…)" if p.startswith("(") else p for p in parts]
        dims = "×".join(parts)
    if len(dims) > EDGE_LABEL_CHARS:
        dims = "×".join("…" if len(p) > LONG_NAME_CHARS else p for p in parts)
    if info.dtype_name in ("FLOAT", "?"):
        return dims
    return f"{info.dtype_name.lower()} {dims}"


def shape_text(info: TensorInfo) -> str:
    """ "[1, 3, ?, ?]": the shape as the hover text shows it ("?" for dims inference only numbered)."""
    return "?" if info.shape is None else "[" + ", ".join(_dim(d) for d in info.shape) + "]"


def _typed(facts: GraphFacts, tensor: str) -> str:
    info = facts.info(tensor)
    weights = " (weights)" if tensor in facts.initializers else ""
    return f"  {tensor}  {info.dtype_name.lower()} {shape_text(info)}{weights}"


def node_info(facts: GraphFacts, i: int) -> str:
    """The hover text of one node before verdicts: op and name, domain, inputs and outputs with dtypes and
    shapes (plain text)."""
    node, key = facts.model.graph.node[i], facts.keys[i]
    lines = [f"{node.op_type}  ·  {node.name or key}", f"domain: {node.domain or 'ai.onnx'}"]
    ins = [x for x in node.input if x]
    if ins:
        lines.append("inputs:")
        lines += [_typed(facts, x) for x in ins]
    lines.append("outputs:")
    lines += [_typed(facts, o) for o in node.output if o]
    return "\n".join(lines)


def verdict_line(label: str, v: Verdict | None, backend: str = "") -> str:
    """One report's verdict on a node in one line: the backend's words quoted, our explanation after `why:`
    (`backend`: the report's backend id, which says whose words they are)."""
    if v is None:
        return f"{label}: no verdict"
    status = "cannot confirm" if v.status == Status.UNKNOWN else v.status.value
    at = f" at {v.stage.value}" if v.status != Status.SUPPORTED else ""
    said = said_line(
        speaker(backend, v.stage),
        v.words,
        v.explanation if v.status != Status.SUPPORTED else "",
        v.words_from,
    )
    return f"{label}: {status}{at}" + (f" — {said}" if said else "")


def constant_label(facts: GraphFacts, node) -> str:
    value = constant_value(facts, node.output[0], limit=4) if node.output else None
    if value is not None:
        if value.ndim == 0:
            text = f"{value.item():.4g}" if value.dtype.kind == "f" else str(value.item())
        else:
            text = (
                "["
                + ", ".join(f"{v:.4g}" if value.dtype.kind == "f" else str(v) for v in value.ravel())
                + "]"
            )
        if len(text) <= 18:
            return text
    info = facts.info(node.output[0]) if node.output else None
    if info is not None and info.shape is not None:
        return "⟨" + "×".join(str(d) for d in info.shape) + "⟩" if info.shape else "scalar"
    return "const"


def is_small(node) -> bool:
    """Constant nodes are drawn as small boxes beside each reader instead of as operators."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def count_text(n: int) -> str:
    return "1 node" if n == 1 else f"{n} nodes"


def group_label(label: str, members: list[int], facts: GraphFacts) -> str:
    """Its name, node count and top op types (of the nodes that compute from the inputs, where there are)."""
    constant = constant_nodes(facts)
    main = [i for i in members if i not in constant] or members
    op_of = facts.ops
    ops = Counter(op_of[i] for i in main)
    top = ", ".join(f"{op} {n}" for op, n in ops.most_common(3))
    name = label if len(label) <= 34 else "…" + label[-33:]
    return f"{name}\n{count_text(len(members))} · {top}"
