"""onnxruntime as a target: can this onnxruntime (CPU) create a session for the model, and if not, which nodes
are to blame. Whole-model check first; when it fails, nodes are probed one by one (cached by signature).

Creating a session for a model of 10k+ nodes takes seconds, so when a node has no CPU kernel, no ONNX function
body and no local function (it cannot run, whatever else holds), its one-node probe is asked first; if it is
refused, the whole model would be refused too and the whole-model session is skipped. Below SUSPECTS_FROM nodes
the session comes first: listing the provider's kernels (~10 ms) costs more than the session of such a model."""

from __future__ import annotations

import functools
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
    first_line,
)
from surgery.backends.build import BuiltHere
from surgery.backends.probe import judge, probe_nodes
from surgery.graph import GraphFacts, node_keys, opset_of

# nodes: from this size on, nodes without a kernel are probed before the whole model's session
SUSPECTS_FROM = 1000


@functools.cache
def _kernels() -> frozenset[tuple[str, str]]:
    """(domain, op) pairs the CPU execution provider has a kernel for."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return frozenset(
        ("" if k.domain == "ai.onnx" else k.domain, k.op_name)
        for k in C.get_all_opkernel_def()
        if k.provider == "CPUExecutionProvider"
    )


def _expands(node, model: ModelProto) -> bool:
    """Whether onnxruntime can run `node` by inlining a function (a local one or the op schema's)."""
    import onnx

    domain = node.domain or ""
    if any(f.name == node.op_type and f.domain == domain for f in model.functions):
        return True
    try:
        schema = onnx.defs.get_schema(node.op_type, opset_of(model, domain) or 1, domain)
    except Exception:  # no schema at all
        return False
    return schema.has_function or schema.has_context_dependent_function


def suspects(model: ModelProto) -> list[int]:
    """Nodes that have no kernel on the CPU provider and no function to expand into."""
    kernels = _kernels() | {("", "Constant")}  # Constant is folded into an initializer, it has no kernel
    return [
        i
        for i, n in enumerate(model.graph.node)
        if ("" if n.domain == "ai.onnx" else n.domain, n.op_type) not in kernels and not _expands(n, model)
    ]


def _words(exc: Exception) -> str:
    """onnxruntime's own words, first line, verbatim (with its `[ONNXRuntimeError] : N : KIND :` prefix)."""
    return first_line(str(exc), 500) or type(exc).__name__


# A session made only to see whether onnxruntime accepts the model does not prepack its weights. Prepacking
# repacks a kernel's constant weights (MLAS's MatMul and Conv) for speed, reading every one of them; whether
# onnxruntime has kernels for the model's nodes, types and shapes is settled before it (SessionState's
# FinalizeSessionStateImpl creates the kernels, then prepacks), and what prepacking alone could still fail on is
# its own memory, not the model. An 11-node model with 2 GiB of fp32 MatMul weights in an external file: the
# session read all of them (3.9 s from disk) to say it accepts; without prepacking it reads none
# (bench/app_open.py's check columns; a test). The key: kOrtSessionOptionsConfigDisablePrepacking,
# "session.disable_prepacking", in include/onnxruntime/core/session/onnxruntime_session_options_config_keys.h.
CHECK_CONFIG = {"session.disable_prepacking": "1"}


class OnnxRuntimeBackend(BuiltHere):
    """Session creation is onnxruntime's parse and build in one step: the check is at stage build."""

    id = "onnxruntime"
    default_depth = Stage.BUILD
    builds_in_check = False  # creating the session is the build
    reads_weights = True  # a session holds every weight
    reads_file = True  # given the path of the unedited file, the session reads it there (check's `path`)

    def __init__(self):
        import onnxruntime

        self.version = onnxruntime.__version__
        self.label = f"onnxruntime {self.version} (CPU)"

    def availability(self) -> Availability:
        return Availability(True, f"onnxruntime {self.version}, CPUExecutionProvider")

    def _session_error(self, model: ModelProto, base_dir=None, path: str | None = None) -> str | None:
        from surgery.ort import make_session

        try:
            make_session(model, base_dir, path=path, config=CHECK_CONFIG)
            return None
        except Exception as exc:
            return _words(exc)

    def check(
        self,
        model: ModelProto,
        base_dir: str | None = None,
        depth: Stage = Stage.BUILD,
        *,
        path: str | None = None,
    ) -> Report:
        """`path`: the file `model` was read from, unedited; the whole-model session reads it there."""
        t0 = time.perf_counter()
        report = Report(self.id, self.label, self.version)
        nodes = model.graph.node

        def ask(probe: ModelProto) -> tuple[bool, str]:
            err = self._session_error(probe, base_dir)
            return (err is None, err or "")

        key = (self.id, self.version)
        kernelless = suspects(model) if len(nodes) >= SUSPECTS_FROM else []
        facts = GraphFacts.of(model) if kernelless else None  # the facts probes need: made when one is
        early, calls = probe_nodes(facts, ask, key, kernelless) if facts else ({}, 0)
        report.backend_calls = calls
        refused = [i for i, (ok, _) in early.items() if not ok]
        error = None
        if not refused:
            error = self._session_error(model, base_dir, path)
            report.backend_calls += 1
        whole = Evidence("whole model", f"{self.label}, session creation")
        if error is None and not refused:
            report.accepted = True
            report.verdicts = [
                Verdict(k, i, n.op_type, Status.SUPPORTED, stage=Stage.BUILD, evidence=whole)
                for i, (k, n) in enumerate(zip(node_keys(nodes), nodes))
            ]
            report.seconds = time.perf_counter() - t0
            return report
        facts = facts or GraphFacts.of(model)
        if len(nodes) < SUSPECTS_FROM:
            kernelless = suspects(model)  # to say why a node without a kernel is refused
        report.accepted = False
        verdicts, calls = probe_nodes(facts, ask, key)
        report.backend_calls += calls
        no_kernel = set(kernelless)
        probe = Evidence("probe", f"{self.label}, one-node model")
        for i, (key, node) in enumerate(zip(facts.keys, nodes)):
            ok, words = verdicts[i]
            status, why = judge(facts, i, verdicts[i], definite=i in no_kernel, whole_error=error)
            if i in no_kernel and not ok:
                why = f"the CPU provider has no kernel for {node.domain or 'ai.onnx'}::{node.op_type} and no function"
            report.verdicts.append(
                Verdict(
                    key,
                    i,
                    node.op_type,
                    status,
                    {Status.REJECTED: "SESSION_CREATION", Status.UNKNOWN: "PROBE_CONTEXT"}.get(status, ""),
                    words="" if ok else words,
                    explanation=why,
                    stage=Stage.BUILD,
                    evidence=probe,
                    words_from="" if ok else "live",
                )
            )
        if not report.rejected and not error:
            error = next(m for ok, m in verdicts.values() if not ok)
            report.messages.append(Message("error", words=error, stage=Stage.BUILD, words_from="live"))
        elif not report.rejected:
            # every node works alone: the whole-model error is about how they fit; blame the node it names
            named = [
                v for v in report.verdicts if v.node and (f"'{v.node}'" in error or f"({v.node})" in error)
            ]
            for v in named[:1]:
                v.status, v.words, v.code, v.words_from = Status.REJECTED, error, "SESSION_CREATION", "live"
                v.explanation = "works alone; the whole model's session creation names this node"
                v.evidence = whole
            if not named:
                report.messages.append(
                    Message(
                        "error",
                        words=error,
                        explanation="every node works alone: the failure is about how they fit together",
                        code="SESSION_CREATION",
                        stage=Stage.BUILD,
                        words_from="live",
                    )
                )
        report.seconds = time.perf_counter() - t0
        return report
