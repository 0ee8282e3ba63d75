"""`onnx-surgery targets`: the backends, their versions, and whether each can run here."""

from __future__ import annotations

import json


def add_parser(sub):
    p = sub.add_parser("targets", help="list the backends, versions and whether each can run here")
    p.add_argument("--format", choices=["text", "json"], default="text")
    return p


def run(args) -> int:
    from surgery.backends import list_backends, static_versions

    rows = list_backends()
    try:
        versions, problem = static_versions(), ""
    except Exception as exc:  # the predictor's data failed to load: say so, do not crash the listing
        versions, problem = [], f"{type(exc).__name__}: {exc}"
    if args.format == "json":
        out = {
            "targets": [
                {"id": b, "label": label, "version": v, "available": a.ok, "reason": a.reason}
                for b, label, v, a in rows
            ],
            "tensorrt_static_versions": versions,
        }
        print(json.dumps(out, indent=2))
        return 0
    for backend_id, label, _version, avail in rows:
        mark = "ok " if avail.ok else "-- "
        print(f"{mark} {backend_id:24s} {label:40s} {avail.reason}")
    if versions:
        print("\ntensorrt-static versions (use as --target tensorrt-static@VERSION): " + ", ".join(versions))
    else:
        print(f"\ntensorrt-static: not available{f' ({problem})' if problem else ''}")
    return 0
