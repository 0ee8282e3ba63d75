"""onnxruntime as a target: can this onnxruntime (CPU) create a session for the model, and if not, which nodes
are to blame. Whole-model check first; when it fails, nodes are probed one by one (cached by signature)."""

from __future__ import annotations

import time

from onnx import ModelProto

from surgery.backends.base import (
    Availability,
    BuildsWithSurgeryBuild,
    Evidence,
    Report,
    Status,
    Verdict,
)
from surgery.backends.probe import probe_nodes
from surgery.graph import GraphFacts


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    for prefix in (
        "[ONNXRuntimeError] : 1 : FAIL : ",
        "[ONNXRuntimeError] : 10 : INVALID_GRAPH : ",
        "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : ",
    ):
        text = text.replace(prefix, "")
    return text.splitlines()[0][:500] if text else type(exc).__name__


class OnnxRuntimeBackend(BuildsWithSurgeryBuild):
    id = "onnxruntime"

    def __init__(self):
        import onnxruntime

        self.version = onnxruntime.__version__
        self.label = f"onnxruntime {self.version} (CPU)"

    def availability(self) -> Availability:
        return Availability(True, f"onnxruntime {self.version}, CPUExecutionProvider")

    def _session_error(self, model: ModelProto, base_dir=None) -> str | None:
        from surgery.ort import make_session

        try:
            make_session(model, base_dir)
            return None
        except Exception as exc:
            return _first_line(exc)

    def check(self, model: ModelProto, base_dir: str | None = None) -> Report:
        t0 = time.perf_counter()
        facts = GraphFacts.of(model)
        report = Report(self.id, self.label, self.version)
        error = self._session_error(model, base_dir)
        report.backend_calls = 1
        nodes = model.graph.node
        if error is None:
            report.accepted = True
            report.verdicts = [
                Verdict(k, i, n.op_type, Status.SUPPORTED, evidence=Evidence("whole model", self.label))
                for i, (k, n) in enumerate(zip(facts.keys, nodes))
            ]
            report.seconds = time.perf_counter() - t0
            return report
        report.accepted = False

        def ask(probe: ModelProto) -> tuple[bool, str]:
            err = self._session_error(probe)
            return (err is None, err or "")

        verdicts, calls = probe_nodes(facts, ask, (self.id, self.version))
        report.backend_calls += calls
        for i, (key, node) in enumerate(zip(facts.keys, nodes)):
            ok, message = verdicts[i]
            report.verdicts.append(
                Verdict(
                    key,
                    i,
                    node.op_type,
                    Status.SUPPORTED if ok else Status.REJECTED,
                    message,
                    "" if ok else "SESSION_CREATION",
                    Evidence("probe", f"{self.label}, one-node model"),
                )
            )
        if not report.rejected:
            # every node works alone: the whole-model error is about how they fit; blame the node it names
            named = [
                v for v in report.verdicts if v.node and (f"'{v.node}'" in error or f"({v.node})" in error)
            ]
            for v in named[:1]:
                v.status, v.message, v.code = Status.REJECTED, error, "SESSION_CREATION"
                v.evidence = Evidence("whole model", self.label)
            if not named:
                report.messages.append(error)
        report.seconds = time.perf_counter() - t0
        return report
