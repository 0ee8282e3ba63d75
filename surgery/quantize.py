"""INT8 by calibration, the way TensorRT takes it: QuantizeLinear/DequantizeLinear (Q/DQ) nodes placed by
onnxruntime's static quantization (`quantize_static`, QuantFormat.QDQ, MinMax calibration) — TensorRT 10+ and
TensorRT-RTX build strongly typed, so INT8 comes only from Q/DQ in the graph.

What is quantized (TensorRT's Q/DQ placement advice: quantize the inputs of the weighted ops):

- the activations and weights feeding Conv, ConvTranspose, Gemm and MatMul; INT8, symmetric (zero point 0,
  the only one TensorRT takes), weights per tensor or per output channel (`per_channel`);
- their outputs are not quantized (TensorRT fuses what follows: bias, BatchNormalization, activation);
- biases stay float32 (TensorRT refuses a DequantizeLinear of an INT32 bias);
- weights stay float32 behind a Q/DQ pair (TensorRT quantizes them when it builds), so the float32 original is
  the quantized model with its Q/DQ pairs taken out (`strip_qdq`): a build compares INT8 against it exactly.

Calibration inputs (`calib`):

- ``random:N``: N seeded samples (surgery.feeds: standard normal floats, token ids within the embedding table, a
  decoder's KV cache in consistent lengths; seeds `seed`..`seed+N-1`).
  It replays exactly, but the scales fit noise: accuracy figures then mean little.
- ``FILE.npz``: one array per graph input, keyed by the input's name; an array shaped like the input is one
  sample (a fixed batch dim B that the first axis is a multiple of is cut into batches of B), one with an extra
  leading axis is a stack of samples. Float arrays are cast to the input's type.
- a folder of images: see PREPROCESSING. Every .png/.jpg/.jpeg/.bmp/.webp/.tif(f) directly inside it, sorted by
  name, is one sample.

A file or folder is recorded with its sha256 (`calibration_digest`); a recipe step refuses to replay on a file
that changed since. Every refusal is a CalibrationError whose one line names the input or the path.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

from surgery.graph import tensor_info_from_type
from surgery.model import save_model

QUANTIZED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")
PREPROCESSING = (
    "each image is converted to RGB (greyscale for a 1-channel input), resized to the input's H x W "
    "(bilinear), scaled to [0, 1] (/255, no mean/std normalization), laid out NCHW with batch 1"
)
RANDOM_WARNING = (
    "random calibration: the INT8 scales fit seeded noise, not your data, so accuracy figures mean little. "
    "Note: calibrate with --calib FILE.npz or a folder of images for numbers that count"
)
DEFAULT_SEED = 0
COMPARE_SAMPLES = 8  # calibration samples the quantized model is compared on

_progress: contextvars.ContextVar[Callable[[float, str], None] | None] = contextvars.ContextVar(
    "quantize_progress", default=None
)


class CalibrationError(ValueError):
    """Calibration data that cannot be used: one line naming the input, the file or the folder."""


@contextlib.contextmanager
def progress_to(callback: Callable[[float, str], None] | None):
    """Calibration inside (the fix primitive too) reports (fraction, message) to `callback`."""
    token = _progress.set(callback)
    try:
        yield
    finally:
        _progress.reset(token)


def _report(fraction: float, message: str) -> None:
    cb = _progress.get()
    if cb:
        cb(min(max(fraction, 0.0), 1.0), message)


# -- calibration sources --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    kind: str  # "random" | "npz" | "images"
    spec: str  # as given (random:N) or the resolved path
    count: int = 0  # random: N

    @property
    def path(self) -> Path | None:
        return None if self.kind == "random" else Path(self.spec)


RANDOM_MAX = 10_000  # random:N beyond this is a typo or an attack: each sample is one onnxruntime run


def check_quantizable(model: ModelProto, exclude: list[str] | tuple[str, ...] = ()) -> None:
    """Refuse (CalibrationError, one line) a model onnxruntime's quantizer cannot read, before any work: a graph
    with a cycle (its calibration run would fail on "the graph is not acyclic"), a name that is not UTF-8 (its
    Python reads every name as text), or a float16 / bfloat16 input of an op it quantizes below opset 19 (where
    QuantizeLinear takes neither: it wrote an invalid model). `exclude`: nodes left in float."""
    from surgery.graph import GraphFacts, cycle_nodes
    from surgery.model import name_not_utf8

    g = model.graph
    if not g.node:
        raise CalibrationError("the graph has no nodes: nothing to quantize")
    if (bad := name_not_utf8(model)) is not None:
        raise CalibrationError(
            f"{bad}; onnxruntime's quantizer reads every name as text. Note: rename it, then quantize"
        )
    facts = GraphFacts.of(model, infer=False)
    cyclic = cycle_nodes(facts)
    if cyclic:
        raise CalibrationError(
            f"the graph has a cycle (through node '{facts.keys[cyclic[0]]}'): ONNX graphs are acyclic, and "
            "onnxruntime cannot run it to calibrate"
        )
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    # QuantizeLinear takes float16 / bfloat16 from opset 19: below it, onnxruntime would write an invalid model
    if opset < 19:
        half = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}
        types = {t.name: t.data_type for t in g.initializer}
        types.update((v.name, v.type.tensor_type.elem_type) for v in [*g.input, *g.value_info])
        for node in g.node:
            if node.op_type in QUANTIZED_OPS and node.name not in exclude:
                name = next((x for x in node.input[:2] if types.get(x) in half), None)
                if name is not None:
                    raise CalibrationError(
                        f"{node.op_type} '{node.name}' reads {half[types[name]]} ('{name}'); QuantizeLinear takes "
                        f"{half[types[name]]} only from opset 19 and the model is opset {opset}. Note: quantize "
                        "the float32 export, or convert the model to opset 19 first"
                    )


def parse_source(spec: str) -> Source:
    """`random:N`, an existing .npz file or an existing folder; anything else is a CalibrationError."""
    spec = str(spec)
    if spec.startswith("random:"):
        n = spec.split(":", 1)[1]
        if not n.isdigit() or int(n) < 1:
            raise CalibrationError(f"calibration '{spec}': expected random:N with N a positive whole number")
        if int(n) > RANDOM_MAX:
            raise CalibrationError(
                f"calibration '{spec[:40]}': at most random:{RANDOM_MAX} (seeded noise calibrates no better with "
                "more samples). Note: for real accuracy give a .npz or a folder of images"
            )
        return Source("random", f"random:{int(n)}", int(n))
    path = Path(spec).expanduser()
    if not path.exists():
        raise CalibrationError(
            f"calibration '{spec}' does not exist. Note: give a .npz file, a folder of images or random:N"
        )
    path = path.resolve()
    if path.is_dir():
        return Source("images", str(path))
    if path.suffix.lower() == ".npz" and path.is_file():
        return Source("npz", str(path))
    raise CalibrationError(
        f"calibration '{spec}' is not a .npz file or a folder of images. Note: or use random:N"
    )


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def calibration_digest(src: Source | str) -> str | None:
    """sha256 of a calibration file, or of a folder's images (names and bytes, sorted); None for random:N."""
    src = parse_source(src) if isinstance(src, str) else src
    if src.kind == "random":
        return None
    h = hashlib.sha256()
    files = [src.path] if src.kind == "npz" else _images(src.path)
    for f in files:
        if src.kind == "images":
            h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class _Input:
    name: str
    elem_type: int
    shape: list  # ints and symbolic names (str / None)

    @property
    def np_type(self):
        return helper.tensor_dtype_to_np_dtype(self.elem_type)

    def shape_str(self) -> str:
        return "[" + ", ".join(str(d) if isinstance(d, int) else (d or "?") for d in self.shape) + "]"


def _inputs(model: ModelProto) -> list[_Input]:
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        info = tensor_info_from_type(vi.name, vi.type)
        if not info.dtype or info.shape is None:
            raise CalibrationError(
                f"input '{vi.name}' has no known type and shape; calibration data cannot be checked against it. "
                "Note: freeze its shape first (fix --input-shape)"
            )
        out.append(_Input(vi.name, info.dtype, list(info.shape)))
    return out


def _fits(shape, want) -> bool:
    return len(shape) == len(want) and all(not isinstance(w, int) or w == s for s, w in zip(shape, want))


def _npz_samples(path: Path, inputs: list[_Input]) -> list[dict[str, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:
        raise CalibrationError(f"calibration file {path}: not a readable .npz ({exc})") from None
    names = [i.name for i in inputs]
    missing = [n for n in names if n not in arrays]
    extra = [k for k in arrays if k not in names]
    if missing or extra:
        what = []
        if missing:
            what.append(f"no array for input {', '.join(map(repr, missing))}")
        if extra:
            what.append(f"array {', '.join(map(repr, extra))} is not an input of the model")
        listed = ", ".join(f"'{i.name}' {i.shape_str()}" for i in inputs)
        raise CalibrationError(
            f"calibration file {path.name}: {'; '.join(what)}. Note: the inputs are {listed}"
        )
    per_input: dict[str, list[np.ndarray]] = {}
    for inp in inputs:
        a = arrays[inp.name]
        if a.dtype.kind not in "biuf" or (a.dtype.kind == "f") != (np.dtype(inp.np_type).kind == "f"):
            raise CalibrationError(
                f"calibration file {path.name}: input '{inp.name}' is {np.dtype(inp.np_type).name}, the array "
                f"is {a.dtype.name}"
            )
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
            raise CalibrationError(
                f"calibration file {path.name}: input '{inp.name}' holds {bad} NaN or infinite value(s); "
                "calibration ranges from them would be infinite"
            )
        a = a.astype(inp.np_type, copy=False)
        batch = inp.shape[0] if inp.shape and isinstance(inp.shape[0], int) and inp.shape[0] > 0 else None
        if _fits(a.shape, inp.shape):
            samples = [a]
        elif (
            a.ndim == len(inp.shape)
            and batch
            and a.shape[0] % batch == 0
            and _fits(a.shape[1:], inp.shape[1:])
        ):
            samples = [a[k : k + batch] for k in range(0, a.shape[0], batch)]
        elif a.ndim == len(inp.shape) + 1 and _fits(a.shape[1:], inp.shape):
            samples = list(a)
        else:
            raise CalibrationError(
                f"calibration file {path.name}: input '{inp.name}' has shape {inp.shape_str()}, the array has "
                f"{list(a.shape)}. Note: give one sample shaped like the input, or a stack of them on a new "
                "first axis"
            )
        if not samples or any(s.size == 0 for s in samples):
            raise CalibrationError(f"calibration file {path.name}: the array for input '{inp.name}' is empty")
        per_input[inp.name] = samples
    counts = {n: len(s) for n, s in per_input.items()}
    if len(set(counts.values())) > 1:
        raise CalibrationError(
            f"calibration file {path.name}: the inputs have different sample counts ({counts}). Note: give each "
            "input the same number of samples"
        )
    n = next(iter(counts.values()))
    return [{name: per_input[name][k] for name in per_input} for k in range(n)]


def _image_input(inputs: list[_Input]) -> tuple[_Input, int, int, int]:
    floats = [i for i in inputs if np.dtype(i.np_type).kind == "f"]
    if len(inputs) != 1 or len(floats) != 1 or len(floats[0].shape) != 4:
        listed = ", ".join(f"'{i.name}' {i.shape_str()}" for i in inputs)
        raise CalibrationError(
            f"a folder of images calibrates a model with one float NCHW input; this one has {listed}. "
            "Note: give a .npz keyed by input name"
        )
    inp = floats[0]
    n, c, hh, ww = inp.shape
    if not all(isinstance(d, int) and d > 0 for d in (c, hh, ww)) or c not in (1, 3):
        raise CalibrationError(
            f"input '{inp.name}' has shape {inp.shape_str()}; images need a fixed [N, 1 or 3, H, W]. "
            "Note: freeze its shape first (fix --input-shape), or give a .npz"
        )
    if isinstance(n, int) and n > 1:
        raise CalibrationError(
            f"input '{inp.name}' has a fixed batch of {n}; a folder of images gives batches of 1. Note: give a .npz"
        )
    return inp, c, hh, ww


def load_image(path: Path, channels: int, height: int, width: int, np_type=np.float32) -> np.ndarray:
    """One image as PREPROCESSING says: [1, C, H, W] in [0, 1]."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            im = im.convert("RGB" if channels == 3 else "L").resize((width, height), Image.BILINEAR)
            a = np.asarray(im, dtype=np.float32) / 255.0
    except Exception as exc:
        raise CalibrationError(f"calibration image {path}: cannot be read ({exc})") from None
    a = a[None] if channels == 1 else a.transpose(2, 0, 1)
    return a[None].astype(np_type)


class Calibration:
    """Validated calibration data for a model: `len()` samples, each a feed dict; images load lazily."""

    def __init__(self, model: ModelProto, spec: str, seed: int = DEFAULT_SEED):
        self.source = parse_source(spec)
        inputs = _inputs(model)
        if not inputs:
            raise CalibrationError("the model has no graph inputs to calibrate")
        self._get: Callable[[int], dict[str, np.ndarray]]
        if self.source.kind == "random":
            from surgery.feeds import draw

            def seeded(k: int) -> dict[str, np.ndarray]:  # one row: some exports run at no other batch
                return draw(model, seed=seed + k, default_dim=1, text_rows=1).arrays

            try:
                seeded(0)
            except ValueError as exc:
                raise CalibrationError(str(exc)) from None
            self._n = self.source.count
            self._get = seeded
        elif self.source.kind == "npz":
            samples = _npz_samples(self.source.path, inputs)
            self._n = len(samples)
            self._get = samples.__getitem__
        else:
            files = _images(self.source.path)
            if not files:
                raise CalibrationError(
                    f"calibration folder {self.source.path} holds no images "
                    f"({', '.join(IMAGE_SUFFIXES)}). Note: or give a .npz or random:N"
                )
            inp, c, hh, ww = _image_input(inputs)
            load_image(files[0], c, hh, ww)  # a folder of unreadable files fails before calibration starts
            self._n = len(files)
            self._get = lambda k: {inp.name: load_image(files[k], c, hh, ww, inp.np_type)}

    def __len__(self) -> int:
        return self._n

    def sample(self, k: int) -> dict[str, np.ndarray]:
        return self._get(k)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return (self._get(k) for k in range(self._n))


def _reader(calib: Calibration):
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.k = 0

        def get_next(self):
            if self.k >= len(calib):
                return None
            _report(0.05 + 0.85 * self.k / len(calib), f"calibrating: sample {self.k + 1} of {len(calib)}")
            self.k += 1
            return calib.sample(self.k - 1)

        def rewind(self):
            self.k = 0

    return Reader()


# -- quantize ----------------------------------------------------------------------------------------------------
def node_names(model: ModelProto) -> set[str]:
    return {n.name for n in model.graph.node if n.name}


def quantize(
    model: ModelProto,
    calib: str,
    *,
    per_channel: bool = False,
    symmetric: bool = True,
    exclude: list[str] | tuple[str, ...] = (),
    seed: int = DEFAULT_SEED,
    sha256: str | None = None,
    base_dir: str | None = None,
) -> ModelProto:
    """A Q/DQ copy of `model` calibrated on `calib` (random:N, a .npz, a folder of images). `sha256`, when
    given, must match the calibration file's (a recorded step replayed on changed data is refused). The input
    model is not modified. Raises CalibrationError for data that does not fit the model."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if any(n.op_type in QDQ_OPS for n in model.graph.node):
        raise CalibrationError("the model already has QuantizeLinear/DequantizeLinear nodes; it is quantized")
    check_quantizable(model, exclude)
    unknown = [n for n in exclude if n not in node_names(model)]
    if unknown:
        raise CalibrationError(f"--exclude names no node {', '.join(map(repr, unknown))} of the model")
    src = parse_source(calib)
    if sha256 is not None and src.kind != "random":
        now = calibration_digest(src)
        if now != sha256:
            raise CalibrationError(
                f"calibration data {src.spec} changed since it was recorded (sha256 {sha256[:16]}..., now "
                f"{now[:16]}...). Note: quantize again to record the new data"
            )
    _report(0.0, "checking the calibration data")
    data = Calibration(model, src.spec, seed)
    quiet = logging.getLogger()
    level = quiet.level
    # onnxruntime's quantizer reads a file. save_model writes one past protobuf's 2 GiB too (its weights in a .data
    # file, copied range by range by the kernel: never in this process). Hard links to the user's weights would
    # save the copy, but onnx refuses external data with several links ("potential hardlink attack").
    with tempfile.TemporaryDirectory(prefix="onnx-surgery-quantize-") as tmp:
        src_path = save_model(model, Path(tmp) / "model.onnx", base_dir)
        out_path = Path(tmp) / "model.int8.onnx"
        big = (src_path.parent / (src_path.name + ".data")).exists()
        quiet.setLevel(logging.ERROR)  # onnxruntime's "consider pre-processing" warnings on every call
        import onnxruntime

        # its sessions' C++ log lines (a refusal is said once, in our one line, below)
        onnxruntime.set_default_logger_severity(4)
        try:
            quantize_static(
                str(src_path),
                str(out_path),
                _reader(data),
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=list(QUANTIZED_OPS),
                per_channel=per_channel,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=list(exclude),
                calibrate_method=CalibrationMethod.MinMax,
                use_external_data_format=big,
                extra_options={
                    "ActivationSymmetric": symmetric,
                    "WeightSymmetric": True,
                    "QuantizeBias": False,
                    "AddQDQPairToWeight": True,
                    "OpTypesToExcludeOutputQuantization": list(QUANTIZED_OPS),
                },
            )
        except CalibrationError:
            raise
        except Exception as exc:  # onnxruntime's own refusal, e.g. a sample its session cannot run
            from surgery.text import error_line

            raise CalibrationError(f"onnxruntime's quantization failed: {error_line(exc)}") from None
        finally:
            quiet.setLevel(level)
            onnxruntime.set_default_logger_severity(2)  # onnxruntime's default: warnings
        _report(0.95, "writing the Q/DQ model")
        out = onnx.load(str(out_path))
    if not any(n.op_type in QDQ_OPS for n in out.graph.node):
        raise CalibrationError(
            f"nothing was quantized: the model has no {', '.join(QUANTIZED_OPS)} node left to quantize"
        )
    _report(1.0, f"quantized on {len(data)} calibration sample(s)")
    return out


# -- the float32 twin of a Q/DQ model ---------------------------------------------------------------------------
def _dequantize(node, inits: dict[str, TensorProto]) -> np.ndarray:
    """DequantizeLinear of constants, per tensor or per axis: (x - zero_point) * scale, as float32."""
    x = numpy_helper.to_array(inits[node.input[0]]).astype(np.float32)
    scale = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    zero = numpy_helper.to_array(inits[zp]).astype(np.float32) if zp else np.zeros_like(scale)
    if scale.ndim == 1 and scale.size > 1:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % x.ndim
        shape = [1] * x.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((x - zero) * scale).astype(np.float32)


def has_qdq(model: ModelProto) -> bool:
    return any(n.op_type in QDQ_OPS for n in model.graph.node)


def strip_qdq(model: ModelProto) -> tuple[ModelProto, bool]:
    """The float32 model a Q/DQ model stands for: every QuantizeLinear -> DequantizeLinear pair is taken out
    (exactly the original where weights stayed float32, as `quantize` leaves them); a DequantizeLinear of a
    constant (INT8 weights from another tool) becomes its dequantized float32 value. The flag says whether the
    result is exact, i.e. no weight had to be dequantized."""
    out = ModelProto()
    out.CopyFrom(model)
    g = out.graph
    producer = {o: n for n in g.node for o in n.output}
    inits = {t.name: t for t in g.initializer}
    graph_outputs = {o.name for o in g.output}
    rename: dict[str, str] = {}
    drop: set[int] = set()
    new_inits: list[TensorProto] = []
    exact = True
    for k, n in enumerate(g.node):
        if n.op_type != "DequantizeLinear":
            continue
        q = producer.get(n.input[0])
        if q is not None and q.op_type == "QuantizeLinear":
            rename[n.output[0]] = q.input[0]
            drop.add(k)
        elif n.input[0] in inits and all(x in inits for x in n.input[1:] if x):
            new_inits.append(numpy_helper.from_array(_dequantize(n, inits), n.output[0]))
            drop.add(k)
            exact = False
    if not drop:
        return out, True

    def resolve(name: str) -> str:
        while name in rename:
            name = rename[name]
        return name

    keep = [n for k, n in enumerate(g.node) if k not in drop]
    tail = []
    for n in keep:
        for i, x in enumerate(n.input):
            n.input[i] = resolve(x)
    for o in graph_outputs:
        if resolve(o) != o:
            tail.append(helper.make_node("Identity", [resolve(o)], [o], name=f"{o}/fp32"))
    used = {x for n in keep + tail for x in n.input}
    nodes = keep + tail
    # Q nodes whose every DQ went away are dead now
    nodes = [
        n
        for n in nodes
        if n.op_type != "QuantizeLinear" or any(o in used or o in graph_outputs for o in n.output)
    ]
    used = {x for n in nodes for x in n.input} | graph_outputs
    del g.node[:]
    g.node.extend(nodes)
    kept_inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept_inits + [t for t in new_inits if t.name in used])
    del g.value_info[:]
    return out, exact


def compare(
    original: ModelProto,
    quantized: ModelProto,
    calib: Calibration,
    samples: int = COMPARE_SAMPLES,
    base_dir: str | Path | None = None,
):
    """INT8 against float32 on the first `samples` calibration samples, in onnxruntime: per output the max abs
    error and the relative error distribution over every element of every sample (surgery.backends.measure's
    `accuracy`, surgery.verify's definitions). `base_dir`: the folder of the models' external weights. Returns
    (output -> numbers, samples used)."""
    from surgery.ort import make_session
    from surgery.verify import accuracy

    n = min(samples, len(calib))
    ref_sess, q_sess = make_session(original, base_dir), make_session(quantized, base_dir)
    names = [o.name for o in ref_sess.get_outputs()]
    ref: dict[str, list] = {k: [] for k in names}
    got: dict[str, list] = {k: [] for k in names}
    for k in range(n):
        feeds = calib.sample(k)
        for name, a, b in zip(names, ref_sess.run(names, feeds), q_sess.run(names, feeds)):
            ref[name].append(np.asarray(a).reshape(-1))
            got[name].append(np.asarray(b).reshape(-1))
    stack = lambda d: {k: np.concatenate(v) for k, v in d.items()}  # noqa: E731
    return accuracy(stack(ref), stack(got)), n
