"""OpenVINO as a target: its ONNX frontend converts the model; nodes it cannot convert come back from
`convert_partially` as ONNXFrameworkNode with their ONNX names, and `read_model` explains conversion failures.
All OpenVINO calls run in an isolated process (surgery.backends.openvino.convert, which imports no onnx)."""

from __future__ import annotations

import re
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
    not_installed,
    package_version,
)
from surgery.backends.build import BuiltHere
from surgery.graph import node_keys
from surgery.isolate import call_isolated
from surgery.model import private_copy

TIMEOUT_S = 300.0


def _failures(error: str) -> list[tuple[str, str]]:
    """(ONNX node's first output name, message) for each op in read_model's "Failed operations" log."""
    out = []
    for block in re.split(r"\n-- ", error.split("\nSummary:")[0]):
        m = re.search(r"ONNX node '<Node\((\w+)\): ([^>]+)>'", block)
        if m:
            msg = [line for line in block.splitlines() if line and not line.startswith(("Check ", "While "))]
            out.append((m.group(2), " ".join(msg[1:] or msg)[:400]))
    return out


def _no_rule_line(error: str) -> str:
    """OpenVINO's summary line naming the ops it has no conversion rule for, verbatim ("" when absent)."""
    m = re.search(r"No conversion rule found for operations:[^\n]*", error)
    return m.group(0).strip() if m else ""


def _summary(error: str) -> str:
    """The summary part of read_model's error, verbatim (the whole error when it has none)."""
    m = re.search(r"Summary:\s*\n(.*)", error, re.S)
    return (m.group(1) if m else error).strip()[:2000]


class OpenVINOBackend(BuiltHere):
    id = "openvino"

    def __init__(self):
        self.version = package_version("openvino")
        self.label = f"OpenVINO {self.version} (CPU)".replace("  ", " ")

    def availability(self) -> Availability:
        missing = not_installed("openvino", "openvino")
        if missing:
            return missing
        return Availability(True, f"OpenVINO {self.version}, ONNX frontend, CPU plugin")

    default_depth = Stage.BUILD  # read_model converts; compile_model is what a user's program calls next

    reads_file = True  # given the path of the unedited file, it is linked, not serialized (check's `path`)

    def check(
        self,
        model: ModelProto,
        base_dir: str | None = None,
        depth: Stage = Stage.PARSE,
        *,
        path: str | None = None,
    ) -> Report:
        """`path`: the file `model` was read from, unedited: linked into the private folder, not serialized."""
        t0 = time.perf_counter()
        # OpenVINO reads a file: a private copy, its external weights (and the model file when it is the one read)
        # linked in; removed here, whatever the child process does, and nothing is ever written beside the user's
        build = depth is Stage.BUILD
        with private_copy(model, base_dir, file=path) as copy:
            out = call_isolated("surgery.backends.openvino.convert:convert", copy, build, timeout=TIMEOUT_S)
        report = Report(self.id, self.label, self.version, backend_calls=1)
        keys = node_keys(model.graph.node)
        by_name = {n.name: k for k, n in zip(keys, model.graph.node) if n.name}
        by_output = {o: k for k, n in zip(keys, model.graph.node) for o in n.output if o}
        rejected: dict[str, tuple[str, str]] = {}  # key -> (OpenVINO's words, our explanation)
        summary = _summary(out["error"]) if out["error"] else ""
        no_rule = _no_rule_line(out["error"])
        nodes = dict(zip(keys, model.graph.node))
        for name in out["unconverted"]:
            key = by_name.get(name) or by_output.get(name)
            if key:
                node = nodes[key]
                domain = f"{node.domain}." if node.domain not in ("", "ai.onnx") else ""
                why = f"the ONNX frontend has no conversion rule for {domain}{node.op_type}"
                rejected[key] = (no_rule if f"{domain}{node.op_type}" in no_rule else "", why)
        # nodes downstream of an unconverted one see inputs of unknown type and rank: their failures follow from it
        tainted = {o for k in rejected for o in nodes[k].output}
        for node in model.graph.node:
            if any(x in tainted for x in node.input):
                tainted.update(node.output)
        unknown: dict[str, str] = {}
        for output, words in _failures(out["error"]):
            key = by_output.get(output)
            if key and any(x in tainted for x in nodes[key].input):
                unknown[key] = words
            elif key:
                rejected[key] = (words, "")
        converter = Evidence("live converter", f"OpenVINO {self.version} ONNX frontend")
        for i, (key, node) in enumerate(zip(keys, model.graph.node)):
            if key in unknown:
                v = Verdict(
                    key,
                    i,
                    node.op_type,
                    Status.UNKNOWN,
                    "CONVERSION",
                    words=unknown[key],
                    explanation="fed by a node OpenVINO could not convert, so its inputs had no known type",
                    evidence=converter,
                    words_from="live",
                )
            elif key in rejected:
                words, why = rejected[key]
                v = Verdict(
                    key,
                    i,
                    node.op_type,
                    Status.REJECTED,
                    "CONVERSION",
                    words=words,
                    explanation=why,
                    evidence=converter,
                    words_from="live" if words else "",
                )
            else:
                v = Verdict(
                    key,
                    i,
                    node.op_type,
                    Status.SUPPORTED,
                    evidence=Evidence(
                        "whole model" if not out["error"] else "live converter",
                        f"OpenVINO {self.version} ONNX frontend, converted",
                    ),
                )
            report.verdicts.append(v)
        report.accepted = not out["error"]
        if out["error"] and not rejected:
            report.messages.append(Message("error", words=summary, code="CONVERSION", words_from="live"))
        built = out.get("built")
        if built is not None and not report.rejected:  # built in the same call: diagnose builds no more
            from surgery.backends.build import build_failure_into, named_node

            if not built.ok and built.node is None:
                built.node = named_node(built.error, model)
            build_failure_into(report, model, built, self.label)
            report.depth = Stage.BUILD
        report.seconds = time.perf_counter() - t0
        return report
