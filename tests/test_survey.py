"""`onnx-surgery survey` (issue 32): the outcomes `check` gives, per model and target; cells cached so that a re-run
with nothing changed computes nothing, and a changed model or rule re-runs only the cells it touches; a crashing
or hanging cell becomes "error" and the survey goes on; exit codes; the HTML report; the Ray engine gives the
local engine's report (a real local Ray runtime)."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import onnx
import pytest

from surgery.cli import main
from surgery.usecases.survey import comparable, survey
from surgery.usecases.survey.cells import final_outcome
from surgery.usecases.survey.request import SurveyRequest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_models"
TARGETS = ["onnxruntime", "tensorrt-static@10.15"]


def _request(paths, tmp_path, **kw) -> SurveyRequest:
    kw.setdefault("targets", TARGETS)
    kw.setdefault("cache_dir", str(tmp_path / "cache"))
    return SurveyRequest([str(p) for p in paths], **kw)


def _copy(tmp_path: Path, names: list[str], folder: str = "zoo") -> Path:
    zoo = tmp_path / folder
    zoo.mkdir()
    for name in names:
        shutil.copy(SAMPLES / f"{name}.onnx", zoo / f"{name}.onnx")
    return zoo


def test_survey_outcomes_equal_check_per_model_and_target(tmp_path, capsys):
    result = survey(_request([SAMPLES], tmp_path, workers=2))
    models = result.report["models"]
    assert sorted(m["name"] for m in models) == sorted(p.name for p in SAMPLES.glob("*.onnx"))
    assert result.errors == 0
    seen = set()
    for m in models:
        assert len(m["sha256"]) == 64 and m["nodes"] == len(onnx.load(m["path"]).graph.node)
        capsys.readouterr()
        main(["check", m["path"], *[a for t in TARGETS for a in ("-t", t)], "--format", "json"])
        checked = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["reports"]}
        for t in TARGETS:
            cell, r = m["targets"][t], checked[t]
            seen.add(cell["outcome"])
            assert cell["outcome"] == r["summary"]["outcome"], (m["name"], t)
            assert cell["rejected"]["nodes"] == r["summary"]["rejected"], (m["name"], t)
            assert cell["unknown"]["nodes"] == r["summary"]["unknown"], (m["name"], t)
            refused_ops = [v["op_type"] for v in r["verdicts"] if v["status"] == "rejected"]
            assert sum(cell["rejected"]["by_op"].values()) == len(refused_ops)
            assert set(cell["rejected"]["by_op"]) == set(refused_ops)
            # the rules that answer: those `check` suggests for the node, every one
            suggested = {rule for v in r["verdicts"] for rule in v["rules"]}
            assert set(cell["rules"]) == suggested, (m["name"], t)
    assert {"accepts", "rejects"} <= seen  # the sample has both


def test_a_rerun_with_nothing_changed_reads_every_cell_from_the_cache(tmp_path):
    zoo = _copy(tmp_path, ["healthy_cnn", "squeeze_dynamic", "training_mode_ops"])
    first = survey(_request([zoo], tmp_path, fix=True))
    cells = 3 * len(TARGETS)
    assert (first.computed, first.cached) == (cells, 0)
    again = survey(_request([zoo], tmp_path, fix=True))
    assert (again.computed, again.cached) == (0, cells)  # at least 10x fewer cells computed: none
    assert comparable(again.report) == comparable(first.report)
    # a changed model re-runs its own cells only
    changed = onnx.load(zoo / "healthy_cnn.onnx")
    changed.producer_name = "edited"
    onnx.save(changed, zoo / "healthy_cnn.onnx")
    third = survey(_request([zoo], tmp_path, fix=True))
    assert (third.computed, third.cached) == (len(TARGETS), cells - len(TARGETS))
    # asked without --fix: other cells (the fix is part of what a cell holds)
    assert survey(_request([zoo], tmp_path)).computed == cells


def test_an_interrupted_survey_resumes_from_the_cells_it_had_done(tmp_path):
    zoo = _copy(tmp_path, ["healthy_cnn", "squeeze_dynamic", "training_mode_ops", "unique_op"])
    seen = []

    def interrupt(p):
        seen.append(p.done)
        if p.done == 3:
            raise KeyboardInterrupt

    first = survey(_request([zoo], tmp_path), progress=interrupt)
    assert first.interrupted and first.computed == 3
    assert first.report["stats"]["interrupted"]
    again = survey(_request([zoo], tmp_path))
    assert again.cached >= 3 and again.cached + again.computed == 4 * len(TARGETS)
    assert not again.interrupted


def test_a_changed_rule_reruns_only_the_targets_it_applies_to(tmp_path):
    zoo = _copy(tmp_path, ["healthy_cnn", "training_mode_ops"])
    rules = tmp_path / "rules"
    shutil.copytree(REPO / "rules", rules)
    survey(_request([zoo], tmp_path, rules_dirs=[str(rules)]))
    rule = rules / "inference-mode.yaml"  # for TensorRT alone
    assert "onnxruntime" not in rule.read_text()
    rule.write_text(rule.read_text() + "\n# edited\n")
    again = survey(_request([zoo], tmp_path, rules_dirs=[str(rules)]))
    assert again.computed == 2 and again.cached == 2  # the tensorrt-static cells ran again
    assert all(m["targets"]["onnxruntime"]["outcome"] == "accepts" for m in again.report["models"])


def test_a_crashing_or_hanging_cell_is_an_error_and_the_survey_goes_on(tmp_path):
    zoo = _copy(tmp_path, ["healthy_cnn"])
    for name in ("crash_me", "hang_me"):  # models of their own (the cache knows a model by its sha256)
        model = onnx.load(SAMPLES / "healthy_cnn.onnx")
        model.producer_name = name
        onnx.save(model, zoo / f"{name}.onnx")
    request = _request(
        [zoo],
        tmp_path,
        targets=["onnxruntime"],
        timeout=4,
        workers=2,
        cell="surgery.usecases.survey.cells:survey_cell_for_test",
    )
    result = survey(request)
    cells = {m["name"]: m["targets"]["onnxruntime"] for m in result.report["models"]}
    assert cells["crash_me.onnx"]["outcome"] == "error"
    assert "SIGSEGV" in cells["crash_me.onnx"]["error"]
    assert cells["hang_me.onnx"]["outcome"] == "error"
    assert "timed out after 4 s" in cells["hang_me.onnx"]["error"]
    assert cells["healthy_cnn.onnx"]["outcome"] == "accepts"
    assert result.errors == 2
    # a cell that ran out of time runs again when given more time; a crash is remembered
    request.timeout = 5
    again = survey(request)
    assert again.computed == 1 and again.cached == 2


def test_exit_codes_and_one_line_errors(tmp_path, capsys):
    zoo = _copy(tmp_path, ["healthy_cnn", "squeeze_dynamic"])
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert (
        main(
            ["survey", str(zoo / "healthy_cnn.onnx"), "-t", "onnxruntime", "-o", str(tmp_path / "a"), *cache]
        )
        == 0
    )
    trt = ["-t", "tensorrt-static@10.15"]
    assert main(["survey", str(zoo), *trt, "-o", str(tmp_path / "b"), *cache]) == 1  # squeeze_dynamic refused
    assert main(["survey", str(zoo), *trt, "--fix", "-o", str(tmp_path / "c"), *cache]) == 0  # and repaired
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    cell = next(m for m in report["models"] if m["name"] == "squeeze_dynamic.onnx")["targets"][trt[1]]
    assert cell["outcome"] == "rejects" and final_outcome(cell) == "accepts"
    assert cell["fix"]["steps"] and cell["fix"]["verification"] == "ok" and cell["fix"]["repaired"]
    assert set(report) >= {"tool", "targets", "started", "models"}
    assert set(report["models"][0]) >= {"name", "path", "sha256", "nodes", "targets"}
    assert set(cell) >= {"outcome", "rejected", "reasons", "rules", "fix"}
    # the same OUT again: an earlier survey's reports are replaced
    assert main(["survey", str(zoo), *trt, "--fix", "-o", str(tmp_path / "c"), *cache]) == 0
    capsys.readouterr()
    for argv in (
        ["survey", str(tmp_path / "nothing"), "-o", str(tmp_path / "d")],
        ["survey", str(zoo), "-t", "no-such-target", "-o", str(tmp_path / "d")],
        ["survey", str(zoo), "-o", str(zoo)],  # a folder with the models in it
    ):
        assert main([*argv, *cache]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, err
    assert not (tmp_path / "d").exists()


def test_sarif_names_each_refused_cell(tmp_path, capsys):
    zoo = _copy(tmp_path, ["healthy_cnn", "unique_op"])
    code = main(
        ["survey", str(zoo), "-t", "tensorrt-static@10.15", "-o", str(tmp_path / "o"), "--format", "sarif"]
        + ["--cache-dir", str(tmp_path / "cache")]
    )
    sarif = json.loads(capsys.readouterr().out)
    assert code == 1
    results = sarif["runs"][0]["results"]
    assert {r["properties"]["model"] for r in results} == {"unique_op.onnx"}
    assert all(
        r["level"] == "error" and r["properties"]["target"] == "tensorrt-static@10.15" for r in results
    )


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.rows, self.heads, self.remote, self.svg = [], [], [], [], 0
        self.in_matrix = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key) and "://" in a[key]:
                self.remote.append(a[key])
        if tag == "link":
            self.remote.append(str(a))
        if tag == "table":
            self.in_matrix = a.get("id") == "matrix"
        if tag == "svg":
            self.svg += 1
        if self.in_matrix and tag == "tr":
            self.rows.append([])
        if self.in_matrix and tag in ("td", "th"):
            self.rows[-1].append({"tag": tag, **a, "text": ""})
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag == "table":
            self.in_matrix = False

    def handle_data(self, data):
        if self.in_matrix and self.rows and self.rows[-1]:
            self.rows[-1][-1]["text"] += data


def test_the_html_report_is_one_file_with_the_matrix(tmp_path):
    zoo = _copy(tmp_path, ["healthy_cnn", "unique_op", "squeeze_dynamic"])
    (zoo / "evil<script>.onnx").write_bytes((SAMPLES / "healthy_cnn.onnx").read_bytes())
    out = tmp_path / "out"
    main(
        [
            "survey",
            str(zoo),
            *[a for t in TARGETS for a in ("-t", t)],
            "-o",
            str(out),
            "--cache-dir",
            str(tmp_path / "c"),
        ]
    )
    text = (out / "report.html").read_text()
    page = _Page()
    page.feed(text)
    assert page.remote == [] and page.svg == 1
    head, *rows = page.rows
    assert [c["text"].strip() for c in head][3:] == TARGETS
    assert len(rows) == 4
    report = json.loads((out / "report.json").read_text())
    for row, m in zip(
        sorted(rows, key=lambda r: r[0]["text"]), sorted(report["models"], key=lambda m: m["name"])
    ):
        assert row[0]["text"] == m["name"]
        for cell, t in zip(row[3:], TARGETS):
            assert cell["text"].startswith(final_outcome(m["targets"][t]))
    assert "<script>.onnx" not in text  # a file name is text, never markup
    assert "evil&lt;script&gt;.onnx" in text


def test_the_ray_engine_gives_the_local_engines_report(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'onnx-surgery[ray]')")
    zoo = _copy(tmp_path, ["healthy_cnn", "squeeze_dynamic", "unique_op", "ml_scaler"])
    local = survey(_request([zoo], tmp_path, fix=True, use_cache=False, workers=2))
    on_ray = survey(_request([zoo], tmp_path, fix=True, use_cache=False, workers=2, engine="ray"))
    assert on_ray.computed == local.computed == 4 * len(TARGETS)
    assert on_ray.report["engine"].startswith("ray")
    assert comparable(on_ray.report) == comparable(local.report)
