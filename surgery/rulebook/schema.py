"""What a rule file may say. A rule is data: a match, a fix primitive with parameters, a safety class and its
documentation. Validation errors name the file, the line and the field."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from surgery.text import first_line

SAFETY = ("exact", "approximate", "changes-semantics")
TARGETS = ("tensorrt", "tensorrt-static", "onnxruntime", "openvino", "tvm")
TOP_FIELDS = {
    "id": "a short kebab-case name, unique",
    "title": "one line",
    "why": "which backend rejects what, in its words",
    "what": "what the rule does",
    "targets": "target -> version spec ('*', '<=8.2', '>=8.6,<10')",
    "answers": "the verdicts it repairs: predictor check ids (resize-scales-initializer) or backend error codes "
    "(UNSUPPORTED_NODE, CONVERSION); `check` suggests the rule for a refused node only when the verdict is one of "
    "these and the rule's match accepts the node",
    "also_fixes": "op types that feed the matched node and that its fix removes or repairs with it (the "
    "DynamicQuantizeLinear before a ConvInteger, the QuantizeLinear before a DequantizeLinear): a refused node of one "
    "of these types is shown the rule, to apply at its reader; the rule's own test checks that, on its example, "
    "those nodes are gone or no longer refused after the fix",
    "match": "the pattern: op, domain, attrs, inputs, any_input, outputs_are_graph_outputs",
    "fix": "primitive and params",
    "safety": "exact | approximate | changes-semantics",
    "safety_note": "why the fix has that safety class",
    "bound": "an approximate rule's promise (required there, nowhere else): on every output, the max absolute error "
    "stays within this fraction of the output's range (0.02 = 2%), verified on seeded inputs; a step beyond it is "
    "rolled back with its numbers",
    "example": "the fixture: model (a sample's name) or graph (ONNX text), node, values, near_miss, before, after",
    "references": "list of sources",
}
MATCH_FIELDS = {
    "op": "op type, or a list of op types; '*' for any op (with other conditions)",
    "domain": "the node's domain ('' or ai.onnx for standard ops; a rule without it matches standard ops only)",
    "attrs": "attribute name -> conditions (eq, ne, in, missing, present)",
    "inputs": "input index -> conditions on that input (below)",
    "any_input": "conditions that at least one input meets",
    "outputs_are_graph_outputs": "true: every output of the node is a graph output",
    "local_function": "true: the node calls a model-local function (its op type and domain name one)",
    "any_output_read": "a list of output indices: at least one of them exists and is read (by a node or as a "
    "graph output)",
}
INPUT_CONDITIONS = {
    "missing": "the input is absent (an empty name or fewer inputs)",
    "constant": "computed only from constants (initializers, Constant nodes)",
    "foldable": "computable at build time: constants and Shape of statically shaped tensors",
    "initializer": "is an initializer",
    "weights": "is what TensorRT calls weights: an initializer or a Constant node's output",
    "graph_input": "is a graph input",
    "dtype": "its element type, e.g. FLOAT, INT64",
    "rank": "its rank, or a list of ranks",
    "rank_known": "its rank is known (shape inference or the model says so)",
    "dynamic": "some dim is symbolic or unknown",
    "produced_by": "producer chain: [Concat, [Constant, Cast]] = made by a Concat fed by a Constant and a Cast",
    "int64_out_of_int32": "an INT64 initializer holding values outside the INT32 range",
    "readers": "every node reading it is one of these op types",
    "producer_not": "it is not made by a node of these op types (e.g. DequantizeLinear: QDQ weights stay)",
    "position": "(in any_input) the input's position is one of these, e.g. [1, 2, 3] to leave the data input out",
}
ATTR_CONDITIONS = {
    "eq": "equals the value",
    "ne": "differs from the value (an absent attribute differs)",
    "in": "is one of a list of values",
    "not_in": "is none of a list of values (an absent attribute is none of them: add present: true)",
    "missing": "true: the attribute is absent",
    "present": "true: the attribute is set",
}
FIX_FIELDS = {
    "primitive": "a fix primitive id (surgery.fixes)",
    "params": "its parameters; strings may reference the match: $node, $input[i], $output[i], $inputs, "
    "$graph_inputs, $any_input (the input that met any_input), $<attribute> (passed on: plugin_swap copies "
    "that attribute), $ask:<what> (a value the user gives)",
    "verify_dims": "size given to symbolic dims when the fix is verified (default 1)",
}
EXAMPLE_FIELDS = {
    "model": "name of a sample model (sample_models/<name>.onnx) the rule fixes",
    "graph": "or: a small failing model in ONNX text syntax (onnx.parser), with an ir_version",
    "node": "the node (key) the rule fires on",
    "values": "values a $ask: parameter needs, e.g. {shape: [1, 3, 32, 32]}",
    "near_miss": "a model in ONNX text syntax the rule must stay quiet on",
    "before": "the failing pattern, in words",
    "after": "what the fix makes of it, in words",
}


class RuleError(ValueError):
    """A rule file that cannot be used: `str()` names the file, the line and the field."""


@dataclass
class Rule:
    id: str
    title: str
    why: str
    what: str
    targets: dict[str, str]
    match: dict[str, Any]
    fix: dict[str, Any]
    safety: str
    safety_note: str = ""
    bound: float | None = None  # approximate rules: max abs error as a fraction of each output's range
    example: dict[str, Any] = field(default_factory=dict)
    references: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    also_fixes: list[str] = field(default_factory=list)
    path: str = ""

    def answers_verdict(self, verdict) -> bool:
        """Whether this rule is meant for that refusal: its check ids or its code (no `answers`: any)."""
        if not self.answers:
            return True
        return bool(set(self.answers) & ({verdict.code, *verdict.checks} - {""}))

    @property
    def primitive(self) -> str:
        return self.fix["primitive"]

    @property
    def verify_dims(self) -> int | None:
        return self.fix.get("verify_dims")

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.fix.get("params") or {})

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in TOP_FIELDS if getattr(self, k, None) not in (None, "", [], {})}
        return d


def validate(data: Any, where) -> Rule:
    """`where(path) -> "file:line"` locates a field for messages."""

    def fail(path: str, msg: str):
        raise RuleError(f"{where(path)}: field '{path}': {msg}")

    if not isinstance(data, dict):
        fail("", "a rule file must be a mapping of fields")
    for key in data:
        if key not in TOP_FIELDS:
            fail(str(key), f"unknown field. Note: fields are {', '.join(TOP_FIELDS)}")
    for key in ("id", "title", "why", "what", "match", "fix", "safety"):
        if key not in data:
            fail(key, "missing (required)")
    for key in ("id", "title", "why", "what"):
        if isinstance(data[key], bool):
            fail(key, "must be a non-empty string (YAML reads on/off/yes/no as true/false: quote it)")
        if not isinstance(data[key], str) or not data[key].strip():
            fail(key, "must be a non-empty string")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", data["id"]):
        fail(
            "id",
            f"'{data['id']}' is not kebab-case (lowercase letters, digits and '-'), e.g. fold-resize-scales",
        )
    if data["safety"] not in SAFETY:
        fail("safety", f"'{data['safety']}' is not one of {', '.join(SAFETY)}")
    bound = data.get("bound")
    if data["safety"] == "approximate":
        if isinstance(bound, bool) or not isinstance(bound, int | float) or not 0 < bound <= 1:
            fail(
                "bound",
                "an approximate rule states the error it promises: a number in (0, 1], the largest max abs error "
                "on any output as a fraction of that output's range (e.g. bound: 0.02)",
            )
    elif bound is not None:
        fail("bound", f"only an approximate rule has a bound (this one is {data['safety']})")
    targets = data.get("targets") or {}
    if not isinstance(targets, dict):
        fail("targets", "must map target -> version spec")
    for t, spec in targets.items():
        if t not in TARGETS:
            fail(f"targets.{t}", f"unknown target. Note: targets are {', '.join(TARGETS)}")
        try:
            parse_spec(str(spec))
        except ValueError as exc:
            fail(f"targets.{t}", str(exc))
    answers = data.get("answers") or []
    if not isinstance(answers, list) or not all(isinstance(a, str) and a for a in answers):
        fail("answers", "must be a list of check ids or error codes, e.g. [resize-scales-initializer]")
    also_fixes = data.get("also_fixes") or []
    if not isinstance(also_fixes, list) or not all(isinstance(a, str) and a for a in also_fixes):
        fail("also_fixes", "must be a list of op types, e.g. [DynamicQuantizeLinear]")
    match = data["match"]
    if not isinstance(match, dict) or "op" not in match:
        fail("match", "must be a mapping with at least 'op'")
    for key in match:
        if key not in MATCH_FIELDS:
            fail(f"match.{key}", f"unknown condition. Note: conditions are {', '.join(sorted(MATCH_FIELDS))}")
    if not _names(match["op"]):
        fail("match.op", "must be an op type or a list of op types")
    if "domain" in match and not isinstance(match["domain"] or "", str):
        fail("match.domain", "must be a string ('' for the standard ops)")
    read = match.get("any_output_read")
    if read is not None and not (isinstance(read, list) and read and all(isinstance(i, int) for i in read)):
        fail("match.any_output_read", "must be a list of output indices, e.g. [1, 2]")
    for flag in ("outputs_are_graph_outputs", "local_function"):
        if flag in match and not isinstance(match[flag], bool):
            fail(f"match.{flag}", "must be true or false")
    attrs = match.get("attrs") or {}
    if not isinstance(attrs, dict):
        fail("match.attrs", "must map an attribute name to conditions")
    for name, cond in attrs.items():
        if not isinstance(cond, dict) or set(cond) - set(ATTR_CONDITIONS):
            fail(f"match.attrs.{name}", f"must be a mapping of {', '.join(sorted(ATTR_CONDITIONS))}")
        for key in ("missing", "present"):
            if key in cond and not isinstance(cond[key], bool):
                fail(f"match.attrs.{name}", f"'{key}' must be true or false")
        for key in ("in", "not_in"):
            if key in cond and not isinstance(cond[key], list):
                fail(f"match.attrs.{name}", f"'{key}' must be a list of values")
    inputs = match.get("inputs") or {}
    if not isinstance(inputs, dict):
        fail("match.inputs", "must map an input index to conditions")
    for idx, cond in [
        *inputs.items(),
        *([("any_input", match["any_input"])] if "any_input" in match else []),
    ]:
        path = "match.any_input" if idx == "any_input" else f"match.inputs.{idx}"
        if idx != "any_input" and not isinstance(idx, int):
            fail(path, "input index must be an integer")
        if not isinstance(cond, dict) or set(cond) - set(INPUT_CONDITIONS):
            fail(path, f"must be a mapping of {', '.join(sorted(INPUT_CONDITIONS))}")
        for key, want in cond.items():
            problem = _input_condition_problem(key, want)
            if problem:
                fail(path, f"'{key}' {problem}")
    fix = data["fix"]
    if not isinstance(fix, dict) or "primitive" not in fix:
        fail("fix", "must be a mapping with 'primitive' and optional 'params'")
    from surgery.fixes import all_fixes

    prims = all_fixes()
    if fix["primitive"] not in prims:
        fail(
            "fix.primitive",
            f"unknown primitive '{fix['primitive']}'. Note: available: {', '.join(sorted(prims))}",
        )
    if fix["primitive"] == "decompose":  # the op the rule matches picks the decomposition: it must have one
        from surgery.fixes.decompose import decomposes

        match = data.get("match") if isinstance(data.get("match"), dict) else {}
        ops = match.get("op")
        for op in [ops] if isinstance(ops, str) else ops if isinstance(ops, list) else []:
            if not decomposes(str(match.get("domain") or ""), str(op)):
                fail(
                    "fix.primitive",
                    f"'decompose' has no decomposition of {match.get('domain') or 'ai.onnx'}::{op}. Note: "
                    "decompositions are registered in surgery/fixes (decompose.DECOMPOSITIONS)",
                )
    for key in fix:
        if key not in FIX_FIELDS:
            fail(f"fix.{key}", f"unknown field. Note: fields are {', '.join(FIX_FIELDS)}")
    if "verify_dims" in fix and (not isinstance(fix["verify_dims"], int) or fix["verify_dims"] < 1):
        fail("fix.verify_dims", "must be a positive integer")
    params = fix.get("params") or {}
    if not isinstance(params, dict):
        fail("fix.params", "must be a mapping")
    allowed = set(prims[fix["primitive"]].params)
    for ref in _references(params):
        if not REFERENCE.fullmatch(ref):
            fail("fix.params", f"'{ref}' is not a reference to the match. Note: references are {REFERENCES}")
    missing = [p for p in required_params(prims[fix["primitive"]]) if p not in params]
    if missing:
        fail("fix.params", f"'{fix['primitive']}' needs {', '.join(missing)}")
    for p in params:
        if p not in allowed:
            fail(
                f"fix.params.{p}",
                f"'{fix['primitive']}' takes no parameter '{p}'. Note: it takes {sorted(allowed)}",
            )
    example = data.get("example") or {}
    if not isinstance(example, dict):
        fail("example", "must be a mapping")
    for key, value in example.items():
        if key not in EXAMPLE_FIELDS:
            fail(f"example.{key}", f"unknown field. Note: fields are {', '.join(EXAMPLE_FIELDS)}")
        if key in ("graph", "near_miss"):
            problem = _onnx_text_problem(value)
            if problem:
                fail(f"example.{key}", problem)
        elif key == "values":
            if not isinstance(value, dict):
                fail("example.values", "must map a $ask: name to its value")
        elif not isinstance(value, str):
            fail(f"example.{key}", "must be a string")
    if "model" in example and "graph" in example:
        fail("example.graph", "give either model (a sample) or graph (ONNX text), not both")
    return Rule(
        id=data["id"],
        title=data["title"],
        why=data["why"].strip(),
        what=data["what"].strip(),
        targets={k: str(v) for k, v in targets.items()},
        match=match,
        fix=fix,
        safety=data["safety"],
        safety_note=str(data.get("safety_note", "")).strip(),
        bound=float(bound) if bound is not None else None,
        example=example,
        references=list(data.get("references") or []),
        answers=list(answers),
        also_fixes=list(also_fixes),
    )


REFERENCES = "$node, $input[i], $output[i], $inputs, $graph_inputs, $any_input, $<attribute>, $ask:<what>"
REFERENCE = re.compile(r"\$(node|inputs|graph_inputs|input\[\d+\]|output\[\d+\]|ask:\w+|[A-Za-z_]\w*)")
BOOL_CONDITIONS = {
    "constant",
    "foldable",
    "initializer",
    "weights",
    "graph_input",
    "rank_known",
    "dynamic",
    "missing",
    "int64_out_of_int32",
}


def required_params(fix) -> list[str]:
    """The parameters a fix primitive cannot do without (no default in its signature)."""
    import inspect

    sig = list(inspect.signature(fix.fn).parameters.values())[1:]  # the first is the model
    return [
        p.name
        for p in sig
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]


def _names(value) -> bool:
    """An op type or a non-empty list of them."""
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value)


def _input_condition_problem(key: str, want) -> str | None:
    if key in BOOL_CONDITIONS and not isinstance(want, bool):
        return "must be true or false"
    if key == "dtype" and not isinstance(want, str):
        return "must be a type name such as FLOAT or INT64"
    if key == "rank" and not (
        (isinstance(want, int) and not isinstance(want, bool))
        or (isinstance(want, list) and want and all(isinstance(r, int) for r in want))
    ):
        return "must be a rank or a list of ranks"
    if key == "position" and not (
        isinstance(want, list) and want and all(isinstance(r, int) and not isinstance(r, bool) for r in want)
    ):
        return "must be a list of input positions"
    if key in ("readers", "producer_not") and not _names(want):
        return "must be a list of op types"
    if key == "produced_by" and not (isinstance(want, list) and want and all(_names(w) for w in want)):
        return "must be a chain: [Concat, [Constant, Cast]] (the producer, then ops feeding it)"
    return None


def _references(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _references(k)
            yield from _references(v)
    elif isinstance(value, list):
        for v in value:
            yield from _references(v)
    elif isinstance(value, str) and value.startswith("$"):
        yield value


def _onnx_text_problem(text) -> str | None:
    """Why an ONNX-text fixture cannot be built, or None. Parsing is data only (onnx.parser), never code."""
    if not isinstance(text, str):
        return "must be a model in ONNX text syntax (a string)"
    if "ir_version" not in text:
        return 'the model header must set ir_version, e.g. <ir_version: 8, opset_import: ["" : 13]>'
    import onnx.parser

    try:
        onnx.parser.parse_model(text)
    except Exception as exc:  # onnx.parser.ParseError, or a C++ error for malformed input
        return f"not a model in ONNX text syntax: {first_line(str(exc)) or type(exc).__name__}"
    return None


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def parse_spec(spec: str) -> list[tuple[str, tuple[int, ...]]]:
    """'*' | '<=8.2' | '>=8.6,<10' -> [(op, version), ...]."""
    spec = spec.strip()
    if spec in ("*", "", "any"):
        return []
    out = []
    for part in spec.split(","):
        part = part.strip()
        for op in ("<=", ">=", "==", "<", ">"):
            if part.startswith(op):
                try:
                    out.append((op, _version_tuple(part[len(op) :].strip())))
                except ValueError:
                    raise ValueError(f"bad version in '{part}'") from None
                break
        else:
            raise ValueError(f"bad version spec '{part}' (use *, <=8.2, >=8.6,<10 ...)")
    return out


def applies_to(rule: Rule, targets: list[str] | None) -> bool:
    """A rule with no targets applies everywhere; else one target must match name and version spec.
    'tensorrt-static@8.2' matches `tensorrt-static: "<=8.2"`; a bare name matches any version spec."""
    if not targets or not rule.targets:
        return True
    for target in targets:
        name, _, version = target.partition("@")
        spec = rule.targets.get(name)
        if spec is not None and (not version or version_matches(spec, version)):
            return True
    return False


def version_matches(spec: str, version: str) -> bool:
    try:
        v = _version_tuple(version)
    except ValueError:
        return True
    for op, ref in parse_spec(spec):
        n = max(len(v), len(ref))
        a, b = v[: len(ref)] if op in ("<=", "==") else v, ref
        a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
        if not {"<=": a <= b, ">=": a >= b, "==": a == b, "<": a < b, ">": a > b}[op]:
            return False
    return True
