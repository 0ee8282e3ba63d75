"""Rule files: a broken one gets one error naming the file, the line and the field; size and depth limits are
checked before parsing; YAML tags cannot run code; folders and $ONNX_SURGERY_RULES."""

import pytest

from surgery.rulebook import RuleError, load_rule_text, load_rules
from surgery.rulebook.loader import BUILTIN_DIR, default_dirs

GOOD = """\
id: my-rule
title: A rule
what: does a thing
why: because
match:
  op: Resize
fix:
  primitive: fold_constants
safety: exact
example:
  graph: |
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      [r] y = Relu (x)
    }
  node: r
"""


def test_a_valid_rule_loads():
    rule = load_rule_text(GOOD, "my.yaml")
    assert rule.id == "my-rule" and rule.primitive == "fold_constants" and rule.path == "my.yaml"


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (("safety: exact", "safety: risky"), r"my.yaml:9: field 'safety': 'risky' is not one of"),
        (
            ("primitive: fold_constants", "primitive: nope"),
            r"my.yaml:8: field 'fix.primitive': unknown primitive 'nope'",
        ),
        (("op: Resize", "op: Resize\n  colour: red"), r"my.yaml:7: field 'match.colour': unknown condition"),
        (("why: because\n", ""), r"field 'why': missing"),
        (
            ("primitive: fold_constants", "primitive: fold_constants\n  params: {nope: 1}"),
            r"my.yaml:9: field 'fix.params.nope': 'fold_constants' takes no parameter 'nope'",
        ),
        (
            ("primitive: fold_constants", "primitive: fold_constants\n  verify_dims: 0"),
            r"my.yaml:9: field 'fix.verify_dims'",
        ),
        (("title: A rule", "title: [unclosed"), r"my.yaml:\d+: not valid YAML"),
        (("Relu (x)", "Relu (x"), r"my.yaml:11: field 'example.graph': not a model in ONNX text syntax"),
        (("ir_version: 8, ", ""), r"my.yaml:11: field 'example.graph': the model header must set ir_version"),
        (("  node: r", "  node: r\n  colour: red"), r"my.yaml:17: field 'example.colour': unknown field"),
        (
            ("match:\n  op: Resize", "match:\n  op: Resize\n  inputs: {2: {shiny: true}}"),
            r"my.yaml:7: field 'match.inputs.2': must be a mapping of",
        ),
        (
            ("match:", "targets: {tensorrt-static: '<=eight'}\nmatch:"),
            r"my.yaml:5: field 'targets.tensorrt-static': bad version in '<=eight'",
        ),
        (("match:", "targets: {tensorrrt: '*'}\nmatch:"), r"field 'targets.tensorrrt': unknown target"),
        (("op: Resize", "op: {Resize: 1}"), r"my.yaml:6: field 'match.op': must be an op type"),
        (  # the matched op picks the decomposition: a rule naming one that does not exist fails to load
            ("primitive: fold_constants", "primitive: decompose\n  params: {node: $node}"),
            r"my.yaml:8: field 'fix.primitive': 'decompose' has no decomposition of ai.onnx::Resize",
        ),
        (
            ("op: Resize", "op: Resize\n  inputs: {2: {constant: 'yes'}}"),
            r"my.yaml:7: field 'match.inputs.2': 'constant' must be true or false",
        ),
        (
            ("op: Resize", "op: Resize\n  inputs: {2: {produced_by: Concat}}"),
            r"field 'match.inputs.2': 'produced_by' must be a chain",
        ),
        (
            ("op: Resize", "op: Resize\n  attrs: {mode: {in: linear}}"),
            r"field 'match.attrs.mode': 'in' must be a list",
        ),
        (
            ("primitive: fold_constants", "primitive: fold_constants\n  params: {tensors: ['$input[two]']}"),
            r"my.yaml:9: field 'fix.params': '\$input\[two\]' is not a reference to the match",
        ),
        (
            ("id: my-rule", "id: off"),
            r"my.yaml:1: field 'id': must be a non-empty string \(YAML reads on/off",
        ),
    ],
)
def test_broken_rule_files_name_file_line_and_field(change, where):
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(RuleError, match=where):
        load_rule_text(text, "my.yaml")


def test_deep_nesting_and_huge_files_are_refused_before_parsing():
    deep = "a: " + "[" * 50_000 + "]" * 50_000  # PyYAML's recursive composer would crash on this
    with pytest.raises(RuleError, match="nested deeper than"):
        load_rule_text(deep, "deep.yaml")
    with pytest.raises(RuleError, match="over the .*-byte limit"):
        load_rule_text("x: " + "y" * 300_000, "big.yaml")


def test_yaml_tags_cannot_run_code(tmp_path):
    marker = tmp_path / "ran"
    text = f"id: !!python/object/apply:os.system ['touch {marker}']\n" + GOOD.split("\n", 1)[1]
    with pytest.raises(RuleError, match="evil.yaml:1: not valid YAML"):
        load_rule_text(text, "evil.yaml")
    assert not marker.exists()


def test_folders_later_ones_override_by_id_and_the_environment_picks_the_default(tmp_path, monkeypatch):
    builtin = {r.id: r for r in load_rules([BUILTIN_DIR])}
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "x.yaml").write_text(GOOD.replace("my-rule", "fold-topk-k").replace("A rule", "Mine"))
    merged = {r.id: r for r in load_rules([BUILTIN_DIR, mine])}
    assert set(merged) == set(builtin) and merged["fold-topk-k"].title == "Mine"
    monkeypatch.setenv("ONNX_SURGERY_RULES", str(mine))
    assert default_dirs() == [mine] and [r.id for r in load_rules()] == ["fold-topk-k"]
    (mine / "y.yaml").write_text(GOOD.replace("my-rule", "fold-topk-k"))
    with pytest.raises(RuleError, match=r"y.yaml:1: field 'id': 'fold-topk-k' is also the id of .*x.yaml"):
        load_rules([mine])
    with pytest.raises(RuleError, match="no such rules folder"):
        load_rules([tmp_path / "absent"])


def test_a_folder_parsed_once_is_read_from_the_cache_until_a_file_changes(tmp_path, monkeypatch):
    import os

    from surgery.rulebook import loader

    monkeypatch.setenv("ONNX_SURGERY_CACHE", str(tmp_path / "cache"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "x.yaml").write_text(GOOD)
    assert [r.title for r in load_rules([mine])] == ["A rule"]
    (kept,) = loader.cache_folder().glob("*.pickle")
    assert kept.stat().st_mode & 0o777 == 0o600 and not list(loader.cache_folder().glob("*.part"))

    parsed = []
    real = loader.load_rule_text
    monkeypatch.setattr(loader, "load_rule_text", lambda *a: parsed.append(a[1]) or real(*a))
    again = load_rules([mine])
    assert parsed == [] and [(r.id, r.title, r.path) for r in again] == [
        ("my-rule", "A rule", str(mine / "x.yaml"))
    ]

    (mine / "x.yaml").write_text(GOOD.replace("A rule", "An edited rule"))  # an edit: parsed again
    assert [r.title for r in load_rules([mine])] == ["An edited rule"] and parsed == [str(mine / "x.yaml")]
    (mine / "y.yaml").write_text(
        "id: [broken\n"
    )  # an added file that does not parse: its error, not the cache
    with pytest.raises(RuleError, match="y.yaml"):
        load_rules([mine])
    (mine / "y.yaml").unlink()

    parsed.clear()
    for f in loader.cache_folder().glob("*.pickle"):
        f.write_bytes(b"not a pickle")  # unreadable: parsed again, and written again
    assert [r.title for r in load_rules([mine])] == ["An edited rule"] and len(parsed) == 1
    kept = max(
        loader.cache_folder().glob("*.pickle"), key=lambda f: f.stat().st_mtime_ns
    )  # the one just read
    kept.unlink()
    os.mkfifo(kept)  # a FIFO where the cache file was: not opened (the read would block), parsed again
    parsed.clear()
    assert [r.title for r in load_rules([mine])] == ["An edited rule"] and len(parsed) == 1
    os.chmod(loader.cache_folder(), 0o777)  # a folder others may write in: its files are not read
    parsed.clear()
    assert [r.title for r in load_rules([mine])] == ["An edited rule"] and len(parsed) == 1
