"""The one-line summary of a backend's words (report reasons, the graph's hover text) is the line that says what is
wrong, still verbatim: TensorRT's "Invalid Node - NAME" opening line names the node and nothing else."""

import json

import onnx

from surgery.resources import PACKAGE_DIR
from surgery.text import first_line
from surgery.verdict import Evidence, Report, Stage, Status, Verdict, said_line
from surgery.view.labels import verdict_line

RECORDED = PACKAGE_DIR / "backends" / "tensorrt" / "data" / "recorded-tensorrt-rtx.json"


def _recorded_two_line_words() -> str:
    """Words a real TensorRT-RTX parser printed, as recorded in the repository (not written here)."""
    found = []

    def walk(x):
        if isinstance(x, str) and x.startswith("Invalid Node - ") and "\n" in x:
            found.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(json.loads(RECORDED.read_text()))
    assert found, "no recorded 'Invalid Node' words"
    return found[0]


def _verdict(words: str) -> Verdict:
    return Verdict(
        "n", 0, "Squeeze", Status.REJECTED, words=words, stage=Stage.PARSE, evidence=Evidence("live")
    )


def test_the_summary_quotes_the_line_after_invalid_node():
    words = _recorded_two_line_words()
    second = [x for x in words.splitlines() if x.strip()][1].strip()
    v = _verdict(words)
    assert v.reason() == first_line(second)
    report = Report("tensorrt", "TensorRT", "x", [v])
    assert any(second[:100] in line for line in report.reasons()), report.reasons()
    line = verdict_line("TensorRT", v)
    assert second[:100] in line and "Invalid Node" not in line and line.endswith("…”"), line


def test_words_without_that_opening_keep_their_first_line():
    v = _verdict("UNSUPPORTED_NODE: No importer registered for op: Foo\nmore detail")
    assert v.reason() == "UNSUPPORTED_NODE: No importer registered for op: Foo"
    v = _verdict("Invalid Node - n")  # nothing after it: the one line there is
    assert v.reason() == "Invalid Node - n"


def test_words_and_explanation_share_a_line_told_apart():
    recorded = "recorded from a real parser"
    line = said_line("parser says", "false", "Foo is listed as not supported (N)", recorded)
    assert line == "parser says (recorded): “false” — why: Foo is listed as not supported (N)"
    live = said_line("builder says", "Error A\nmore", "", "live")
    assert live == "builder says: “Error A…”"  # this run's words: not marked recorded; more lines: …
    assert said_line("parser says", "", "ours only") == "why: ours only"
    source = "as written in the parser's source, a.cpp @ 8.2-GA, line 1"
    assert (
        said_line("parser says", "Assertion failed: x", "", source)
        == "parser says (from its source): “Assertion failed: x”"
    )


def test_nodes_told_the_same_are_one_group_with_its_evidence_once(two_quantizers):
    from surgery.diagnose import check_one

    report = check_one(onnx.load(two_quantizers), "tensorrt-static@10.15")
    (group,) = report.groups()
    assert [v.node for v in group.verdicts] == ["dql_a", "dql_b"] and group.status is Status.REJECTED
    assert group.words and group.explanation and group.evidence() == group.verdicts[0].evidence
    assert group.nodes() == "DynamicQuantizeLinear ×2 ('dql_a', 'dql_b')"
    assert group.nodes(limit=1) == "DynamicQuantizeLinear ×2 ('dql_a', …)"


def test_every_view_names_the_same_speaker():
    from surgery.verdict import speaker

    assert speaker("tensorrt-static@10.15", Stage.PARSE) == "parser says"
    assert speaker("tensorrt", Stage.BUILD) == "builder says"
    assert speaker("onnxruntime", Stage.BUILD) == "onnxruntime says"  # session creation parses and builds
    v = Verdict(
        "n", 0, "Foo", Status.REJECTED, words="Fatal error: Foo", stage=Stage.BUILD, words_from="live"
    )
    assert "— onnxruntime says: “Fatal error: Foo”" in verdict_line(
        "onnxruntime 1.32.0 (CPU)", v, "onnxruntime"
    )
    assert "— builder says: “Fatal error: Foo”" in verdict_line("some backend", v)


# TensorRT-RTX 1.7.1.116's parser on a dynamo (opset 23) export of a Llama with a dynamic batch (issue 28),
# as `onnx-surgery check -t tensorrt` printed it
ROTARY_WORDS = (
    "Invalid Node - node_RotaryEmbedding_547\n"
    "ITensor::getDimensions: Error Code 3: API Usage Error (node_RotaryEmbedding_547: cosCache has batch size 1 "
    "but must have the same batch size as input which is -1 In operator() at "
    "/_src/optimizer/api/layers/rotaryEmbeddingLayer.cpp:130)"
)


def test_the_rotary_embedding_refusal_is_summed_up_by_its_reason():
    v = _verdict(ROTARY_WORDS)
    assert "cosCache has batch size 1 but must have the same batch size as input which is -1" in v.reason()
    assert not v.reason().startswith("Invalid Node")
    assert v.words == ROTARY_WORDS  # the whole words stay verbatim
    report = Report("tensorrt", "TensorRT-RTX", "x", [v])
    assert any("cosCache has batch size 1" in line for line in report.reasons()), report.reasons()
    assert "cosCache has batch size 1" in verdict_line("TensorRT-RTX", v)
