"""`onnx-surgery check MODEL --target T ...`: every node's verdict per backend, in the backend's words."""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from surgery.backends.base import Status
from surgery.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED


def add_parser(sub):
    p = sub.add_parser("check", help="per-node verdicts of TensorRT / onnxruntime / OpenVINO / TVM")
    p.add_argument("model")
    p.add_argument(
        "--target",
        "-t",
        action="append",
        default=None,
        help="tensorrt, tensorrt-static@VERSION, onnxruntime, openvino, tvm (repeat; default onnxruntime)",
    )
    p.add_argument("--format", choices=["text", "json", "sarif"], default="text")
    p.add_argument("--all", action="store_true", help="list supported nodes too")
    p.add_argument("--max-bytes", type=int, default=None)
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="do not read or write probe verdicts under ~/.cache/onnx-surgery",
    )
    return p


def _sarif(path: str, reports) -> dict:
    """SARIF 2.1.0: one result per rejected node; ruleId is the verdict code, the message the backend's words,
    the location the model file with the node as a logical location."""
    results, rules = [], {}
    for r in reports:
        for v in r.rejected:
            rule_id = v.code or "REJECTED"
            rules.setdefault(
                rule_id,
                {"id": rule_id, "shortDescription": {"text": f"node rejected by a backend ({rule_id})"}},
            )
            results.append(
                {
                    "ruleId": rule_id,
                    "level": "error",
                    "message": {"text": v.message or f"{r.label} rejects this node"},
                    "locations": [
                        {
                            "physicalLocation": {"artifactLocation": {"uri": path}},
                            "logicalLocations": [
                                {"name": v.node, "kind": "member", "fullyQualifiedName": f"graph/{v.node}"}
                            ],
                        }
                    ],
                    "properties": {
                        "backend": r.backend,
                        "backendLabel": r.label,
                        "opType": v.op_type,
                        "evidence": v.evidence.source,
                        "evidenceDetail": v.evidence.detail,
                        "rules": list(v.rules),
                    },
                }
            )
    return {
        "version": "2.1.0",
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "onnx-surgery",
                        "informationUri": "https://github.com/onnx/onnx",
                        "rules": list(rules.values()),
                    }
                },
                "artifacts": [{"location": {"uri": path}}],
                "results": results,
            }
        ],
    }


def _text(reports, model, show_all: bool) -> str:
    from surgery.diagnose import is_unavailable
    from surgery.partition import partition

    lines = []
    for r in reports:
        if is_unavailable(r):
            lines.append(f"== {r.label} [{r.backend}]: unavailable — " + "; ".join(r.messages))
            continue
        verdict = (
            "accepts" if r.accepted else ("rejects" if r.rejected or r.accepted is False else "no verdict")
        )
        lines.append(
            f"== {r.label} [{r.backend}]: {verdict} — {len(r.rejected)} of {len(r.verdicts)} nodes "
            f"rejected, {r.backend_calls} backend call(s), {r.seconds:.2f} s"
        )
        for m in r.messages:
            lines.append(f"   model: {m}")
        by_reason = defaultdict(list)
        for v in r.verdicts:
            if v.status is Status.REJECTED or (show_all and v.status is not Status.SUPPORTED):
                by_reason[(v.code, v.message)].append(v)
        for (code, message), vs in by_reason.items():
            lines.append(f"   {code or 'REJECTED'}: {message}")
            for v in vs:
                fix = f"   fix: {', '.join(v.rules)}" if v.rules else ""
                lines.append(f"     - {v.op_type} '{v.node}' [{v.evidence.source}: {v.evidence.detail}]{fix}")
        if show_all:
            for v in r.verdicts:
                if v.status is Status.SUPPORTED:
                    lines.append(f"     ok {v.op_type} '{v.node}'")
        if r.verdicts and r.rejected:
            lines.append(f"   partitions: {partition(model, r).summary()}")
    return "\n".join(lines)


def _refuses(r) -> bool:
    return bool(r.rejected) or r.accepted is False


def run(args) -> int:
    from surgery.backends import UnknownBackend
    from surgery.backends.probe import CACHE, use_disk_cache
    from surgery.diagnose import check_model, is_unavailable
    from surgery.model import load_model
    from surgery.partition import partition

    model = load_model(args.model, max_bytes=args.max_bytes)
    targets = args.target or ["onnxruntime"]
    previous = CACHE.directory
    if not args.no_cache:
        use_disk_cache()
    try:
        reports = check_model(model.proto, targets, model.base_dir)
    except UnknownBackend as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        use_disk_cache(previous)
    if args.format == "json":
        out = []
        for r in reports:
            d = r.to_dict()
            d["available"] = not is_unavailable(r)
            d["partition"] = partition(model.proto, r).to_dict() if r.verdicts else None
            out.append(d)
        print(json.dumps({"model": args.model, "reports": out}, indent=2))
    elif args.format == "sarif":
        print(json.dumps(_sarif(args.model, reports), indent=2))
    else:
        print(_text(reports, model.proto, args.all))
        bad = [r.backend for r in reports if _refuses(r)]
        off = [r.backend for r in reports if is_unavailable(r)]
        print(
            f"\nsummary: {len(reports) - len(bad) - len(off)} of {len(reports)} target(s) accept the model"
            + (f"; rejected by {', '.join(bad)}" if bad else "")
            + (f"; unavailable here: {', '.join(off)}" if off else "")
        )
    return EXIT_REJECTED if any(_refuses(r) for r in reports) else EXIT_OK
