"""TVM as a target: the Relax ONNX frontend (`tvm.relax.frontend.onnx.from_onnx`), always in an isolated process.

The frontend stops at the first problem and names unsupported op *types* (OpNotImplemented), never nodes. It also
ignores op domains: a `com.example::Relu` would be imported as a standard Relu. So:
- the whole model is imported first; if that works, every node is supported (no probing);
- otherwise every distinct node signature is imported alone (one isolated call for the batch, cached by
  signature across models), and the frontend's own words become the node's verdict;
- a node of a domain TVM has no converters for, which the frontend would import anyway (as the standard op of
  the same name), is rejected here with that reason.
"""

from __future__ import annotations

import threading
import time

from onnx import ModelProto

from surgery.backends.base import (
    Availability,
    Evidence,
    Message,
    Report,
    Stage,
    Status,
    Verdict,
    error_line,
    not_installed,
    package_version,
)
from surgery.backends.build import BuiltHere
from surgery.backends.probe import judge, probe_nodes
from surgery.graph import GraphFacts
from surgery.isolate import BackendCrash, call_isolated

TIMEOUT_S = 300.0
STANDARD = ("", "ai.onnx")
# The frontend's converters written for onnxruntime contrib ops (they are looked up by op type alone).
CONTRIB = {
    "com.microsoft": frozenset(
        {"Attention", "SkipLayerNormalization", "EmbedLayerNormalization", "FastGelu", "BiasGelu", "Gelu"}
    )
}


def _import(data: bytes | str, base_dir: str | None = None, imported: list | None = None) -> str | None:
    """In the isolated process: None when the frontend imports the model (its serialization, or the path of the
    file it was read from, unedited), else its first line of complaint. The Relax module goes to `imported` when
    given."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    try:
        if isinstance(data, str):  # the same bytes, parsed here: the caller need not serialize and send them
            model = onnx.load(data, load_external_data=False)
        else:
            model = onnx.load_from_string(data)
        if base_dir:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, base_dir)
        mod = from_onnx(model)
    except Exception as exc:  # the frontend's refusal is the verdict
        return error_line(exc)
    if imported is not None:
        imported.append(mod)
    return None


def _import_whole(data: bytes | str, base_dir: str | None = None, build: bool = False) -> tuple:
    """(TVM's version, the frontend's complaint or None, the builder's or None, the builder's label). With `build`
    a model that imports is compiled as `onnx-surgery build` compiles it untuned (surgery.backends.tvm.build):
    a check at depth build imports the model once, not once for the check and again for the build."""
    import tvm

    imported: list = []
    error = _import(data, base_dir, imported if build else None)
    if error is not None or not build:
        return tvm.__version__, error, None, ""
    from surgery.backends.tvm.build import compile_untuned

    return tvm.__version__, None, *compile_untuned(imported[0])


def _import_many(models: list[bytes], base_dir: str | None = None) -> list[str | None]:
    return [_import(m, base_dir) for m in models]


def _ask_many(models: list[ModelProto], base_dir: str | None = None) -> list[tuple[bool, str]]:
    """Probe a batch in one isolated call; if the batch crashes, ask one by one so only the culprit carries the
    crash."""
    blobs = [m.SerializeToString() for m in models]
    try:
        errors = call_isolated("surgery.backends.tvm.check:_import_many", blobs, base_dir, timeout=TIMEOUT_S)
    except BackendCrash:
        errors = []
        for blob in blobs:
            try:
                errors.append(
                    call_isolated("surgery.backends.tvm.check:_import", blob, base_dir, timeout=TIMEOUT_S / 4)
                )
            except BackendCrash as exc:
                errors.append(str(exc))
    return [(e is None, e or "") for e in errors]


def _in_background(func, *args):
    """Start `func(*args)` in a thread; returns a function that waits for its result (or raises its exception)."""
    out: dict = {}

    def run():
        try:
            out["value"] = func(*args)
        except BaseException as exc:  # handed to the caller, in its thread
            out["error"] = exc

    thread = threading.Thread(target=run, name="tvm-check-facts", daemon=True)
    thread.start()

    def result():
        thread.join()
        if "error" in out:
            raise out["error"]
        return out["value"]

    return result


def foreign(node) -> bool:
    """A node of a domain the frontend has no converter for (it would be imported as a standard op or fail)."""
    domain = node.domain or ""
    if domain in STANDARD:
        return False
    return node.op_type not in CONTRIB.get(domain, ())


class TVMBackend(BuiltHere):
    id = "tvm"

    def __init__(self):
        self.version = package_version("apache-tvm")
        self.label = f"TVM {self.version} (Relax, llvm)".replace("  ", " ")

    def availability(self) -> Availability:
        missing = not_installed("tvm", "tvm", "apache-tvm")
        if missing:
            return missing
        return Availability(True, f"TVM {self.version}, Relax ONNX frontend, llvm target")

    # the frontend imports what the Relax build then refuses (int64 literals, ...)
    default_depth = Stage.BUILD

    reads_file = True  # given the path of the unedited file, the worker reads it there (check's `path`)

    def check(
        self,
        model: ModelProto,
        base_dir: str | None = None,
        depth: Stage = Stage.PARSE,
        *,
        path: str | None = None,
    ) -> Report:
        """`path`: the file `model` was read from, unedited: the worker parses it there, instead of this process
        serializing the model (a copy as big as its weights) and sending it through a pipe."""
        t0 = time.perf_counter()
        build = depth is Stage.BUILD
        # the graph's facts are needed whatever the verdict: worked out while the worker imports (this thread
        # only waits for it then), not after
        facts_now = _in_background(GraphFacts.of, model)
        version, error, build_error, build_label = call_isolated(
            "surgery.backends.tvm.check:_import_whole",
            path or model.SerializeToString(),
            base_dir,
            build,
            timeout=TIMEOUT_S,
        )
        report = Report(self.id, self.label, self.version, backend_calls=1)
        nodes = model.graph.node
        facts = facts_now()
        alien = {i for i, n in enumerate(nodes) if foreign(n)}
        probed: dict[int, tuple[bool, str]] = {}
        if error is not None:
            probed, calls = probe_nodes(
                facts, None, (self.id, self.version), ask_many=lambda ms: _ask_many(ms, base_dir)
            )
            report.backend_calls += calls  # one isolated call for the batch; each probe is one import
        whole = Evidence("whole model", f"TVM {version} Relax ONNX frontend")
        probe = Evidence("probe", f"TVM {version}, one-node model")
        for i, (key, node) in enumerate(zip(facts.keys, nodes)):
            if i in alien and (i not in probed or probed[i][0]):
                v = Verdict(
                    key,
                    i,
                    node.op_type,
                    Status.REJECTED,
                    "FOREIGN_DOMAIN",
                    explanation=f"custom op {node.domain}::{node.op_type}: TVM's ONNX frontend ignores op "
                    f"domains and would import it as the standard {node.op_type}, which it is not",
                    evidence=whole if i not in probed else probe,
                )
            elif i in probed:
                ok, words = probed[i]
                missing = "OpNotImplemented" in words
                status, why = judge(facts, i, probed[i], definite=missing or i in alien, whole_error=error)
                code = {Status.SUPPORTED: "", Status.UNKNOWN: "PROBE_CONTEXT"}.get(status, "FRONTEND")
                v = Verdict(
                    key,
                    i,
                    node.op_type,
                    status,
                    "OP_NOT_IMPLEMENTED" if missing and not ok else code,
                    words="" if ok else words,
                    explanation=why,
                    evidence=probe,
                    words_from="" if ok else "live",
                )
            else:
                v = Verdict(key, i, node.op_type, Status.SUPPORTED, evidence=whole)
            report.verdicts.append(v)
        report.accepted = error is None and not report.rejected
        if build and error is None and not report.rejected:  # built in the same call: diagnose builds no more
            from surgery.backends.base import BuildReport
            from surgery.backends.build import build_failure_into, named_node

            built = BuildReport(self.id, build_error is None, error=build_error or "", label=build_label)
            built.node = named_node(built.error, model) if build_error else None
            build_failure_into(report, model, built, self.label)
            report.depth = Stage.BUILD
        if error is not None and not report.rejected:
            report.messages.append(
                Message(
                    "error",
                    words=error,
                    explanation="every node imports alone: the failure is about how they fit together",
                    code="FRONTEND",
                    words_from="live",
                )
            )
        report.seconds = time.perf_counter() - t0
        return report
