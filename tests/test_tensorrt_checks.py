"""The predictor's check records (surgery/backends/tensorrt/data/checks.yaml): each fixture is refused by the
check it belongs to, the predicted words on the fixture are exactly what a real TensorRT-RTX printed for it
(recorded-tensorrt-rtx.json), and — where TensorRT-RTX is installed — it still prints that today."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from surgery.backends.tensorrt.predicates import TESTS
from surgery.backends.tensorrt.predictor import make
from surgery.backends.tensorrt.records import (
    CHECKS_PATH,
    RECORDED_PATH,
    SUPPORTED_VERSIONS,
    fixture_model,
    load_checks,
    recorded_words,
)
from surgery.backends.tensorrt.records import version_tuple as _vt
from surgery.verdict import Stage, Status

CHECKS = load_checks()
ROOT = Path(__file__).resolve().parent.parent


def _versions(check):
    lo, hi = check.fixture_versions or (check.since, check.until)
    return [v for v in SUPPORTED_VERSIONS if check.applies(v) and _vt(lo) <= _vt(v) <= _vt(hi)]


def _report(check, version):
    depth = Stage.BUILD if check.stage == "build" else Stage.PARSE
    return make(version).check(fixture_model(check), depth=depth)


def test_records_are_complete_and_name_real_tests():
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    for c in CHECKS:
        assert c.source and c.explanation and c.fixture, c.id
        assert c.stage in ("parse", "build", "run"), c.id
        assert c.test in TESTS or c.test in ("table", "model"), c.id
        assert _vt(c.since) <= _vt(c.until), c.id
        for w in c.words:
            assert w.source and w.template, c.id
            assert c.since <= w.since or _vt(c.since) <= _vt(w.since), c.id
            assert _vt(w.until) <= _vt(c.until), c.id


def test_no_data_file_points_outside_the_repository():
    for path in [CHECKS_PATH, RECORDED_PATH, *CHECKS_PATH.parent.glob("upstream/*")]:
        assert "shared/" not in path.read_text(), path


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_the_fixture_is_refused_by_its_check_at_every_version_it_applies_to(check):
    for version in _versions(check):
        r = _report(check, version)
        if check.test == "model":
            assert any(m.code == check.code and m.level == "error" for m in r.messages), (
                version,
                r.to_dict(),
            )
            continue
        v = r.by_node()["n"]
        assert v.status is Status.REJECTED and check.id in v.checks, (version, v.to_dict())
        assert v.stage.value == check.stage and v.code == check.code
        assert v.explanation and "{" not in v.explanation, v.explanation


@pytest.mark.parametrize(
    "check", [c for c in CHECKS if c.id in recorded_words()["words"]], ids=lambda c: c.id
)
def test_predicted_words_on_the_fixture_are_the_recorded_words(check):
    got = recorded_words()["words"][check.id]
    recorded_range = [w for w in check.words if w.source.startswith("recorded")]
    assert recorded_range, f"{check.id} is recorded but no words range uses the recording"
    for w in recorded_range:
        r = _report(check, w.until)
        if check.test == "model":
            texts = [(m.words, m.words_from) for m in r.messages if m.code == check.code]
        else:
            v = r.by_node()["n"]
            texts = [(v.words, v.words_from)]
        assert (got["text"], w.source) in texts, (w.until, texts)
        if check.stage == "parse":
            assert got["code"] == check.code
            assert got["func"] == check.func.format(op="Unique")


def test_versions_outside_the_words_ranges_get_no_words_only_an_explanation():
    check = next(c for c in CHECKS if c.id == "dropout-training")
    old = [v for v in _versions(check) if check.words_for(v) is None]
    assert old, "dropout-training has versions without recorded words"
    v = _report(check, old[0]).by_node()["n"]
    assert v.status is Status.REJECTED and v.words == "" and v.words_from == "" and v.explanation


WORKER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import tensorrt_rtx as trt
from surgery.backends.tensorrt.records import load_checks, fixture_model
from surgery.backends.tensorrt.worker import clean_words
logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
out = {}
for c in load_checks():
    if not c.reproduces_on_rtx or c.stage != "parse":
        continue
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # kept alive: the parser points into it
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse(fixture_model(c).SerializeToString())
    errs = [parser.get_error(i) for i in range(parser.num_errors)]
    mine = [e for e in errs if e.node_name() == "n"] or [e for e in errs if e.node() < 0] or errs
    out[c.id] = None if ok else clean_words(mine[0].desc())
print("RESULT " + json.dumps(out))
"""


def test_tensorrt_rtx_still_says_what_was_recorded():
    pytest.importorskip("tensorrt_rtx")
    p = subprocess.run([sys.executable, "-c", WORKER, str(ROOT)], capture_output=True, text=True, timeout=300)
    line = next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))
    live = json.loads(line[len("RESULT ") :])
    recorded = json.loads(RECORDED_PATH.read_text())
    installed = re.search(r"\d+(\.\d+)+", recorded["recorded_with"]).group(0)
    import importlib.metadata

    if importlib.metadata.version("tensorrt-rtx-cu12") != installed:
        pytest.skip(
            f"the words were recorded with TensorRT-RTX {installed}; rerun scripts/record_trt_words.py"
        )
    for check_id, text in live.items():
        assert text == recorded["words"][check_id]["text"], check_id
