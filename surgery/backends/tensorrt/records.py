"""TensorRT's parser as data, read once: the versions and their operator tables (data/tensorrt_support.json, made
from onnx-tensorrt's docs/operators.md per branch by scripts/build_trt_support.py), the version cut-offs
(data/versions.json), the standard plugin library (data/plugins.json), and the parser's checks (data/checks.yaml:
one record per check with its ops, versions, stage, error code, function, our explanation, the source of the
fact, a fixture) with the parser's exact words where they are known: recorded from a real TensorRT-RTX run on
the fixture (data/recorded-tensorrt-rtx.json, by scripts/record_trt_words.py) or as they stand in the parser's
source at a tag."""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import onnx
import yaml
from onnx import ModelProto

DATA_DIR = Path(__file__).resolve().parent / "data"
TABLES_PATH = DATA_DIR / "tensorrt_support.json"
CHECKS_PATH = DATA_DIR / "checks.yaml"
RECORDED_PATH = DATA_DIR / "recorded-tensorrt-rtx.json"
PLUGINS_PATH = DATA_DIR / "plugins.json"
VERSIONS_PATH = DATA_DIR / "versions.json"


@cache
def version_facts() -> dict:
    """Cut-offs and op lists beside the tables (data/versions.json, each with its source)."""
    return json.loads(VERSIONS_PATH.read_text())


LOCAL_FUNCTIONS_SINCE = version_facts()["local_functions_since"]["version"]
N_WITHOUT_CHECKER = set(version_facts()["no_static_checker"]["ops"])
UINT8_OK_OPS = set(version_facts()["uint8_input_ops"]["ops"])
UINT8_OUTPUT_OK_OPS = set(version_facts()["uint8_output_ops"]["ops"])


@cache  # a handful of version strings, compared per node by the predictor (450k calls at 50k nodes)
def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


@cache
def support_data() -> dict:
    return json.loads(TABLES_PATH.read_text())


SUPPORTED_VERSIONS = sorted(support_data()["versions"], key=version_tuple)
# a major version alone is its newest minor version with data
ALIASES = {
    major: [v for v in SUPPORTED_VERSIONS if v.split(".")[0] == major][-1] for major in ("8", "9", "10", "11")
}


def resolve_version(version: str) -> str:
    v = ALIASES.get(version, version)
    if v not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"no support data for TensorRT {version}. Note: available: {', '.join(SUPPORTED_VERSIONS)}"
        )
    return v


def nearest_version(version: str) -> str:
    """The newest version with support data at or before `version` (a live TensorRT's "10.13.0.35"), else the
    newest of all (TensorRT-RTX numbers its releases apart: its parser follows the newest onnx-tensorrt)."""
    try:
        major_minor = tuple(int(x) for x in str(version).split(".")[:2])
    except ValueError:
        return SUPPORTED_VERSIONS[-1]
    older = [v for v in SUPPORTED_VERSIONS if version_tuple(v) <= major_minor]
    return older[-1] if older and major_minor >= (8, 0) else SUPPORTED_VERSIONS[-1]


def version_table(version: str) -> dict:
    """The operator table a version uses, with the ops its changelog adds."""
    entry = support_data()["versions"][version]
    table = support_data()["tables"][entry["table"]]
    return {**table, **entry, "ops": {**table["ops"], **entry["added_ops"]}}


# -- the standard plugin library (data/plugins.json) ----------------------------------------------------


@cache
def plugin_data() -> dict:
    return json.loads(PLUGINS_PATH.read_text())


def shipped(entry: dict, version: str) -> bool:
    """Whether the TensorRT `version` ships this standard plugin creator."""
    return version in entry["shipped"]


def standard_plugin(name: str, plugin_version: str, namespace: str, version: str) -> dict | None:
    """The standard plugin creator the fallback importer finds for a node of op type `name` on TensorRT `version`
    (the node's plugin_version / plugin_namespace attributes, defaults "1" and ""), else None."""
    for e in plugin_data()["plugins"]:
        if (e["name"], e["version"], e["namespace"]) == (name, plugin_version, namespace) and shipped(
            e, version
        ):
            return e
    return None


def plugin_history(name: str) -> list[dict]:
    """Every version of the standard plugin creator `name` the data knows (empty: not a standard plugin)."""
    return [e for e in plugin_data()["plugins"] if e["name"] == name]


def standard_plugin_names(version: str | None = None) -> set[str]:
    """Creator names of the standard plugin library: of `version`, or of any version."""
    return {e["name"] for e in plugin_data()["plugins"] if version is None or shipped(e, version)}


def plugin_importers() -> dict[str, str]:
    """Standard ops whose importer creates a standard plugin: op type -> plugin creator name."""
    return {op: row["plugin"] for op, row in plugin_data()["importers"].items()}


def removed_after(name: str, version: str) -> tuple[str, dict] | None:
    """(the last version that shipped it, its entry) when `name` is a standard plugin that `version` no longer
    ships but an older version did."""
    older = [
        (v, e)
        for e in plugin_history(name)
        for v in e["shipped"]
        if version_tuple(v) < version_tuple(version)
    ]
    if not older or any(shipped(e, version) for e in plugin_history(name)):
        return None
    return max(older, key=lambda x: version_tuple(x[0]))


# -- the check records -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Words:
    """The backend's exact text for a version range, as a template over the check's values, and where from."""

    since: str
    until: str
    template: str
    source: str  # where the text was recorded or stands


@dataclass(frozen=True)
class Check:
    id: str
    ops: tuple[str, ...]
    since: str
    until: str
    stage: str
    code: str
    func: str
    test: str
    args: dict
    explanation: str
    words: tuple[Words, ...]
    source: str
    fixture: str
    unshape: tuple[str, ...] = ()
    reproduces_on_rtx: bool = False
    fixture_versions: tuple[str, str] | None = (
        None  # where the fixture is refused, when narrower than versions
    )

    def applies(self, version: str) -> bool:
        return version_tuple(self.since) <= version_tuple(version) <= version_tuple(self.until)

    def words_for(self, version: str) -> Words | None:
        return next(
            (
                w
                for w in self.words
                if version_tuple(w.since) <= version_tuple(version) <= version_tuple(w.until)
            ),
            None,
        )


def _range(text: str) -> tuple[str, str]:
    lo, _, hi = str(text).partition("-")
    return lo.strip(), (hi or lo).strip()


@cache
def recorded_words() -> dict:
    return json.loads(RECORDED_PATH.read_text()) if RECORDED_PATH.exists() else {"words": {}}


@cache
def load_checks() -> tuple[Check, ...]:
    recorded = recorded_words()
    with_what = recorded.get("recorded_with", "TensorRT-RTX")
    on = recorded.get("recorded_on", "")
    out = []
    for rec in yaml.safe_load(CHECKS_PATH.read_text()):
        words = []
        for w in rec.get("words") or []:
            lo, hi = _range(w["versions"])
            if w.get("recorded"):
                got = recorded["words"].get(rec["id"])
                if got is None:
                    continue  # not recorded (yet): our explanation only
                what = "builder" if w["recorded"] == "builder" else "parser"
                source = f"recorded from {with_what}'s {what} on this check's fixture, {on}"
                words.append(Words(lo, hi, w.get("template") or _escape(got["text"]), source))
            else:  # not from a run: say so, so that it reads apart from recorded words
                words.append(Words(lo, hi, w["text"], f"as written in the parser's source, {w['from']}"))
        lo, hi = _range(rec["versions"])
        out.append(
            Check(
                rec["id"],
                tuple(rec.get("ops") or ()),
                lo,
                hi,
                rec["stage"],
                rec["code"],
                rec["func"],
                rec["test"],
                dict(rec.get("args") or {}),
                rec["explanation"],
                tuple(words),
                rec["source"],
                rec["fixture"],
                tuple(rec.get("unshape") or ()),
                bool(rec.get("reproduces_on_rtx")),
                _range(rec["fixture_versions"]) if rec.get("fixture_versions") else None,
            )
        )
    return tuple(out)


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


@cache
def check_by_id() -> dict[str, Check]:
    return {c.id: c for c in load_checks()}


def fixture_model(check: Check) -> ModelProto:
    """The check's fixture as a model (ONNX text format; `unshape` inputs lose their declared shape)."""
    model = onnx.parser.parse_model(check.fixture)
    for vi in model.graph.input:
        if vi.name in check.unshape:
            vi.type.tensor_type.ClearField("shape")
    return model


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def fill_words(template: str, values: dict, *, strict: bool) -> str:
    """The template with the values; strict: '' when a value the template needs is missing."""
    try:
        return template.format_map(values if strict else _Blank(values))
    except (KeyError, IndexError, ValueError):
        return ""


def words_need(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}
