"""Read rule files safely: a size limit and a depth limit before parsing, `yaml.safe_load` (a rule file never
runs code), then schema validation with file:line in every message."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from surgery.rulebook.schema import Rule, RuleError, validate

MAX_BYTES = 256 * 1024
MAX_DEPTH = 32
BUILTIN_DIR = Path(__file__).resolve().parent.parent.parent / "rules"


def default_dirs() -> list[Path]:
    env = os.environ.get("ONNX_SURGERY_RULES")
    return [Path(p) for p in env.split(os.pathsep)] if env else [BUILTIN_DIR]


def _check_depth(text: str, path: str) -> None:
    depth = 0
    for token in yaml.scan(text):  # the scanner is iterative: a deep file cannot crash it
        if isinstance(
            token,
            yaml.BlockMappingStartToken
            | yaml.BlockSequenceStartToken
            | yaml.FlowMappingStartToken
            | yaml.FlowSequenceStartToken,
        ):
            depth += 1
            if depth > MAX_DEPTH:
                line = token.start_mark.line + 1
                raise RuleError(f"{path}:{line}: nested deeper than {MAX_DEPTH} levels; not a rule file")
        elif isinstance(token, yaml.BlockEndToken | yaml.FlowMappingEndToken | yaml.FlowSequenceEndToken):
            depth -= 1


def _locator(path: str, root):
    def where(field: str) -> str:
        node, line = root, (root.start_mark.line + 1 if root is not None else 1)
        for part in [p for p in field.split(".") if p]:
            if not isinstance(node, yaml.MappingNode):
                break
            for k, v in node.value:
                if str(k.value) == part:
                    node, line = v, k.start_mark.line + 1
                    break
            else:
                break
        return f"{path}:{line}"

    return where


def load_rule_text(text: str, path: str = "<rule>") -> Rule:
    if len(text.encode()) > MAX_BYTES:
        raise RuleError(
            f"{path}:1: {len(text.encode())} bytes, over the {MAX_BYTES}-byte limit for a rule file"
        )
    try:
        _check_depth(text, path)
        loader = yaml.SafeLoader(text)  # safe: plain data only, no tags that build Python objects
        try:
            root = loader.get_single_node()  # the node tree keeps each field's line for messages
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise RuleError(f"{path}:{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    rule = validate(data, _locator(path, root))
    rule.path = path
    return rule


def load_rule(path: str | Path) -> Rule:
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise RuleError(f"{path}:1: {size} bytes, over the {MAX_BYTES}-byte limit for a rule file")
    return load_rule_text(path.read_text(), str(path))


def load_rules(dirs=None) -> list[Rule]:
    """Every *.yaml/*.yml rule in the folders (later folders override earlier ones by id)."""
    rules: dict[str, Rule] = {}
    for d in [Path(x) for x in (dirs or default_dirs())]:
        if not d.is_dir():
            raise RuleError(f"{d}: no such rules folder")
        here: dict[str, Rule] = {}
        for path in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
            rule = load_rule(path)
            if rule.id in here:
                raise RuleError(
                    f"{path}:1: field 'id': '{rule.id}' is also the id of {here[rule.id].path}. "
                    "Note: ids are unique within a folder (a later folder may replace a rule on purpose)"
                )
            here[rule.id] = rule
        rules.update(here)
    return list(rules.values())
