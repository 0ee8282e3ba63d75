"""The words every surface shares for what a backend said about a model: the status of a node (supported,
rejected, unknown), the stage it was said at, the model's outcome, the verdicts and messages with their evidence,
a report per target, and how the backend's words are labelled (`speaker`, `said_line`, `where_said`). The ground
floor: backends, the rule engine, the views, the CLI and the app all read these; this module reads none of them."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from surgery.text import first_line, telling_line


class Safety(StrEnum):
    """What a fix promises about the numbers: verification holds it to this."""

    EXACT = "exact"  # same numbers (within fp32 rounding of reordered math)
    APPROXIMATE = "approximate"  # close numbers (e.g. a cast, an approximation)
    CHANGES_SEMANTICS = "changes-semantics"  # different behaviour on purpose (e.g. a plugin, freezing shapes)


class Status(StrEnum):
    SUPPORTED = "supported"
    REJECTED = "rejected"
    UNKNOWN = "unknown"


class Stage(StrEnum):
    """Where a backend refuses: its ONNX parser / importer / frontend, its engine build / compile / codegen, or
    running the result."""

    PARSE = "parse"
    BUILD = "build"
    RUN = "run"


class Outcome(StrEnum):
    """One answer per report, the same in the CLI, JSON, SARIF and the app."""

    ACCEPTS = "accepts"
    REJECTS = "rejects"
    CANNOT_CONFIRM = "cannot confirm"  # nothing rejected, but some verdict is unknown
    UNAVAILABLE = "unavailable"  # the backend cannot run here


@dataclass(frozen=True)
class Evidence:
    source: str  # "live parser" | "live builder" | "probe" | "support table" | "whole model" | "crash"
    detail: str = ""  # "TensorRT-RTX 1.7.1.116 ONNX parser", "onnx-tensorrt docs/operators.md @ 8.2-GA", ...


@dataclass
class Verdict:
    """A backend's answer on one node. `words` is only ever the backend's exact text (from this run, or recorded
    from a real run / its source, as `words_from` says); `explanation` is ours and is shown apart from it."""

    node: str  # node key (surgery.graph.node_keys)
    index: int  # index in graph.node, -1 when not tied to a node
    op_type: str
    status: Status
    code: str = ""  # the backend's error code, e.g. UNSUPPORTED_NODE
    words: str = ""  # the backend's own words, verbatim
    explanation: str = ""  # ours: what it means, the detail the backend did not print
    stage: Stage = Stage.PARSE
    evidence: Evidence = field(default_factory=lambda: Evidence("unknown"))
    words_from: str = ""  # "live" (this run; "live, in FUNC"), else where the words were recorded
    checks: tuple[str, ...] = ()  # the predictor's check ids that failed (rules declare which they answer)
    inputs: tuple[str, ...] = ()  # the node's inputs the refusal is about, where it names some ('axes')

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["stage"] = self.stage.value
        return d

    def reason(self) -> str:
        """One line for lists and tooltips: the backend's words when it gave any (their telling line), else our
        explanation."""
        return telling_line(self.words) if self.words else first_line(self.explanation)


@dataclass
class Message:
    """A model-level message (not tied to one node), with the same words / explanation split as a Verdict."""

    level: str  # "error" | "warning" | "info"
    words: str = ""
    explanation: str = ""
    code: str = ""
    stage: Stage = Stage.PARSE
    words_from: str = ""

    def text(self) -> str:
        return self.words or self.explanation

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stage"] = self.stage.value
        return d


LIVE = "live"  # words_from of text printed by the backend in this run ("live, in FUNC" names its function)


def is_live(words_from: str) -> bool:
    return words_from == LIVE or words_from.startswith(LIVE + ", ")


SPEAKER = {Stage.PARSE: "parser says", Stage.BUILD: "builder says", Stage.RUN: "backend says"}


def speaker(backend: str, stage: Stage) -> str:
    """Whose words these are, as every view labels them: the parser's or the builder's (onnxruntime's session
    creation is both; "" for a backend not named: by its stage alone)."""
    return "onnxruntime says" if backend.split("@")[0] == "onnxruntime" else SPEAKER[stage]


def said_line(who: str, words: str, explanation: str, words_from: str = "") -> str:
    """The backend's words and our explanation in one line, told apart: `who: “telling line”` (… where more was
    said; for words not from this run, "(recorded)" from a real run or "(from its source)" as written in the
    backend's source), then `why: …`. Both where both exist: a bare word ("false", a parser's failed condition)
    says little without the explanation."""
    parts = []
    if words:
        more = "…" if len([x for x in words.splitlines() if x.strip()]) > 1 else ""
        origin = ""
        if words_from and not is_live(words_from):
            origin = " (from its source)" if words_from.startswith("as written") else " (recorded)"
        parts.append(f"{who}{origin}: “{telling_line(words)}{more}”")
    if explanation:
        parts.append(f"why: {first_line(explanation)}")
    return " — ".join(parts)


def where_said(words_from: str) -> str:
    """Where the words come from, as shown beside them: nothing for this run's words, the backend's function
    when it named one ("in getReduceAxisMask"), else the recording or source they were taken from."""
    if words_from == LIVE:
        return ""
    return words_from[len(LIVE) + 2 :] if is_live(words_from) else words_from


@dataclass(frozen=True)
class VerdictGroup:
    """Verdicts that say the same thing: one status, stage and code, the same words (recorded in the same place)
    and the same explanation."""

    status: Status
    stage: Stage
    code: str
    words: str
    words_from: str
    explanation: str
    verdicts: tuple[Verdict, ...]

    def evidence(self) -> Evidence | None:
        """The evidence every verdict of the group shares, else None."""
        first = self.verdicts[0].evidence
        return first if all(v.evidence == first for v in self.verdicts) else None

    def nodes(self, limit: int = 2) -> str:
        """Its op types with their counts and the first nodes' names: "Foo ×17 ('a', 'b', …)"."""
        ops = Counter(v.op_type for v in self.verdicts)
        kinds = ", ".join(f"{op} ×{n}" if n > 1 else op for op, n in ops.most_common())
        names = ", ".join(f"'{v.node}'" for v in self.verdicts[:limit])
        return f"{kinds} ({names}{', …' if len(self.verdicts) > limit else ''})"


# codes of model-level errors that say the check did not finish (the backend died or timed out, or onnx-surgery
# failed around it): no verdict on the model, so never a refusal
CHECK_DID_NOT_FINISH = frozenset({"CRASH", "ERROR"})


@dataclass
class Report:
    backend: str  # id, e.g. "tensorrt-static@8.2"
    label: str
    version: str
    verdicts: list[Verdict] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)  # model-level messages (not tied to one node)
    accepted: bool | None = None  # whole-model outcome where the backend gave one
    seconds: float = 0.0
    backend_calls: int = 0
    depth: Stage = Stage.PARSE  # how far the check went: parse, or parse + build

    @property
    def rejected(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status is Status.REJECTED]

    @property
    def unknown(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status is Status.UNKNOWN]

    @property
    def errors(self) -> list[Message]:
        return [m for m in self.messages if m.level == "error"]

    @property
    def refusals(self) -> list[Message]:
        """The model-level errors in which the backend refuses the model (an input's type, a frontend failing the
        whole model, a build failure not tied to a node); not those saying the check itself did not finish."""
        return [m for m in self.errors if m.code not in CHECK_DID_NOT_FINISH]

    @property
    def outcome(self) -> Outcome:
        """accepts / rejects / cannot confirm / unavailable: the one place this is decided. A refusal not tied to
        a node rejects as a rejected node does; cannot confirm only when nothing was refused and some node has no
        verdict (or the check did not finish)."""
        if self.accepted is None and not self.verdicts:
            return Outcome.UNAVAILABLE
        if self.rejected or self.refusals:
            return Outcome.REJECTS
        if self.unknown or self.accepted is False or self.errors:
            return Outcome.CANNOT_CONFIRM
        return Outcome.ACCEPTS

    def reasons(self) -> list[str]:
        """Why the outcome is not 'accepts', in one line each: model-level errors, then the first rejected or
        unknown verdicts' reasons (deduplicated)."""
        out = [first_line(m.text()) for m in self.errors]
        for v in self.rejected or self.unknown:
            line = f"{v.op_type} '{v.node}': {v.reason()}"
            if line not in out:
                out.append(line)
        return out

    def groups(self) -> list[VerdictGroup]:
        """The rejected and unknown verdicts grouped by what was said, in the order each was first said."""
        groups: dict[tuple, list[Verdict]] = {}
        for v in self.verdicts:
            if v.status is not Status.SUPPORTED:
                key = (v.status, v.stage, v.code, v.words, v.words_from, v.explanation)
                groups.setdefault(key, []).append(v)
        return [VerdictGroup(*key, tuple(vs)) for key, vs in groups.items()]

    def by_node(self) -> dict[str, Verdict]:
        return {v.node: v for v in self.verdicts}

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "label": self.label,
            "version": self.version,
            "outcome": self.outcome.value,
            "depth": self.depth.value,
            "accepted": self.accepted,
            "seconds": round(self.seconds, 4),
            "backend_calls": self.backend_calls,
            "messages": [m.to_dict() for m in self.messages],
            "verdicts": [v.to_dict() for v in self.verdicts],
        }
