"""OpenVINO's conversion of an ONNX file, run in the isolated worker (surgery.backends.openvino.check calls it
there). It imports openvino, not onnx: the worker starts beside the check's own imports, and onnx with numpy
(~0.1 s) would otherwise be on its critical path."""

from __future__ import annotations


def convert(path: str, build: bool = False) -> dict:
    """In the isolated process: read_model's own words, and (only when it fails) which nodes the frontend could
    not convert. A model that converts whole costs one conversion; with `build`, it is then compiled as `build`
    compiles it (`built`: the BuildReport), in this same call."""
    import openvino as ov

    out = {"version": ov.get_version(), "unconverted": [], "error": "", "built": None}
    try:
        ov.Core().read_model(path)
        if build:
            from surgery.backends.openvino.build import build_for_check

            out["built"] = build_for_check(path)
        return out
    except Exception as exc:  # the conversion report is the backend's verdict
        out["error"] = str(exc)
    from openvino.frontend import FrontEndManager

    fe = FrontEndManager().load_by_framework("onnx")
    try:
        partial = fe.convert_partially(fe.load(path))
    except Exception:  # the frontend cannot even load it (e.g. "Unsupported type"): read_model's words stand
        return out
    # the node's ONNX name is its friendly name (or its first output's). Note: get_attributes() on an
    # ONNXFrameworkNode crashes OpenVINO 2026.4 with SIGSEGV, so domain and type come from our own model.
    out["unconverted"] = [
        op.get_friendly_name() for op in partial.get_ops() if op.get_type_name() == "ONNXFrameworkNode"
    ]
    return out
