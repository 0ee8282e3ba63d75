"""Run a model on onnxruntime (CPU): the runner of a split part, `feeds -> {output name: array}`."""

from __future__ import annotations

from onnx import ModelProto


def runner(model: ModelProto, base_dir=None):
    from surgery.ort import make_session

    sess = make_session(model, base_dir)
    names = [o.name for o in sess.get_outputs()]
    wanted = [i.name for i in sess.get_inputs()]

    def run(feeds: dict) -> dict:
        return dict(zip(names, sess.run(names, {k: feeds[k] for k in wanted})))

    return run
