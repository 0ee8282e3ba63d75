"""TVM as a target: the Relax ONNX frontend (`tvm.relax.frontend.onnx.from_onnx`) in an isolated process.

The frontend names unsupported op *types* (OpNotImplemented), never nodes, and it ignores op domains — a
`com.example::Relu` would be imported as a standard Relu. So: unsupported types map to their nodes; any
custom-domain node is rejected here with that reason; any other failure is narrowed down by probing single
nodes (in the same process, deduplicated by signature)."""

from __future__ import annotations

import importlib.util
import re
import time

from onnx import ModelProto

from surgery.backends.base import (
    Availability,
    BuildsWithSurgeryBuild,
    Evidence,
    Report,
    Status,
    Verdict,
    package_version,
)
from surgery.backends.isolate import call_isolated
from surgery.graph import node_keys

TIMEOUT_S = 300.0
STANDARD = ("", "ai.onnx")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines() or [type(exc).__name__]
    return f"{type(exc).__name__}: {text[0][:300]}"


def _import(data: bytes) -> str | None:
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    try:
        from_onnx(onnx.load_from_string(data))
        return None
    except Exception as exc:  # the frontend's refusal is the verdict
        return _first_line(exc)


def _check(data: bytes) -> dict:
    """In the isolated process: whole model, then (if needed) every distinct node signature alone."""
    import tvm
    from onnx import ModelProto as MP

    from surgery.backends.probe import isolate, signature
    from surgery.graph import GraphFacts

    error = _import(data)
    out = {"version": tvm.__version__, "error": error, "probes": {}, "calls": 1}
    if error is None or "OpNotImplemented" in error:
        return out
    model = MP()
    model.ParseFromString(data)
    facts = GraphFacts.of(model)
    seen: dict[tuple, str | None] = {}
    for i in range(len(model.graph.node)):
        sig = signature(facts, i)
        if sig not in seen:
            seen[sig] = _import(isolate(facts, i).SerializeToString())
            out["calls"] += 1
        out["probes"][i] = seen[sig]
    return out


class TVMBackend(BuildsWithSurgeryBuild):
    id = "tvm"

    def __init__(self):
        self.version = package_version("apache-tvm")
        self.label = f"TVM {self.version} (Relax, llvm)".replace("  ", " ")

    def availability(self) -> Availability:
        if importlib.util.find_spec("tvm") is None:
            return Availability(False, "apache-tvm not installed (pip install 'onnx-surgery[tvm]')")
        return Availability(True, f"TVM {self.version}, Relax ONNX frontend, llvm target")

    def check(self, model: ModelProto, base_dir: str | None = None) -> Report:
        t0 = time.perf_counter()
        out = call_isolated("surgery.backends.tvm:_check", model.SerializeToString(), timeout=TIMEOUT_S)
        report = Report(self.id, self.label, self.version, backend_calls=out["calls"])
        error = out["error"] or ""
        missing = set()
        m = re.search(r"not supported for frontend ONNX: (.*)", error)
        if m:
            missing = {x.strip() for x in m.group(1).split(",")}
        evidence = Evidence("whole model", f"TVM {out['version']} Relax ONNX frontend")
        for i, (key, node) in enumerate(zip(node_keys(model.graph.node), model.graph.node)):
            status, message, ev = Status.SUPPORTED, "", evidence
            if node.domain not in STANDARD and node.domain != "ai.onnx.ml":
                status = Status.REJECTED
                message = (
                    f"custom op {node.domain}::{node.op_type}: TVM's ONNX frontend ignores op domains"
                    + (
                        f" and has no converter for {node.op_type}"
                        if node.op_type in missing
                        else f" and would import it as the standard {node.op_type}, which it is not"
                    )
                )
            elif node.op_type in missing:
                status, message = (
                    Status.REJECTED,
                    f"OpNotImplemented: The following operators are not supported "
                    f"for frontend ONNX: {node.op_type}",
                )
            elif i in out["probes"] and out["probes"][i]:
                status, message = Status.REJECTED, out["probes"][i]
                ev = Evidence("probe", f"TVM {out['version']}, one-node model")
            report.verdicts.append(
                Verdict(key, i, node.op_type, status, message, "FRONTEND" if message else "", ev)
            )
        report.accepted = not error and not report.rejected
        if error and not report.rejected:
            report.messages.append(error)
        report.seconds = time.perf_counter() - t0
        return report
