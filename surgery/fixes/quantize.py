"""INT8 by calibration: Q/DQ nodes placed by onnxruntime's static quantization, as TensorRT takes them (the work
is surgery.quantize's; this makes it a recipe step). A step records its calibration source: random:N replays
exactly (seeded), a file or folder is recorded with its sha256 and refused on replay when it changed."""

from __future__ import annotations

from onnx import ModelProto

from surgery.fixes import FixError, Safety, register


@register(
    "quantize_int8",
    safety=Safety.APPROXIMATE,
    summary="Insert INT8 Q/DQ nodes (symmetric, zero point 0) calibrated on data, for strongly typed TensorRT.",
    params={
        "calib": "str: random:N, a .npz keyed by input name, or a folder of images (surgery.quantize)",
        "sha256": "str: the calibration file's (or folder's) sha256; a replay on other data is refused",
        "per_channel": "bool: one weight scale per output channel (default false: one per tensor)",
        "symmetric": "bool: activations with zero point 0 (default true; TensorRT takes no other)",
        "exclude": "list of node names left in float32",
        "seed": "int: seed of random:N calibration (default 0)",
        "base_dir": "str: folder of the model's external data (the workspace sets it)",
    },
)
def quantize_int8(
    model: ModelProto,
    calib: str,
    sha256=None,
    per_channel=False,
    symmetric=True,
    exclude=(),
    seed=0,
    base_dir=None,
) -> ModelProto:
    from surgery.quantize import DEFAULT_SEED, CalibrationError, quantize

    try:
        return quantize(
            model,
            calib,
            per_channel=bool(per_channel),
            symmetric=bool(symmetric),
            exclude=list(exclude or ()),
            seed=DEFAULT_SEED if seed is None else int(seed),
            sha256=sha256,
            base_dir=base_dir,
        )
    except CalibrationError as exc:
        raise FixError(str(exc)) from None
