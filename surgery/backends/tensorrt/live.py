"""The live TensorRT parser as a target: full TensorRT where it is installed with a GPU, else TensorRT-RTX
(PyPI `tensorrt-rtx-cu12`, same Python API, parses and builds without a GPU). Every check runs in an isolated
process (surgery.backends.tensorrt.worker) with a time limit: a parser crash becomes a verdict."""

from __future__ import annotations

import importlib.util
import time

from onnx import ModelProto

from surgery.backends.base import (
    LIVE,
    Availability,
    Evidence,
    Message,
    Report,
    Stage,
    Status,
    Verdict,
    package_version,
)
from surgery.backends.build import BuiltHere
from surgery.graph import node_keys
from surgery.isolate import BackendCrash, call_isolated

TIMEOUT_S = 300.0
# ops whose TensorRT-RTX importer asks for a plugin that RTX does not ship, where full TensorRT adds a layer:
# RTX 1.7.1 on NonZero says "NonZero plugin creator version 1 was not found in plugin registry" (checked live);
# full TensorRT's importer adds an INonZeroLayer (onnx/onnx-tensorrt onnxOpImporters.cpp NonZero @ 96e7811)
RTX_PLUGIN_IMPORTERS = {"NonZero": "NonZero"}


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _said_in(func: str) -> str:
    return f"{LIVE}, in {func}" if func else LIVE


def _explain(model: ModelProto, report: Report, got_funcs: dict[int, str], version: str, live: str) -> None:
    """Our explanation beside the parser's words: the predictor's, where it refuses the same node in the same
    parser function (the newest parser it knows stands for the live one). The words stay the live parser's.
    A node the live parser never reached (it stopped at an error not tied to a node) gets the predictor's verdict
    instead of none, marked as predicted in its explanation and evidence."""
    todo = [v for v in report.verdicts if v.status is Status.REJECTED and not v.explanation]
    unreached = [
        v for v in report.verdicts if v.status is Status.UNKNOWN and v.explanation.startswith(NOT_REACHED)
    ]
    if not todo and not unreached:
        return
    from surgery.backends.tensorrt.predictor import make
    from surgery.backends.tensorrt.records import check_by_id, nearest_version

    stand_in = nearest_version(version)
    predicted = make(stand_in).check(model).verdicts
    checks = check_by_id()
    for v in todo:
        p = predicted[v.index]
        funcs = {checks[c].func for c in p.checks if c in checks}
        if p.status is Status.REJECTED and got_funcs.get(v.index) in funcs:
            # the predictor words it for the version standing in; the parser that spoke is the live one
            v.explanation = p.explanation.replace(f"TensorRT {stand_in}", live)
    for v in unreached:
        p = predicted[v.index]
        if p.status is Status.UNKNOWN:
            continue
        why = f"predicted for TensorRT {stand_in}: {live}'s parser did not reach this node ({v.explanation})"
        v.status, v.code, v.stage, v.checks, v.inputs = p.status, p.code, p.stage, p.checks, p.inputs
        v.words, v.words_from = p.words, p.words_from  # the predictor's words, with where they were recorded
        v.explanation = why + (f"; {p.explanation}" if p.explanation else "")
        v.evidence = Evidence("support table", f"predicted, {p.evidence.detail}")


NOT_REACHED = "not reached"  # how tensorrt_worker explains a node the parser never got to


class TensorRTBackend(BuiltHere):
    id = "tensorrt"

    def __init__(self):
        if _installed("tensorrt") and package_version("tensorrt"):
            self.flavour, self.version = "TensorRT", package_version("tensorrt")
        else:
            self.flavour = "TensorRT-RTX"
            self.version = package_version("tensorrt-rtx-cu12", "tensorrt_rtx")
        self.label = f"{self.flavour} {self.version} (live parser)".replace("  ", " ")

    def availability(self) -> Availability:
        if self.flavour == "TensorRT":
            return Availability(True, f"TensorRT {self.version}")
        if not _installed("tensorrt_rtx"):
            return Availability(
                False,
                "neither tensorrt nor tensorrt_rtx is installed (pip install 'onnx-surgery[tensorrt-rtx]')",
            )
        return Availability(
            True,
            f"tensorrt not installed — live checks use TensorRT-RTX {self.version} "
            "(no GPU needed: parse and ahead-of-time build only)",
        )

    def _rtx_caveat(self, op: str, words: str) -> str | None:
        """TensorRT-RTX ships 2 plugin creators; full TensorRT imports these ops through its plugin library."""
        if self.flavour != "TensorRT-RTX":
            return None
        from surgery.backends.tensorrt.records import plugin_importers, standard_plugin_names

        if op in RTX_PLUGIN_IMPORTERS and ("plugin" in words.lower() or "creator" in words):
            return (
                f"TensorRT-RTX has no {RTX_PLUGIN_IMPORTERS[op]} plugin (its {op} importer asks for one); full "
                f"TensorRT imports {op} with a layer of its own, so this verdict cannot be confirmed here"
            )
        # the standard plugin library as data (data/plugins.json): names of any version
        plugin = plugin_importers().get(op) or (op if op in standard_plugin_names() else None)
        # ScatterElements with a reduction is imported through the standard plugin ScatterElements v2
        # (onnxOpImporters.cpp:5436 @ 10.10-GA); without it RTX says only "Unsupported reduction type"
        missing = "plugin" in words.lower() or "creator" in words
        if plugin and (missing or (op == "ScatterElements" and "Unsupported reduction type" in words)):
            return (
                f"TensorRT-RTX has no {plugin} plugin; full TensorRT 10 imports {op} through its standard "
                "plugin library, so this verdict cannot be confirmed here"
            )
        return None

    def check(self, model: ModelProto, base_dir: str | None = None, depth: Stage = Stage.PARSE) -> Report:
        t0 = time.perf_counter()
        report = Report(self.id, self.label, self.version)
        try:
            out = call_isolated(
                "surgery.backends.tensorrt.worker:check",
                model.SerializeToString(),
                base_dir,
                timeout=TIMEOUT_S,
            )
        except BackendCrash as exc:
            raise BackendCrash(
                f"{exc} while the {self.flavour} parser checked the model", exc.detail
            ) from None
        report.backend_calls = out["parses"]
        report.messages = [
            Message("error", words=e["desc"], code=e["code"], words_from=_said_in(e["func"]))
            for e in out["messages"]
        ]
        evidence = Evidence("live parser", f"{self.flavour} {out['version']} ONNX parser")
        for i, (key, node) in enumerate(zip(node_keys(model.graph.node), model.graph.node)):
            got = out["verdicts"].get(i) or {
                "status": "unknown",
                "code": "",
                "words": "",
                "func": "",
                "explanation": "the parser gave no verdict for this node",
            }
            status, explanation = got["status"], got["explanation"]
            caveat = self._rtx_caveat(node.op_type, got["words"]) if status == "rejected" else None
            if caveat:
                status, explanation = "unknown", caveat
            report.verdicts.append(
                Verdict(
                    key,
                    i,
                    node.op_type,
                    Status(status),
                    got["code"],
                    words=got["words"],
                    explanation=explanation,
                    evidence=evidence,
                    words_from=_said_in(got["func"]) if got["words"] else "",
                )
            )
        funcs = {i: v.get("func", "") for i, v in out["verdicts"].items()}
        version = self.version if self.flavour == "TensorRT" else ""
        _explain(model, report, funcs, version, f"{self.flavour} {out['version']}")
        report.accepted = out["accepted"]
        report.seconds = time.perf_counter() - t0
        return report
