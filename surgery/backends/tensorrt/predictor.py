"""Predicted TensorRT parser verdicts for a chosen TensorRT version (`tensorrt-static@VERSION`), from the
versioned, cited records of surgery.backends.tensorrt.records and the tests of .predicates. Parsers from 9.3
run static checkers that report every problem of a node; importers stop at their first problem."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto

from surgery.backends.base import (
    Availability,
    BuildOptions,
    BuildReport,
    Evidence,
    Message,
    Report,
    Stage,
    Status,
    Verdict,
)
from surgery.backends.tensorrt.predicates import (
    TESTS,
    attr,
    build_time_constant,
    dtype_of,
    input_at,
    int64_out_of_int32,
    parser_node_name,
    shape_tensor_reader,
)
from surgery.backends.tensorrt.records import (
    LOCAL_FUNCTIONS_SINCE,
    N_WITHOUT_CHECKER,
    UINT8_OK_OPS,
    UINT8_OUTPUT_OK_OPS,
    Check,
    fill_words,
    load_checks,
    plugin_history,
    removed_after,
    resolve_version,
    shipped,
    standard_plugin,
    version_facts,
    version_table,
    version_tuple,
    words_need,
)
from surgery.graph import BODY_OPS, GraphFacts, cycle_nodes, opset_of

ML_DOMAIN = "ai.onnx.ml"
ELEMENTWISE = {
    "Add": "SUM",
    "Sub": "SUB",
    "Mul": "PROD",
    "Div": "DIV",
    "Max": "MAX",
    "Min": "MIN",
    "Pow": "POW",
    "Greater": "GREATER",
    "Less": "LESS",
}
STATIC_FUNCS = ("check", "emptyOutputChecker", "poolingCheckHelper")
# ops whose table restriction on a constant input has a dedicated check of its own in checks.yaml
DEDICATED_CONST = {"TopK", "Clip", "Conv", "ConvTranspose", "Dropout", "Resize", "Upsample"}


# -- the predictor ---------------------------------------------------------------------------------------------


@dataclass
class Problem:
    """A check that failed on a node, with the values its words and explanation are filled with."""

    check: Check
    values: dict


def _schema_inputs(op: str, opset: int, domain: str = "") -> list[str]:
    try:
        return [i.name for i in onnx.defs.get_schema(op, opset, domain).inputs]
    except Exception:  # no schema: no named inputs
        return []


class TensorRTStaticBackend:
    default_depth = Stage.PARSE
    builds_in_check = False  # build-stage checks are predicted by check() itself

    def __init__(self, version: str):
        self.version = resolve_version(version)
        self.id = f"tensorrt-static@{version}"
        self.table = version_table(self.version)
        self.label = f"TensorRT {version} (predicted)"
        self.static_checkers = version_tuple(self.version) >= version_tuple(
            version_facts()["static_checkers_since"]["version"]
        )
        self.types = set(self.table["data_types"])
        self.checks = [c for c in load_checks() if c.applies(self.version)]
        self._by_id = {c.id: c for c in self.checks}
        self._imports_local_functions = version_tuple(self.version) >= version_tuple(LOCAL_FUNCTIONS_SINCE)
        self._node_checks: dict[tuple[bool, str], list] = {}

    def _checks_for(self, static: bool, op_type: str) -> list:
        """The per-node checks (static checkers or importer checks) that look at `op_type`, in checks.yaml's
        order: chosen once per op type, not for every node (at 50k nodes, 3.3M tests of the same facts)."""
        key = (static, op_type)
        found = self._node_checks.get(key)
        if found is None:
            found = self._node_checks[key] = [
                c
                for c in self.checks
                if c.test not in ("table", "model")
                and c.func.startswith(STATIC_FUNCS) is static
                and (not c.ops or op_type in c.ops)
            ]
        return found

    def availability(self) -> Availability:
        note = f"; {self.table['note']}" if self.table["note"] else ""
        return Availability(True, f"support table {self.table['source']}{note}")

    def _evidence(self, extra: str = "") -> Evidence:
        return Evidence("support table", f"{self.table['source']} @ TensorRT {self.version}" + extra)

    def _problem(self, check_id: str, node: NodeProto, **values) -> Problem | None:
        check = self._by_id.get(check_id)
        return None if check is None else Problem(check, values)

    # -- the op is not in the table, or is listed N ----------------------------------------------------------------

    def _plugin_of(self, node: NodeProto) -> dict | None:
        """The standard plugin creator of this version that the fallback importer finds for the node."""
        version, namespace = attr(node, "plugin_version", "1"), attr(node, "plugin_namespace", "")
        return standard_plugin(node.op_type, str(version), str(namespace), self.version)

    def _fallback(self, node: NodeProto) -> Problem | None:
        """None when a standard plugin of this version imports the node, else the fallback's refusal (saying
        when the plugin of that name was removed, or which versions of it this TensorRT ships)."""
        if self._plugin_of(node) is not None:
            return None
        check_id = "plugin-fallback" if self.static_checkers else "plugin-fallback-importer"
        problem = self._problem(check_id, node)
        if problem is None:
            return None
        gone = removed_after(node.op_type, self.version)
        here = [e["version"] for e in plugin_history(node.op_type) if shipped(e, self.version)]
        if gone:
            last, e = gone
            problem.values["note"] = (
                f"the standard plugin {e['name']} (version {e['version']}, {e['interface']}) was removed from "
                f"TensorRT's plugin library after {last}; {e['source']}"
            )
        elif here:
            asked = attr(node, "plugin_version", "1")
            problem.values["note"] = (
                f"TensorRT {self.version} ships {node.op_type} as plugin version {', '.join(here)}, and the node asks "
                f'for version {asked} (its plugin_version attribute, default "1")'
            )
        return problem

    def _table_problem(self, node: NodeProto) -> Problem | None:
        domain = node.domain or ""
        ops = self.table["ops"]
        # the importer map is keyed by op type alone: a standard op name in another domain is imported as the
        # standard op (checked with TensorRT-RTX 1.7.1: com.example::Relu parses); ai.onnx.ml ops have no importer
        if domain == ML_DOMAIN or node.op_type not in ops:
            return self._fallback(node)
        if not ops[node.op_type]["supported"]:
            if self.static_checkers and node.op_type not in N_WITHOUT_CHECKER:
                return self._problem("table-unsupported", node)
            return self._fallback(node)
        return None

    def _local_function(self, node: NodeProto, facts: GraphFacts) -> onnx.FunctionProto | None:
        """The model-local function this node calls, when this version imports it through its body."""
        if not self._imports_local_functions:
            return None
        return facts.functions.get((node.domain or "", node.op_type))

    def _body_problem(
        self, node: NodeProto, facts: GraphFacts | None = None
    ) -> tuple[list[Problem], NodeProto] | None:
        """The parser imports If/Loop/Scan bodies, and local functions' bodies, with the same importers and the
        same checks: the first body node it refuses refuses the node (with every problem of that body node, and
        the body node at fault, deepest first). A body reads the outer scope: an outer initializer or Constant is
        a weight there too, and a local function's formal input is what the caller passes."""
        from surgery.graph import bodies, function_facts, scope_facts

        scopes = []
        function = self._local_function(node, facts) if facts is not None else None
        if function is not None:
            scopes.append(function_facts(facts, function, call=node))
        for name, body in bodies(node):
            if facts is None:
                scopes.append((name, body))
                continue
            index = next((i for i, n in enumerate(facts.model.graph.node) if n is node), None)
            if index is not None:
                from surgery.graph import body_facts

                scopes.append(body_facts(facts, index, name))
            else:
                scopes.append(scope_facts(facts, body, path=f"{name}/"))
        for scope in scopes:
            if isinstance(scope, tuple):  # no facts to check against: importers only
                for n in scope[1].node:
                    found = self._table_problem(n)
                    if found:
                        return [found], n
                    deeper = self._body_problem(n) if n.op_type in BODY_OPS else None
                    if deeper:
                        return deeper
                continue
            for i in scope.order:
                n = scope.model.graph.node[i]
                problems, inner = self._problems(n, scope)
                if problems:
                    return problems, inner if inner is not None else n
        return None

    # -- types and constant inputs the table asks for ---------------------------------------------------------

    def _types(self, node: NodeProto, facts: GraphFacts, row: dict) -> Problem | None:
        """Data types the parser refuses on this node: Cast targets, UINT8 inputs and intermediates."""
        if node.op_type == "Cast":
            to = TensorProto.DataType.Name(attr(node, "to", 0))
            if to not in self.types:
                check_id = (
                    "cast-unsupported-type" if self.static_checkers else "cast-unsupported-type-importer"
                )
                return self._problem(check_id, node, to=to)
        if "UINT8" not in self.types:
            return None
        uint8_in = [x for x in node.input if x and dtype_of(facts, x) == "UINT8"]
        if uint8_in and node.op_type not in UINT8_OK_OPS and "UINT8" not in row.get("types", ""):
            if node.op_type in ELEMENTWISE and "uint8-elementwise" in self._by_id:
                return self._problem(
                    "uint8-elementwise", node, input=uint8_in[0], operation=ELEMENTWISE[node.op_type]
                )
            return self._problem("uint8-input", node, input=uint8_in[0])
        out8 = [
            o for o in node.output if o and dtype_of(facts, o) == "UINT8" and o not in facts.graph_outputs
        ]
        if out8 and node.op_type not in UINT8_OUTPUT_OK_OPS:
            return self._problem("uint8-intermediate", node, output=out8[0])
        return None

    def _const_input(self, node: NodeProto, facts: GraphFacts, row: dict) -> Problem | None:
        """A table restriction '`x` must be an initializer / build-time constant' that the node breaks."""
        if not row.get("const_inputs") or node.op_type in DEDICATED_CONST:
            return None
        names = _schema_inputs(node.op_type, opset_of(facts.model) or 13)
        family = [c for c in load_checks() if c.id.startswith("const-input-") and node.op_type in c.ops]
        for rule in row["const_inputs"]:
            if rule["input"] not in names:
                continue  # an attribute in this opset (e.g. Reduce axes before opset 18)
            x = input_at(node, names.index(rule["input"]))
            if not x:
                continue
            applying = [c for c in family if c.applies(self.version)]
            strict = rule["kind"] == "initializer" and (
                version_tuple(self.version)
                < version_tuple(version_facts()["initializer_inputs_strict_before"]["version"])
                or any(c.args.get("strict") for c in applying)
            )
            if facts.is_weights(x) if strict else build_time_constant(facts, x):
                continue
            values = {
                "input": x,
                "table_text": rule["text"],
                "detail": f"input '{x}' is computed at run time",
            }
            if applying:
                return Problem(applying[0], values)
            if family and version_tuple(self.version) > max(version_tuple(c.until) for c in family):
                continue  # newer than every version known to refuse it (CumSum: TensorRT-RTX takes a computed axis)
            return self._problem("const-input", node, **values)
        return None

    # -- one node ----------------------------------------------------------------------------------------------

    def _problems(self, node: NodeProto, facts: GraphFacts) -> tuple[list[Problem], NodeProto | None]:
        """What the parser of this version refuses on the node (the first importer problem, every static one),
        and the body node at fault when it is inside an If/Loop/Scan body."""
        if self._local_function(node, facts) is not None:
            inner = self._body_problem(node, facts)
            return inner if inner else ([], None)
        found = self._table_problem(node)
        if found:
            return [found], None
        if node.op_type not in self.table["ops"] or (node.domain or "") == ML_DOMAIN:
            return [], None  # a standard plugin of this version imports it
        if node.op_type in BODY_OPS:
            inner = self._body_problem(node, facts)
            if inner:
                return inner
        row = self.table["ops"][node.op_type]
        for static in (True, False):
            broken = []  # static checkers report every problem of a node; an importer stops at its first
            for c in self._checks_for(static, node.op_type):
                values = TESTS[c.test](node, facts, **c.args)
                if values:
                    broken.append(Problem(c, values))
                    if not static:
                        break
            if broken:
                return broken, None
            found = self._types(node, facts, row) if static else self._const_input(node, facts, row)
            if found:
                return [found], None
        return [], None

    def _verdict(
        self, index: int, key: str, node: NodeProto, facts: GraphFacts, depth: Stage, report
    ) -> Verdict:
        problems, inner = self._problems(node, facts)
        deferred = [p for p in problems if p.check.stage == "build" and depth is Stage.PARSE]
        problems = [p for p in problems if p not in deferred]
        for p in deferred:  # the parser accepts; the builder will refuse: say so without refusing at parse
            words, source, explanation = self._texts(p, node, inner)
            report.messages.append(
                Message(
                    "warning",
                    words=words,
                    explanation=f"{node.op_type} '{key}': {explanation} (check with --depth build)",
                    code=p.check.code,
                    stage=Stage.BUILD,
                    words_from=source,
                )
            )
        if not problems:
            note = ""
            plugin = self._plugin_of(node) if node.op_type not in self.table["ops"] else None
            if plugin is not None:
                first, last = plugin["shipped"][0], plugin["shipped"][-1]
                note = (
                    f"imported by the standard plugin {plugin['name']} version {plugin['version']} "
                    f"({plugin['interface']}; shipped in TensorRT {first} to {last}; {plugin['source']})"
                )
            if (
                version_tuple(self.version)
                < version_tuple(version_facts()["int64_slice_clamped_before"]["version"])
                and node.op_type == "Slice"
                and any(int64_out_of_int32(facts, node))
            ):
                note = (
                    "INT64 bounds beyond INT32 are clamped to INT32 when cast down, which does not change a "
                    "Slice's result (the parser only warns)"
                )
            return Verdict(
                key, index, node.op_type, Status.SUPPORTED, explanation=note, evidence=self._evidence()
            )
        texts = [self._texts(p, node, inner) for p in problems]
        first = problems[0].check
        words = "\n".join(dict.fromkeys(w for w, _, _ in texts if w))
        sources = list(dict.fromkeys(s for w, s, _ in texts if w))
        return Verdict(
            key,
            index,
            node.op_type,
            Status.REJECTED,
            first.code,
            words=words,
            explanation="; ".join(dict.fromkeys(e for _, _, e in texts)),
            stage=Stage(first.stage),
            evidence=self._evidence("; " + "; ".join(dict.fromkeys(p.check.source for p in problems))),
            words_from="; ".join(sources),
            checks=tuple(dict.fromkeys(p.check.id for p in problems)),
            inputs=tuple(dict.fromkeys(x for p in problems if isinstance(x := p.values.get("input"), str))),
        )

    def _texts(self, problem: Problem, node: NodeProto, inner: NodeProto | None) -> tuple[str, str, str]:
        """(the parser's words or '', where they come from, our explanation) for a problem on `node`."""
        at = inner if inner is not None else node
        values = {
            "node": parser_node_name(at),
            "op": at.op_type,
            "lower": at.op_type.lower(),
            "domain": f"{at.domain}::" if at.domain not in ("", "ai.onnx") else "",
            "version": self.version,
            "detail": "",
            **problem.values,
        }
        explanation = fill_words(problem.check.explanation, values, strict=False)
        if problem.values.get("note"):
            explanation += f" ({problem.values['note']})"
        if inner is not None:
            explanation = f"in its body, {inner.op_type} '{parser_node_name(inner)}': {explanation}"
        w = problem.check.words_for(self.version)
        words = fill_words(w.template, values, strict=True) if w else ""
        if w and not words:
            missing = sorted(words_need(w.template) - set(values))
            explanation += f" (the parser's words need {', '.join(missing)}, not known here)"
        return words, (w.source if words else ""), explanation

    # -- the model ---------------------------------------------------------------------------------------------

    def _model_level(self, model: ModelProto, facts: GraphFacts, depth: Stage) -> list[Message]:
        out = []
        opset = opset_of(model) or 0
        if opset > self.table["max_opset"]:
            out.append(
                Message(
                    "warning",
                    explanation=f"the model uses opset {opset}; the TensorRT {self.version} table covers opsets "
                    f"{self.table['min_opset']}–{self.table['max_opset']} (newer op versions may not import; the "
                    "parser itself does not refuse the opset number)",
                )
            )
        kinds = {vi.name: vi.type.WhichOneof("value") for vi in model.graph.input}
        needs_profile = []
        for x in facts.graph_inputs:
            info = facts.info(x)
            if kinds.get(x) == "tensor_type" and info.shape is not None and info.is_dynamic:
                needs_profile.append((x, f"has dynamic dims {info.shape_str()}"))
            elif dtype_of(facts, x) in ("INT32", "INT64") and (reader := shape_tensor_reader(facts, x)):
                needs_profile.append((x, f"is a shape tensor (read as a shape by {reader.op_type})"))
        if needs_profile and depth is not Stage.PARSE:
            x, why = needs_profile[0]
            out.append(self._message("dynamic-input-without-profile", Stage.BUILD, input=x, why=why))
        cyclic = cycle_nodes(facts)
        if cyclic:
            out.append(self._message("graph-cycle", Stage.PARSE, node=facts.keys[cyclic[0]]))
        for t in model.graph.initializer:
            if t.data_type in (TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1):
                count = int(np.prod(t.dims)) if t.dims else 1
                if count % 2:
                    out.append(
                        self._message("four-bit-odd-initializer", Stage.PARSE, input=t.name, count=count)
                    )
        for x in facts.graph_inputs:
            info, dtype = facts.info(x), dtype_of(facts, x)
            kind = kinds.get(x)
            if kind != "tensor_type":
                out.append(
                    self._message(
                        "input-dtype", Stage.PARSE, input=x, dtype=f"a {kind.removesuffix('_type')}"
                    )
                )
                continue
            if info.shape is None:
                out.append(
                    Message(
                        "warning",
                        explanation=f"graph input '{x}' has no shape: TensorRT imports it as a scalar (rank 0), "
                        "so nodes that need a rank fail (TensorRT-RTX 1.7.1)",
                    )
                )
            elif dtype and dtype not in self.types:
                out.append(self._message("input-dtype", Stage.PARSE, input=x, dtype=dtype))
        return [m for m in out if m is not None]

    def _message(self, check_id: str, stage: Stage, **values) -> Message | None:
        """A model-level error of a check record, in the parser's words where they are known."""
        check = self._by_id.get(check_id)
        if check is None:
            return None
        values = {"version": self.version, **values}
        w = check.words_for(self.version)
        words = fill_words(w.template, values, strict=True) if w else ""
        return Message(
            "error",
            words=words,
            explanation=fill_words(check.explanation, values, strict=False),
            code=check.code,
            stage=stage,
            words_from=w.source if w and words else "",
        )

    def check(self, model: ModelProto, base_dir: str | None = None, depth: Stage = Stage.PARSE) -> Report:
        t0 = time.perf_counter()
        facts = GraphFacts.of(model)
        report = Report(self.id, self.label, self.version, depth=Stage(depth))
        report.messages = self._model_level(model, facts, Stage(depth))
        for i, (key, node) in enumerate(zip(facts.keys, model.graph.node)):
            report.verdicts.append(self._verdict(i, key, node, facts, Stage(depth), report))
        report.accepted = not report.rejected and not report.errors
        report.seconds = time.perf_counter() - t0
        return report

    def build(self, model: ModelProto, options: BuildOptions, progress=None, base_dir=None) -> BuildReport:
        return BuildReport(
            self.id, False, error="a predicted target cannot build; use the `tensorrt` backend"
        )


def make(version: str) -> TensorRTStaticBackend:
    return TensorRTStaticBackend(version)
