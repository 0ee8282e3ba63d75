"""Run a model on TVM (Relax, llvm): the runner of a split part, `feeds -> {output name: array}`."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto


def runner(model: ModelProto, base_dir=None):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from surgery.backends.tvm.build import flat_outputs
    from surgery.model import with_weights

    ex = tvm.compile(from_onnx(with_weights(model, base_dir)), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    inits = {i.name for i in model.graph.initializer}
    order = [i.name for i in model.graph.input if i.name not in inits]
    names = [o.name for o in model.graph.output]

    def run(feeds: dict) -> dict:
        args = [tvm.runtime.tensor(feeds[n]) for n in order]
        return {n: np.asarray(v.numpy()) for n, v in zip(names, flat_outputs(vm["main"](*args)))}

    return run
