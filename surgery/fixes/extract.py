"""Extract the subgraph between tensors: the model that maps `inputs` to `outputs`."""

from __future__ import annotations

from onnx import ModelProto, helper

from surgery.fixes import FixError, Safety, register
from surgery.graph import GraphFacts, all_inputs


def region_between(model: ModelProto, inputs: list[str], outputs: list[str]) -> list[int]:
    """Indices of the nodes that compute `outputs` from `inputs` (and constants)."""
    facts = GraphFacts.of(model, infer=False)
    stop = set(inputs) | set(facts.initializers)
    region, stack, seen = set(), list(outputs), set()
    while stack:
        t = stack.pop()
        if t in seen or t in stop:
            continue
        seen.add(t)
        i = facts.producer.get(t)
        if i is None:
            raise FixError(
                f"tensor '{t}' is reached from outside the region: it is a graph input, not in {inputs}"
            )
        region.add(i)
        stack.extend(x for x in all_inputs(model.graph.node[i]) if x)
    return sorted(region)


@register(
    "extract_subgraph",
    safety=Safety.CHANGES_SEMANTICS,
    summary="Keep only the part of the model between the given tensors (e.g. cut before an unsupported tail).",
    params={
        "inputs": "list of tensor names that become the graph inputs (typed from shape inference)",
        "outputs": "list of tensor names that become the graph outputs; every node needed to compute them "
        "from `inputs` and constants is kept, a path from another graph input is refused",
    },
)
def extract_subgraph(model: ModelProto, inputs: list[str], outputs: list[str]) -> ModelProto:
    facts = GraphFacts.of(model)
    for t in [*inputs, *outputs]:
        if t not in facts.tensors and t not in facts.producer and t not in facts.graph_inputs:
            raise FixError(f"no tensor '{t}' in the model")
    region = region_between(model, inputs, outputs)
    graph = model.graph
    nodes = [graph.node[i] for i in facts.order if i in set(region)]
    used = {x for n in nodes for x in all_inputs(n)}

    g = helper.make_graph(
        nodes,
        graph.name,
        [facts.value_info(t) for t in inputs],
        [facts.value_info(t) for t in outputs],
        [t for t in graph.initializer if t.name in used],
    )
    out = helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    out.functions.extend(model.functions)
    for attr in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(out, attr, getattr(model, attr))
    return out
