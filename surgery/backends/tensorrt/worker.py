"""What runs inside the isolated TensorRT process: parse, then re-parse what is left until every node has a
verdict. Plain data in (model bytes), plain data out (dicts), so a crash here never reaches the caller.

The parser reports every static-check error but at most one import-time error, and stops importing at it
(onnx-tensorrt ModelImporter, 10.x). So after each parse the rejected nodes are taken out, the rest is cut into
a model of its own (tensors that now come from outside become graph inputs, typed by shape inference) and
parsed again — the recursive partitioning of Polygraphy's `inspect capability --with-partitioning`.
"""

from __future__ import annotations

import re
from pathlib import Path

from onnx import ModelProto, helper

from surgery.graph import GraphFacts, all_inputs


def import_trt():
    """(module, flavour): full TensorRT where it imports and has a GPU, else TensorRT-RTX."""
    try:
        import tensorrt as trt  # noqa: F401

        logger = trt.Logger(trt.Logger.ERROR)
        trt.Builder(logger)  # fails without a usable GPU
        return trt, "TensorRT"
    except Exception:
        import tensorrt_rtx as trt

        return trt, "TensorRT-RTX"


# Without a GPU, TensorRT-RTX appends a line about CUDA to some messages; it is not about the model.
_NO_GPU_TAIL = re.compile(r"\s*(?:cudaError\s*35|\[checkMacros\.cpp::catchCudaError).*$", re.S)


def clean_words(text: str) -> str:
    """The parser's or builder's text, verbatim but for the no-GPU line TensorRT-RTX appends."""
    return _NO_GPU_TAIL.sub("", text.strip())


def build_error(trt, data: bytes, path: str | None = None) -> str | None:
    """The builder's first error on the parsed model in its words, or None when it builds (no optimization
    profile, default config: what `build` does without options). Used where only the outcome matters
    (recording words, benchmarks); `surgery.backends.build` is the full test build."""
    lines: list[str] = []

    class Collect(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            if severity <= trt.ILogger.Severity.ERROR:
                lines.append(msg)

    logger = Collect()
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not (parser.parse(data, path) if path else parser.parse(data)):
        return "the parser refuses the model"
    engine = builder.build_serialized_network(network, builder.create_builder_config())
    return (
        None if engine is not None else clean_words(lines[0] if lines else "the builder returned no engine")
    )


def parse(trt, logger, data: bytes, path: str | None = None):
    """Parse from memory: (accepted, errors as dicts). `path` only tells the parser where external weights are
    (nothing is read from it)."""
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse(data, path) if path else parser.parse(data)
    errors = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        errors.append(
            {
                "node": e.node(),
                "name": e.node_name(),
                "op": e.node_operator(),
                "code": str(e.code()).split(".")[-1],
                "desc": clean_words(e.desc()),
                "func": e.func(),
            }
        )
    return bool(ok), errors


def _submodel(model: ModelProto, facts: GraphFacts, keep: list[int]) -> ModelProto:
    """The kept nodes as a model: outside tensors become typed graph inputs; loose ends become outputs."""
    graph = model.graph
    nodes = [graph.node[i] for i in keep]
    produced = {o for n in nodes for o in n.output if o}
    inits = {t.name for t in graph.initializer}
    consumed_inside = {x for n in nodes for x in all_inputs(n)}

    inputs = [
        facts.value_info(x)
        for x in dict.fromkeys(consumed_inside)
        if x not in produced and x not in inits and x
    ]
    graph_outputs = {o.name for o in graph.output}
    outputs = [facts.value_info(o) for o in produced if o not in consumed_inside or o in graph_outputs]
    used_inits = [t for t in graph.initializer if t.name in consumed_inside]
    g = helper.make_graph(
        nodes, graph.name, inputs, outputs or [facts.value_info(nodes[-1].output[0])], used_inits
    )
    sub = helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    sub.functions.extend(model.functions)
    return sub


def _verdict(status: str, code: str = "", words: str = "", func: str = "", explanation: str = "") -> dict:
    return {"status": status, "code": code, "words": words, "func": func, "explanation": explanation}


def check(data: bytes, base_dir: str | None = None, max_rounds: int = 64) -> dict:
    """Every node's verdict: {"flavour", "version", "accepted", "verdicts": {index: verdict dict}, "messages":
    [error dicts not tied to a node], "parses"}. A verdict's "words" are the parser's desc, verbatim."""
    trt, flavour = import_trt()
    logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
    if hasattr(trt, "init_libnvinfer_plugins"):
        trt.init_libnvinfer_plugins(logger, "")
    model = ModelProto()
    model.ParseFromString(data)
    facts = GraphFacts.of(model)

    def parse_here(blob: bytes):
        # from memory; with base_dir the parser is told where the model lives, so external weights resolve beside
        # it (nothing is written there)
        return parse(trt, logger, blob, str(Path(base_dir) / "model.onnx") if base_dir else None)

    ok, errors = parse_here(data)
    result = {
        "flavour": flavour,
        "version": trt.__version__,
        "accepted": ok,
        "verdicts": {},
        "messages": [],
        "parses": 1,
    }
    verdicts = result["verdicts"]
    n = len(model.graph.node)
    if ok:
        verdicts.update({i: _verdict("supported") for i in range(n)})
        return result
    remaining = list(facts.order)
    index_map = list(range(n))  # position in the parsed model -> index in the original
    tainted: set[str] = set()  # tensors whose value depends on a rejected node's output of unknown shape
    for round_ in range(max_rounds):
        tied = [e for e in errors if 0 <= e["node"] < len(index_map)]
        untied = [e for e in errors if not (0 <= e["node"] < len(index_map))]
        if round_ == 0:  # later rounds parse what is left once refused nodes are cut out: their untied errors
            result["messages"] += untied  # are artifacts of the cut, not what the parser says of the model
        if not tied:
            last = untied[-1] if untied else None
            for i in remaining:
                verdicts.setdefault(
                    i,
                    _verdict(
                        "unknown",
                        last["code"] if last else "",
                        last["desc"] if last else "",
                        last["func"] if last else "",
                        "not reached: the parser stopped at an error not tied to a node"
                        + ("" if round_ == 0 else ", once the refused nodes were cut out"),
                    ),
                )
            break
        for e in tied:
            i = index_map[e["node"]]
            vague = [x for x in all_inputs(model.graph.node[i]) if x in tainted]
            if vague:  # the node lost its real input to a rejected producer: its verdict is not trustworthy
                verdicts[i] = _verdict(
                    "unknown",
                    e["code"],
                    e["desc"],
                    e["func"],
                    f"fed by a rejected node: input '{vague[0]}' had an unknown shape when the rest of the "
                    "model was parsed without it",
                )
            else:
                verdicts[i] = _verdict("rejected", e["code"], e["desc"], e["func"])
        remaining = [i for i in remaining if i not in verdicts]
        if not remaining:
            break
        sub = _submodel(model, facts, remaining)
        # tensors downstream of an input whose producer was rejected and whose shape inference left unknown
        tainted = {
            vi.name
            for vi in sub.graph.input
            if facts.info(vi.name).is_dynamic and vi.name not in facts.graph_inputs
        }
        for j in remaining:
            if any(x in tainted for x in all_inputs(model.graph.node[j])):
                tainted.update(o for o in model.graph.node[j].output if o)
        ok, errors = parse_here(sub.SerializeToString())
        result["parses"] += 1
        index_map = remaining
        if ok:
            verdicts.update({i: _verdict("supported") for i in remaining})
            break
    return result
