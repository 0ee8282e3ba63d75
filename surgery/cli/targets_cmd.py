"""`onnx-surgery targets`: the backends, their versions, and whether each can run here."""

from __future__ import annotations


def add_parser(sub):
    return sub.add_parser("targets", help="list the backends, versions and whether each can run here")


def run(args) -> int:
    from surgery.backends import list_backends, static_versions

    for backend_id, label, _version, avail in list_backends():
        mark = "ok " if avail.ok else "-- "
        print(f"{mark} {backend_id:24s} {label:40s} {avail.reason}")
    try:
        print("\ntensorrt-static versions: " + ", ".join(static_versions()))
    except Exception as exc:  # the predictor's data failed to load: say so, do not crash the listing
        print(f"\ntensorrt-static: not available ({exc})")
    return 0
