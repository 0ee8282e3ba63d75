"""Every built-in rule, from its own file's fixture: it is documented; it fires on its failing model; it stays
quiet on its near-miss; the fixed model is numerically equal where the rule is exact and passes
onnx.checker (full_check); the target's verdict turns from rejected to supported — tensorrt-static at the
rule's version, and TensorRT-RTX live where the rule applies to `tensorrt` and the parser rejects the fixture."""

import importlib.util
from pathlib import Path

import onnx
import pytest

from surgery.backends import get_backend
from surgery.diagnose import check_one, clear_cache
from surgery.fixes import FixError
from surgery.graph import GraphFacts
from surgery.rulebook import load_rules, propose
from surgery.rulebook.docs import DOCS, render
from surgery.rulebook.fixture import fixture
from surgery.rulebook.loader import BUILTIN_DIR
from surgery.rulebook.schema import version_matches
from surgery.verdict import Stage, Status
from surgery.verify import verify
from surgery.workspace import Workspace

RULES = {r.id: r for r in load_rules([BUILTIN_DIR])}
# Fixtures the predictor does not call rejected, with the reason; their fixes are still tested.
# fold-shape-chains: the failures it prevents happen while old TensorRT builds shape tensors at import time,
# which no documented check describes. int64-slice-bounds: a Slice end of INT64_MAX is clamped harmlessly (the
# predictor says so); the rule removes the clamping.
NOT_PREDICTED = {"fold-shape-chains", "int64-slice-bounds"}
# Rules whose fix refuses on their own failing model, on purpose, and the words the refusal must carry.
REFUSES = {"int64-initializers-to-int32": "5000000000"}


def static_target(rule) -> str | None:
    spec = rule.targets.get("tensorrt-static")
    if spec is None:
        return None
    return next(
        (f"tensorrt-static@{v}" for v in ("8.2", "8.6", "9.3", "10.15", "11.5") if version_matches(spec, v)),
        None,
    )


def fixed(rule_id, tmp_path):
    """(rule, fixture, the proposal on the fixture's node, workspace with it applied)."""
    rule = RULES[rule_id]
    fx = fixture(rule)
    target = static_target(rule)
    found = [
        p for p in propose(fx.model, [rule], [target] if target else None, fx.values) if p.node == fx.node
    ]
    assert found, f"{rule_id} does not fire on '{fx.node}'"
    path = tmp_path / "m.onnx"
    onnx.save(fx.model, str(path))
    ws = Workspace.open(path)
    ws.apply(found[0].step)
    return rule, fx, found[0], ws


def test_at_least_twelve_rules_and_every_sample_failure_is_covered():
    from surgery.samples import lessons

    assert len(RULES) >= 12
    for lesson in lessons():
        if lesson.rule:
            assert lesson.rule in RULES, lesson.rule
            assert RULES[lesson.rule].example.get("model") == lesson.name


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_is_documented_and_has_a_fixture_and_a_near_miss(rule_id):
    rule = RULES[rule_id]
    assert rule.path.endswith(f"{rule_id}.yaml"), "one rule per file, named by its id"
    for text in (
        rule.title,
        rule.what,
        rule.why,
        rule.safety_note,
        rule.example.get("before"),
        rule.example.get("after"),
    ):
        assert text and text.strip()
    assert rule.references, "cite where the backend's words come from"
    assert "TODO" not in Path(rule.path).read_text(), "the scaffold's TODOs are still there"
    fx = fixture(rule)
    assert fx.node in {n.name for n in fx.model.graph.node}
    assert fx.near_miss is not None, "a rule needs a near-miss it stays quiet on"


def test_docs_are_current():
    assert DOCS.read_text() == render(load_rules([BUILTIN_DIR])), "run: python -m surgery.rulebook.docs"


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_stays_quiet_on_its_near_miss(rule_id):
    rule = RULES[rule_id]
    assert propose(fixture(rule).near_miss, [rule]) == []


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_fires_fixes_and_turns_the_static_verdict(rule_id, tmp_path):
    rule = RULES[rule_id]
    target = static_target(rule)
    if rule_id in REFUSES:
        with pytest.raises(FixError, match=REFUSES[rule_id]):
            fixed(rule_id, tmp_path)
        return
    rule, fx, proposal, ws = fixed(rule_id, tmp_path)
    assert proposal.safety == rule.safety and proposal.step.rule == rule_id
    if rule.safety == "exact":
        report = verify(fx.model, ws.current)
        # an exact rule whose original onnxruntime cannot run (a custom op) proves its numbers in its unit test
        assert report.status == "ok" or "the original model does not run" in report.message, report.summary()
    if not _has_plugin_nodes(ws.current):  # a plugin node is not an ONNX op: the checker cannot know it
        onnx.checker.check_model(ws.current, full_check=True)
    if target is None:
        return
    before = get_backend(target).check(fx.model, depth=Stage.BUILD)  # parse and build-stage checks
    after = get_backend(target).check(ws.current, depth=Stage.BUILD)
    if rule_id in NOT_PREDICTED:
        assert before.by_node()[fx.node].status is not Status.REJECTED  # if this changes, move the rule out
        return
    assert before.by_node()[fx.node].status is Status.REJECTED
    assert fx.node not in {v.node for v in after.rejected}
    assert len(after.rejected) < len(before.rejected)


ALSO_FIXES = sorted(r for r in RULES if RULES[r].also_fixes)


@pytest.mark.parametrize("rule_id", ALSO_FIXES)
def test_what_a_rule_says_it_also_fixes_is_fixed_and_shown_the_rule_at_its_reader(rule_id, tmp_path):
    """A rule's `also_fixes` is a promise: the refused nodes of those types that feed the node it fixes are gone,
    or no longer refused, after the fix (so `check` may show the rule on them, at that reader), and `check`'s
    suggestions do show it there."""
    from surgery.rulebook.suggest import Suggestion, suggestions_for

    rule, fx, proposal, ws = fixed(rule_id, tmp_path)
    facts = GraphFacts.of(fx.model)
    node = fx.model.graph.node[facts.index[fx.node]]
    fed_by = {facts.keys[p] for x in node.input if (p := facts.producer.get(x)) is not None}
    feeders = [k for k in fed_by if facts.node(k).op_type in rule.also_fixes]
    spec = rule.targets["tensorrt-static"]
    tested = []
    # Every predicted version the rule targets: a feeder refused only by newer parsers (UINT8 Gather input,
    # 10.x) is still a promise to keep there.
    for version in ("8.2", "8.6", "9.3", "10.15"):
        if not version_matches(spec, version):
            continue
        target = get_backend(f"tensorrt-static@{version}")
        before, after = target.check(fx.model), target.check(ws.current).by_node()
        refused = [k for k in feeders if before.by_node()[k].status is Status.REJECTED]
        still = [k for k in refused if k in after and after[k].status is Status.REJECTED]
        assert not still, f"the fix left {still} refused by {version}"
        found = suggestions_for(fx.model, [before], [rule])
        for k in refused:
            assert Suggestion(rule_id, fx.node) in found[(before.backend, k)], found
        tested += refused
    assert tested, f"the example's node is fed by no refused {rule.also_fixes}: the promise is not tested"


def _has_plugin_nodes(model) -> bool:
    """Nodes no ONNX schema knows (a TensorRT plugin node, domain '' or a custom one)."""
    opsets = {o.domain or "": o.version for o in model.opset_import}
    for n in model.graph.node:
        try:
            onnx.defs.get_schema(n.op_type, opsets.get(n.domain or "", 1), n.domain or "")
        except onnx.defs.SchemaError:
            return True
    return False


LIVE = sorted(r for r in RULES if "tensorrt" in RULES[r].targets)


@pytest.mark.parametrize("rule_id", LIVE)
def test_rule_turns_the_live_tensorrt_verdict(rule_id, tmp_path):
    if importlib.util.find_spec("tensorrt_rtx") is None and importlib.util.find_spec("tensorrt") is None:
        pytest.skip("neither tensorrt nor tensorrt_rtx is installed")
    trt = get_backend("tensorrt")
    if not trt.availability().ok:
        pytest.skip(f"live TensorRT unavailable: {trt.availability().reason}")
    if rule_id in REFUSES:
        pytest.skip(f"{rule_id} refuses on its fixture by design")
    rule, fx, _, ws = fixed(rule_id, tmp_path)
    depth = (
        Stage.BUILD if "BUILD_FAILED" in rule.answers else Stage.PARSE
    )  # the builder refuses, not the parser
    clear_cache()
    before = check_one(fx.model, "tensorrt", depth=depth)
    verdict = before.by_node().get(fx.node)
    if verdict is None or verdict.status is not Status.REJECTED:
        pytest.skip(
            f"{trt.label} does not reject the fixture's '{fx.node}' "
            f"({verdict.status.value if verdict else 'no verdict'}): the failure is specific to older versions"
        )
    after = check_one(ws.current, "tensorrt", str(tmp_path), depth=depth)
    assert fx.node not in {v.node for v in after.rejected}, [v.to_dict() for v in after.rejected]
    if before.refusals:  # the model as a whole is refused (a uint32 input): no rule on the node changes that
        assert {m.words for m in after.refusals} <= {m.words for m in before.refusals}, after.to_dict()
        return
    assert after.outcome.value != "rejects", after.to_dict()
