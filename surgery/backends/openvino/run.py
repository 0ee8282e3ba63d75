"""Run a model on OpenVINO (CPU, fp32 precision hint): the runner of a split part, `feeds -> {output name: array}`."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto


def runner(model: ModelProto, base_dir=None):
    import openvino as ov

    from surgery.model import private_copy

    core = ov.Core()
    with private_copy(model, base_dir) as path:
        read = core.read_model(path)
        compiled = core.compile_model(read, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    wanted = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    outputs = [o.name for o in model.graph.output]

    def run(feeds: dict) -> dict:
        got = {}
        for port, value in request.infer({k: feeds[k] for k in wanted}).items():
            for n in port.get_names():
                got[n] = np.asarray(value)
        return {n: got[n] for n in outputs if n in got}

    return run
