"""Does a rule match a node? Each condition answers with (ok, reason), so the same code both matches and
explains near-misses (the tracer)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from onnx import ModelProto, NodeProto, helper

from surgery.graph import GraphFacts, beyond_int32, dtype_name
from surgery.rulebook.schema import Rule


@dataclass
class Context:
    """What conditions look at: the model's facts, computed once per model version."""

    model: ModelProto

    @classmethod
    def of_scope(cls, facts: GraphFacts) -> Context:
        """The context of an If/Loop/Scan body or a local function (surgery.graph.scope_facts): its facts see
        what the body reads from the outer scope, so `foldable` and `weights` mean there what they mean to a
        fold or a parser working inside the body."""
        ctx = cls(facts.model)
        ctx.__dict__["facts"] = facts
        return ctx

    @cached_property
    def facts(self) -> GraphFacts:
        return GraphFacts.of(self.model)

    @cached_property
    def foldable(self) -> set[str]:
        from surgery.fixes.fold_constants import _foldable

        return _foldable(self.model, self.facts)[0]

    @cached_property
    def out_of_int32(self) -> set[str]:
        return {name for name, t in self.facts.initializers.items() if beyond_int32(t).size}


def needs_graph_input(rule: Rule) -> bool:
    """Whether the rule can match only a node that reads a graph input: its `any_input`, or one of its `inputs`,
    asks for `graph_input: true` (without `missing`, which is then the input's only condition). Matching skips
    such a rule on every other node: at 50k nodes, 70k of the 95k node-rule pairs a round looked at."""
    m = rule.match
    conds = [m.get("any_input") or {}, *(m.get("inputs") or {}).values()]
    return any(c.get("graph_input") is True and "missing" not in c for c in conds)


def _attr(node: NodeProto, name: str):
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return None


def _chain_ok(ctx: Context, tensor: str, chain: list) -> tuple[bool, str]:
    """produced_by: [Concat, [Constant, Cast]] — the producer's op, then ops among its producers."""
    producer = ctx.facts.producer_of(tensor)
    want = chain[0]
    ops = want if isinstance(want, list) else [want]
    if producer is None or producer.op_type not in ops:
        got = producer.op_type if producer is not None else "no node (an initializer or graph input)"
        return False, f"'{tensor}' is produced by {got}, not {'/'.join(ops)}"
    if len(chain) > 1:
        nxt = chain[1] if isinstance(chain[1], list) else [chain[1]]
        feeding = {
            ctx.facts.producer_of(x).op_type for x in producer.input if ctx.facts.producer_of(x) is not None
        }
        missing = [op for op in nxt if op not in feeding]
        if missing:
            return False, f"{producer.op_type} '{producer.name}' is not fed by {', '.join(missing)}"
    return True, f"'{tensor}' is produced by {producer.op_type}"


def _input_condition(
    ctx: Context, node: NodeProto, index: int, cond: dict, stop: bool = False, explain: bool = True
) -> list[tuple[bool, str]]:
    """The input's conditions with their outcome and reason; `stop`: up to the first that fails (matching);
    `explain`: False leaves the reasons empty (matching reads the outcomes alone: at 50k nodes, writing every
    reason of every rule is seconds)."""
    facts = ctx.facts
    name = node.input[index] if index < len(node.input) else ""
    checks = []
    if "missing" in cond:
        ok = (name == "") == bool(cond["missing"])
        checks.append((ok, f"input {index} is {'absent' if not name else repr(name)}" if explain else ""))
        return checks
    if not name:
        return [(False, f"input {index} is absent" if explain else "")]
    info = None
    for key, want in cond.items():
        if stop and checks and not checks[-1][0]:
            return checks
        if key in ("dtype", "rank_known", "rank", "dynamic") and info is None:
            info = facts.info(name)
        if key == "constant":
            got = facts.is_constant(name)
            why = (
                f"input {index} '{name}' is {'' if got else 'not '}computed only from constants"
                if explain
                else ""
            )
            checks.append((got == want, why))
        elif key == "foldable":
            got = name in ctx.foldable
            why = (
                f"input {index} '{name}' is {'' if got else 'not '}foldable (constants and static shapes)"
                if explain
                else ""
            )
            checks.append((got == want, why))
        elif key == "initializer":
            got = name in facts.initializers
            why = f"input {index} '{name}' is {'' if got else 'not '}an initializer" if explain else ""
            checks.append((got == want, why))
        elif key == "weights":  # TensorRT's is_weights(): an initializer or a Constant node's output
            got = facts.is_weights(name)
            why = (
                f"input {index} '{name}' is {'' if got else 'not '}a weight (initializer or Constant output)"
                if explain
                else ""
            )
            checks.append((got == want, why))
        elif key == "graph_input":
            got = name in facts.graph_inputs
            why = f"input {index} '{name}' is {'' if got else 'not '}a graph input" if explain else ""
            checks.append((got == want, why))
        elif key == "dtype":
            got = info.dtype_name
            checks.append((got == want, f"input {index} '{name}' has type {got}" if explain else ""))
        elif key == "rank_known":
            got = info.shape is not None
            why = f"input {index} '{name}' has {'a known' if got else 'an unknown'} rank" if explain else ""
            checks.append((got == want, why))
        elif key == "rank":
            got = info.rank
            ranks = want if isinstance(want, list) else [want]
            why = (
                f"input {index} '{name}' has rank {got if got is not None else 'unknown'}" if explain else ""
            )
            checks.append((got in ranks, why))
        elif key == "dynamic":
            got = info.is_dynamic
            why = (
                f"input {index} '{name}' has a {'dynamic' if got else 'static'} shape {info.shape_str()}"
                if explain
                else ""
            )
            checks.append((got == want, why))
        elif key == "produced_by":
            ok, why = _chain_ok(ctx, name, list(want))
            checks.append((ok, f"input {index} {why}" if explain else ""))
        elif key == "int64_out_of_int32":
            got = name in ctx.out_of_int32
            why = (
                f"input {index} '{name}' {'holds' if got else 'holds no'} INT64 values outside the INT32 range"
                if explain
                else ""
            )
            checks.append((got == want, why))
        elif key == "producer_not":
            producer = facts.producer_of(name)
            got = producer.op_type if producer is not None else None
            why = f"input {index} '{name}' is made by {got or 'no node'}" if explain else ""
            checks.append((got not in want, why))
        elif key == "position":
            checks.append(
                (index in want, f"input {index} '{name}' is at position {index}" if explain else "")
            )
        elif key == "readers":
            readers = {n.op_type for n in facts.consumers_of(name)}
            ok = readers <= set(want)
            checks.append((ok, f"input {index} '{name}' is read by {sorted(readers)}" if explain else ""))
    return checks


def explain_node(
    ctx: Context, rule: Rule, node: NodeProto, stop: bool = False, explain: bool = True
) -> list[tuple[bool, str]]:
    """Every condition of the rule on this node, with its outcome and reason; `stop`: up to the first that
    fails (what matching needs: at 50k nodes, explaining every condition of every rule is seconds); `explain`:
    False leaves the reasons empty (matching reads the outcomes alone)."""
    seen, bad = 0, False  # what failed() has looked at: each outcome once, not again at every condition

    def failed() -> bool:
        nonlocal seen, bad
        if stop and not bad:
            bad = not all(ok for ok, _ in out[seen:])
            seen = len(out)
        return bad

    m = rule.match
    ops = m["op"] if isinstance(m["op"], list) else [m["op"]]
    is_op = node.op_type in ops or "*" in ops
    out = [
        (is_op, (f"op is {node.op_type}" + ("" if is_op else f", not {'/'.join(ops)}")) if explain else "")
    ]
    calls = (node.domain or "", node.op_type) in ctx.facts.functions
    if "local_function" in m:
        want = bool(m["local_function"])
        why = f"the node {'calls' if calls else 'does not call'} a model-local function" if explain else ""
        out.append((calls == want, why))
    if "domain" in m:
        want = m["domain"] or ""
        got = node.domain if node.domain not in ("ai.onnx",) else ""
        why = (f"domain is '{got}'" + ("" if got == want else f", not '{want}'")) if explain else ""
        out.append((got == want, why))
    elif node.domain not in ("", "ai.onnx") and not m.get("local_function"):
        out.append((False, f"domain is '{node.domain}'; the rule is for standard ops" if explain else ""))
    if not out[0][0] or failed():
        return out
    for name, cond in (m.get("attrs") or {}).items():
        value = _attr(node, name)
        for key, want in cond.items():
            if failed():
                return out
            said = f"attribute {name} = {value!r}" if explain else ""
            if key == "eq":
                out.append(
                    (value == want, said + ("" if value == want or not explain else f", not {want!r}"))
                )
            elif key == "ne":
                out.append((value != want, said))
            elif key == "in":
                out.append((value in want, said))
            elif key == "not_in":
                out.append((value not in want, said))
            elif key in ("missing", "present"):
                ok = (value is None) == bool(want) if key == "missing" else (value is not None) == bool(want)
                out.append(
                    (ok, f"attribute {name} is {'absent' if value is None else 'set'}" if explain else "")
                )
    for index, cond in (m.get("inputs") or {}).items():
        if failed():
            return out
        out += _input_condition(ctx, node, int(index), cond, stop, explain)
    if failed():
        return out
    if "any_input" in m:
        results = (
            _input_condition(ctx, node, i, m["any_input"], stop, explain) for i in range(len(node.input))
        )
        hit = next((r for r in results if r and all(ok for ok, _ in r)), None)
        out.append(
            (
                hit is not None,
                (
                    hit[-1][1]
                    if hit
                    else "no input meets " + ", ".join(f"{k}={v}" for k, v in m["any_input"].items())
                )
                if explain
                else "",
            )
        )
    if "any_output_read" in m:
        facts = ctx.facts
        read = [
            i
            for i in m["any_output_read"]
            if i < len(node.output)
            and node.output[i]
            and (node.output[i] in facts.graph_outputs or facts.consumers.get(node.output[i]))
        ]
        if explain:
            names = ", ".join(f"{i} '{node.output[i]}'" for i in read)
            why = f"output {names} is read" if read else f"no output of {m['any_output_read']} is read"
        out.append((bool(read), why if explain else ""))
    if "outputs_are_graph_outputs" in m:
        outs = {o.name for o in ctx.model.graph.output}
        got = all(o in outs for o in node.output if o)
        want = bool(m["outputs_are_graph_outputs"])
        out.append(
            (got == want, f"its outputs are {'' if got else 'not '}all graph outputs" if explain else "")
        )
    return out


def matched_any_input(ctx: Context, rule: Rule, node: NodeProto) -> str | None:
    """The first input that meets the rule's `any_input` conditions (None without them or when none does)."""
    cond = rule.match.get("any_input")
    if not cond:
        return None
    for i, name in enumerate(node.input):
        checks = _input_condition(ctx, node, i, cond)
        if name and checks and all(ok for ok, _ in checks):
            return name
    return None


def matches(ctx: Context, rule: Rule, node: NodeProto) -> bool:
    return all(ok for ok, _ in explain_node(ctx, rule, node, stop=True, explain=False))


def describe_dtype(code: int) -> str:
    return dtype_name(code)
