"""Classical ML (ai.onnx.ml) operators decomposed into standard ONNX ops that TensorRT, OpenVINO and TVM import:
linear models, preprocessing (Normalizer, Binarizer, Imputer, OneHotEncoder, LabelEncoder,
ArrayFeatureExtractor) and ZipMap. SVMs are in decompose_ml_svm, tree ensembles in decompose_ml_trees; the
shared node builder and onnxruntime's post transforms in decompose_ml_builder.

Each function is registered with `@decomposition("ai.onnx.ml", op)` (see surgery.fixes.decompose) and computes
what onnxruntime computes for the op: the fix is verified against onnxruntime running the original. String
tensors cannot exist in a TensorRT engine; a decomposition that would have to produce one refuses with a
FixError naming the node."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from surgery.fixes import FixError
from surgery.fixes.decompose import decomposition
from surgery.fixes.decompose_ml_builder import (
    FLOAT,
    INT64,
    Builder,
    attrs,
    binary_pair,
    describe,
    int_labels,
    label_lookup,
    pick,
    post_transform,
    probit,
)


def _linear_scores(b: Builder, coefficients, intercepts, targets: int) -> tuple[str, int]:
    """Gemm(x, W, bias) with W [targets, features]: the same call onnxruntime's kernels make, so the same
    rounding. Returns (scores [N, targets], number of features)."""
    coef = np.asarray(coefficients, np.float32)
    if targets < 1 or coef.size % targets:
        raise FixError(f"{describe(b.node)}: {coef.size} coefficients do not split into {targets} rows")
    width = coef.size // targets
    bias = np.asarray(intercepts if intercepts else np.zeros(targets), np.float32)
    if bias.size not in (1, targets):
        raise FixError(f"{describe(b.node)}: {bias.size} intercepts for {targets} targets")
    x = b.rows(b.as_float(b.node.input[0]), width, like=b.node.input[0])
    w = b.const(coef.reshape(targets, width), "coefficients")
    return b.op("Gemm", [x, w, b.const(bias, "intercepts")], "scores", transB=1), width


@decomposition("ai.onnx.ml", "LinearRegressor")
def linear_regressor(node, facts, fresh):
    """y = x W^T + b; post_transform over the targets (with one target, onnxruntime applies only PROBIT)."""
    b, a = Builder(node, facts, fresh), attrs(node)
    targets = int(a.get("targets", 1))
    scores, _ = _linear_scores(b, a.get("coefficients", []), a.get("intercepts"), targets)
    kind = a.get("post_transform", "NONE")
    if targets == 1:
        if kind == "PROBIT":
            probit(b, scores, out=node.output[0])
        else:
            b.op("Identity", [scores], "scores", node.output[0])
    else:
        post_transform(b, scores, kind, node.output[0])
    return b.result()


@decomposition("ai.onnx.ml", "LinearClassifier")
def linear_classifier(node, facts, fresh):
    """scores = x W^T + b. Several classes: label = classlabels[argmax(scores)] (first on ties), scores through
    post_transform. One score with two labels: label = classlabels[score > 0], scores [1 - s, s] (LOGISTIC:
    [sigmoid(-s), sigmoid(s)])."""
    b, a = Builder(node, facts, fresh), attrs(node)
    intercepts = a.get("intercepts") or []
    if not intercepts:
        raise FixError(f"{describe(node)}: no intercepts; onnxruntime counts the classes by them")
    classes = len(intercepts)
    labels = int_labels(b, a, "classlabels_ints", "classlabels_strings", 0)
    n_labels = len(a.get("classlabels_ints") or a.get("classlabels_strings") or [])
    scores, _ = _linear_scores(b, a.get("coefficients", []), intercepts, classes)
    kind = a.get("post_transform", "NONE")
    if classes == 1:
        if n_labels != 2:
            raise FixError(f"{describe(node)}: one score needs exactly two class labels, got {n_labels}")
        if labels is not None and b.used(0):
            positive = b.reshape(b.op("Greater", [scores, b.const(np.float32(0), "zero")], "positive"), [-1])
            pick(b, positive, labels[1], labels[0], node.output[0])
        if b.used(1):
            binary_pair(b, scores, kind, complement=True, out=node.output[1])
        return b.result()
    if labels is not None and b.used(0):
        if len(labels) < classes:
            raise FixError(f"{describe(node)}: {len(labels)} class labels for {classes} classes")
        best = b.op("ArgMax", [scores], "argmax", axis=1, keepdims=0)
        label_lookup(b, best, labels[:classes], node.output[0])
    if b.used(1):
        post_transform(b, scores, kind, node.output[1])
    return b.result()


@decomposition("ai.onnx.ml", "Normalizer")
def normalizer(node, facts, fresh):
    """Each row divided by its MAX, L1 or L2 norm (a zero norm leaves the row as it is); L2 as onnxruntime
    computes it, sign(x) * sqrt(x^2 / sum(x^2))."""
    b, a = Builder(node, facts, fresh), attrs(node)
    norm = a.get("norm", "MAX")
    x = b.as_float(node.input[0])
    if norm == "MAX":
        total = b.reduce("ReduceMax", x, [-1], 1, "max")
    elif norm == "L1":
        total = b.reduce("ReduceSum", b.op("Abs", [x]), [-1], 1, "sum_abs")
    elif norm == "L2":
        square = b.op("Mul", [x, x], "square")
        total = b.reduce("ReduceSum", square, [-1], 1, "sum_squares")
    else:
        raise FixError(f"{describe(node)}: unknown norm '{norm}'. Note: MAX, L1 or L2")
    divisor = b.op("Add", [total, b.is_zero(total)], "divisor")  # 0 -> 1, anything else unchanged
    if norm != "L2":
        b.op("Div", [x, divisor], "normalized", node.output[0])
        return b.result()
    zero = b.const(np.float32(0), "zero")
    sign = b.op(
        "Sub",
        [b.cast(b.op("Greater", [x, zero]), FLOAT), b.cast(b.op("Less", [x, zero]), FLOAT)],
        "sign",
    )
    root = b.op("Sqrt", [b.op("Div", [square, divisor], "share")], "root")
    b.op("Mul", [sign, root], "normalized", node.output[0])
    return b.result()


@decomposition("ai.onnx.ml", "Binarizer")
def binarizer(node, facts, fresh):
    """1 where x > threshold, else 0, in x's type (onnxruntime refuses NaN inputs; here they give 0)."""
    b, a = Builder(node, facts, fresh), attrs(node)
    x = node.input[0]
    dtype = b.dtype(x) or FLOAT
    if dtype not in (FLOAT, TensorProto.DOUBLE, INT64, TensorProto.INT32):
        raise FixError(f"{describe(node)}: input type {TensorProto.DataType.Name(dtype)} is not numeric")
    compare = x if dtype in (FLOAT, TensorProto.DOUBLE) else b.cast(x, FLOAT, "as_float")
    np_type = np.float64 if dtype == TensorProto.DOUBLE else np.float32
    above = b.op("Greater", [compare, b.const(np_type(a.get("threshold", 0.0)), "threshold")], "above")
    b.cast(above, dtype, "binary", node.output[0])
    return b.result()


@decomposition("ai.onnx.ml", "Imputer")
def imputer(node, facts, fresh):
    """Replaces the missing value (NaN, or `replaced_value_*`) by the imputed value of its column."""
    b, a = Builder(node, facts, fresh), attrs(node)
    x = node.input[0]
    ints = b.dtype(x) in (INT64, TensorProto.INT32)
    values = a.get("imputed_value_int64s") if ints else a.get("imputed_value_floats")
    if not values:
        raise FixError(f"{describe(node)}: no imputed values for its {'integer' if ints else 'float'} input")
    np_type = np.dtype(helper.tensor_dtype_to_np_dtype(b.dtype(x) or FLOAT)).type
    fill = b.const(np.asarray(values, np_type), "imputed")
    if ints:
        missing = b.op("Equal", [x, b.const(np_type(a.get("replaced_value_int64", 0)), "missing_value")])
    else:
        replaced = float(a.get("replaced_value_float", 0.0))
        b.need(9, "IsNaN and Where")
        if np.isnan(replaced):
            missing = b.op("IsNaN", [x], "missing")
        else:
            b.need(11, "Equal on floats")
            missing = b.op("Equal", [x, b.const(np_type(replaced), "missing_value")], "missing")
    b.where(missing, fill, x, "imputed", node.output[0])
    return b.result()


@decomposition("ai.onnx.ml", "ZipMap")
def zipmap(node, facts, fresh):
    """Dropped: the output becomes the probability tensor [N, classes] it was made from (one map per row, keys
    = the class labels, in column order). Readers of the maps would break, so only a graph output is dropped."""
    b = Builder(node, facts, fresh)
    if facts.consumers.get(node.output[0]):
        raise FixError(
            f"{describe(node)}: nodes read its sequence of maps; replacing it by a tensor would break them. "
            "Note: only a ZipMap whose output is a graph output is dropped"
        )
    b.op("Identity", [node.input[0]], "probabilities", node.output[0])
    return b.result()


@decomposition("ai.onnx.ml", "ArrayFeatureExtractor")
def array_feature_extractor(node, facts, fresh):
    """Gather along the last axis with the flattened indices; a 1-D input gives one row, as in onnxruntime."""
    b = Builder(node, facts, fresh)
    x, idx = node.input[0], node.input[1]
    if b.dtype(x) == TensorProto.STRING:
        raise FixError(
            f"{describe(node)}: it picks from strings ('{x}'), which TensorRT, OpenVINO and TVM cannot hold. "
            "Note: keep the lookup after the engine (cut the model before it)"
        )
    flat = b.reshape(idx, [-1], "indices")
    rank = facts.info(x).rank
    if rank is None:
        raise FixError(f"{describe(node)}: the rank of '{x}' is unknown. Note: freeze the input shapes first")
    if rank == 1:
        b.reshape(b.op("Gather", [x, flat], "picked", axis=0), [1, -1], "row", node.output[0])
    else:
        b.op("Gather", [x, flat], "picked", node.output[0], axis=rank - 1)
    return b.result()


@decomposition("ai.onnx.ml", "OneHotEncoder")
def one_hot_encoder(node, facts, fresh):
    """x (numbers, truncated to int64 as onnxruntime does) against the categories: a float one-hot on a new last
    axis. An unknown value gives a zero row (with zeros=0 onnxruntime fails on it instead)."""
    b, a = Builder(node, facts, fresh), attrs(node)
    if a.get("cats_strings"):
        raise FixError(
            f"{describe(node)}: its categories are strings, which TensorRT, OpenVINO and TVM cannot compare. "
            "Note: encode the strings before the engine (cut the model after the encoder)"
        )
    cats = a.get("cats_int64s") or []
    if not cats:
        raise FixError(f"{describe(node)}: no categories")
    x = node.input[0]
    if b.dtype(x) != INT64:
        x = b.cast(x, INT64, "as_int64")
    hits = b.op("Equal", [b.unsqueeze(x, [-1], "expanded"), b.const(np.array(cats, np.int64), "categories")])
    b.cast(hits, FLOAT, "one_hot", node.output[0])
    return b.result()


def _label_encoder_table(node, a: dict):
    """(keys, values, default) as numpy arrays for a numeric LabelEncoder (opset 1-4 attribute forms)."""
    if "keys_tensor" in a:
        keys, values = np.asarray(a["keys_tensor"]), np.asarray(a["values_tensor"])
        default = np.asarray(a["default_tensor"]).reshape(-1)[0] if "default_tensor" in a else None
    else:
        keys = next(
            (np.asarray(a[k]) for k in ("keys_int64s", "keys_floats", "keys_strings") if k in a), None
        )
        values = next(
            (np.asarray(a[k]) for k in ("values_int64s", "values_floats", "values_strings") if k in a), None
        )
        default = None
    if keys is None or values is None:
        raise FixError(
            f"{describe(node)}: only the opset 2-4 forms (keys_*/values_* lists or tensors) decompose"
        )
    if keys.dtype.kind in "OUS" or values.dtype.kind in "OUS":
        raise FixError(
            f"{describe(node)}: it maps strings, which TensorRT, OpenVINO and TVM cannot hold. Note: map the "
            "strings outside the engine (cut the model there)"
        )
    if default is None:
        default = a.get("default_float", -0.0) if values.dtype.kind == "f" else a.get("default_int64", -1)
    if keys.dtype.kind == "f" and np.isnan(keys).any():
        raise FixError(f"{describe(node)}: a NaN key cannot be matched with Equal")
    return keys, values, np.asarray(default, values.dtype)


@decomposition("ai.onnx.ml", "LabelEncoder")
def label_encoder(node, facts, fresh):
    """Numbers to numbers: compare with every key (a new last axis), take the value of the matching key, the
    default where none matches."""
    b, a = Builder(node, facts, fresh), attrs(node)
    keys, values, default = _label_encoder_table(node, a)
    b.need(11, "Equal and Where")
    x = node.input[0]
    key_type = np.float32 if keys.dtype.kind == "f" else np.int64
    if helper.tensor_dtype_to_np_dtype(b.dtype(x) or FLOAT) != key_type:
        raise FixError(
            f"{describe(node)}: input '{x}' does not have the keys' type {np.dtype(key_type).name}"
        )
    hits = b.op("Equal", [b.unsqueeze(x, [-1], "expanded"), b.const(keys.astype(key_type), "keys")], "hits")
    as_num = b.cast(hits, FLOAT, "hits_float")
    first = b.op("ArgMax", [as_num], "key_index", axis=-1, keepdims=0)
    found = b.cast(b.reduce("ReduceMax", as_num, [-1], 0, "any_float"), TensorProto.BOOL, "found")
    value_type = np.float32 if values.dtype.kind == "f" else np.int64
    picked = b.op("Gather", [b.const(values.astype(value_type), "values"), first], "value", axis=0)
    b.where(found, picked, b.const(default.astype(value_type), "default"), "encoded", node.output[0])
    return b.result()


@decomposition("ai.onnx.ml", "FeatureVectorizer")
def feature_vectorizer(node, facts, fresh):
    """Concatenates its inputs (each as [N, width], cast to float) along the features."""
    b, a = Builder(node, facts, fresh), attrs(node)
    widths = a.get("inputdimensions") or []
    parts = []
    for k, x in enumerate(node.input):
        if k >= len(widths):
            raise FixError(f"{describe(node)}: no inputdimensions entry for input {k}")
        parts.append(b.rows(b.as_float(x), int(widths[k]), like=x))
    b.concat(parts, 1, "features", node.output[0])
    return b.result()
