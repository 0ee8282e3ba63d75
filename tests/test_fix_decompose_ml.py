"""decompose on ai.onnx.ml operators: each decomposition against onnxruntime running the original node, on
ensembles and models with the attribute values converters write (several trees and classes, every
post_transform, base values, missing-value tracks, NaN and boundary inputs), plus onnx.checker (full_check) on
the result, and refusals that name the node and leave the model as it was."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery.fixes import FixError, decompose_ml_leaf_index, get_fix
from surgery.ort import make_session
from surgery.verify import verify

fix = get_fix("decompose")
F, I64, F64 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.DOUBLE
TRANSFORMS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


def model_of(op, inputs, outputs, ml=1, opset=17, inits=(), **attrs):
    """One ai.onnx.ml node `n` reading `inputs` [(name, type, shape)] and writing `outputs`."""
    vi = lambda spec: helper.make_tensor_value_info(*spec)  # noqa: E731
    node = helper.make_node(
        op, [s[0] for s in inputs], [s[0] for s in outputs], "n", domain="ai.onnx.ml", **attrs
    )
    real = [s for s in inputs if s[0] not in {t.name for t in inits}]
    graph = helper.make_graph([node], "g", [vi(s) for s in real], [vi(s) for s in outputs], list(inits))
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", ml)]
    return helper.make_model(graph, ir_version=8, opset_imports=imports)


def run(model, feeds):
    sess = make_session(model)
    return [np.asarray(v) for v in sess.run(None, feeds)]


def decomposed(model, feeds, *, rtol=1e-6, node="n"):
    """Decompose `node`, check the result, and compare every output with onnxruntime on the original."""
    out = fix(model, node=node)
    onnx.checker.check_model(out, full_check=True)
    assert "ai.onnx.ml" not in {n.domain for n in out.graph.node}
    want, got = run(model, feeds), run(out, feeds)
    for w, g, o in zip(want, got, model.graph.output):
        assert w.shape == g.shape and w.dtype == g.dtype, (o.name, w.shape, g.shape, w.dtype, g.dtype)
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=o.name)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6, err_msg=o.name)
    report = verify(model, out, feeds=feeds)
    assert report.status == "ok", report.summary()
    return out


def grid_inputs(rng, n, features, nan=0.1, dtype=np.float32):
    """Values on a 0.25 grid (thresholds sit on it too, so rows land exactly on them), some NaN."""
    x = (rng.integers(-8, 9, size=(n, features)) / 4).astype(dtype)
    x[rng.random((n, features)) < nan] = np.nan
    return x


# -- random tree ensembles, written as the converters write them ------------------------------------------------
@pytest.fixture(params=["gemm", "traversal"])
def formulation(request, monkeypatch):
    """Every tree test runs with both formulations of the leaf index (traversal: as for very deep trees)."""
    if request.param == "traversal":
        monkeypatch.setattr(decompose_ml_leaf_index, "MAX_PATH_ENTRIES", 0)
    return request.param


def random_trees(rng, n_trees, features, max_depth=4, modes=("BRANCH_LEQ",), missing=0.0, shared_eq=False):
    """nodes_* attributes of `n_trees` random trees (root first in each tree, the other nodes shuffled) and the
    leaves as (tree id, node id). shared_eq: a LightGBM-style chain of BRANCH_EQ nodes sharing one true child."""
    cols = {
        k: [] for k in ("treeids", "nodeids", "featureids", "modes", "values", "truenodeids", "falsenodeids")
    }
    cols["missing_value_tracks_true"] = []
    leaves = []
    for t in range(n_trees):
        rows = []

        def grow(depth, rows=rows):
            nid = len(rows)
            rows.append(None)
            if depth >= max_depth or (depth > 0 and rng.random() < 0.25):
                rows[nid] = (nid, 0, "LEAF", 0.0, 0, 0, 0)
                return nid
            mode = modes[rng.integers(len(modes))]
            rows[nid] = "pending"
            true = grow(depth + 1)
            false = grow(depth + 1)
            thr = rng.integers(-6, 7) / 4
            rows[nid] = (
                nid,
                int(rng.integers(features)),
                mode,
                thr,
                true,
                false,
                int(rng.random() < missing),
            )
            return nid

        grow(0)
        if (
            shared_eq and t == 0
        ):  # root false branch -> EQ chain on feature 0 whose true branches share a leaf
            leaf = len(rows)
            rows.append((leaf, 0, "LEAF", 0.0, 0, 0, 0))
            first = len(rows)
            for k, v in enumerate((-1.0, 0.5, 1.25)):
                nid = len(rows)
                nxt = nid + 1 if k < 2 else rows[0][5]
                rows.append((nid, 0, "BRANCH_EQ", v, leaf, nxt, 0))
            r = rows[0]
            rows[0] = (r[0], r[1], r[2], r[3], r[4], first, r[6])
        order = [0, *rng.permutation(np.arange(1, len(rows))).tolist()]
        for k in order:
            nid, feat, mode, thr, true, false, miss = rows[k]
            for key, v in zip(cols, (t, nid, feat, mode, thr, true, false, miss)):
                cols[key].append(v)
            if mode == "LEAF":
                leaves.append((t, nid))
    return {f"nodes_{k}": v for k, v in cols.items()}, leaves


def leaf_weights(rng, leaves, columns, style, sign="mixed", prefix="class"):
    """{prefix}_treeids/nodeids/ids/weights. style: 'all' (every leaf scores every column, as a random
    forest), 'tree' (tree t scores column t % columns, as LightGBM), 'some' (each leaf a random subset),
    or a list of the only columns scored."""
    out = {f"{prefix}_{k}": [] for k in ("treeids", "nodeids", "ids", "weights")}
    for t, nid in leaves:
        if style == "all":
            cols = range(columns)
        elif style == "tree":
            cols = [t % columns]
        elif style == "some":
            cols = [c for c in range(columns) if rng.random() < 0.6]
        else:
            cols = style
        for c in cols:
            w = rng.integers(1, 20) / 16 if sign == "pos" else rng.integers(-20, 21) / 16
            for k, v in zip(("treeids", "nodeids", "ids", "weights"), (t, nid, c, float(w))):
                out[f"{prefix}_{k}"].append(v)
    return out


def tree_classifier(rng, classes, style, *, labels=None, base=None, post="NONE", sign="mixed", **tree_kw):
    nodes, leaves = random_trees(rng, tree_kw.pop("n_trees", 5), 4, **tree_kw)
    attrs = {**nodes, **leaf_weights(rng, leaves, classes, style, sign), "post_transform": post}
    attrs["classlabels_int64s"] = labels or list(range(classes))
    if base is not None:
        attrs["base_values"] = base
    return model_of(
        "TreeEnsembleClassifier",
        [("x", F, ["N", 4])],
        [("label", I64, ["N"]), ("scores", F, ["N", classes])],
        **attrs,
    )


@pytest.mark.parametrize("post", TRANSFORMS)
@pytest.mark.parametrize("style", ["all", "tree", "some"])
def test_tree_classifier_multiclass(post, style, formulation):
    rng = np.random.default_rng(len(post) * 7 + len(style))
    for base in (None, [0.25, -0.5, 0.125, 0.0]):
        model = tree_classifier(rng, 4, style, labels=[3, 1, 7, 5], base=base, post=post, missing=0.5)
        x = grid_inputs(rng, 300, 4)
        decomposed(model, {"x": x}, rtol=1e-5)


BINARY = [  # (class ids scored, base values, weight sign): what GBM, LightGBM, XGBoost and forests write
    ([0], None, "mixed"),
    ([0], [0.5], "mixed"),
    ([0], None, "pos"),
    ([0], [0.25], "pos"),
    ([0], [0.1, 0.2], "pos"),
    ([1], None, "pos"),
    ([1], [0.1, 0.2], "mixed"),
    ("all", None, "pos"),
    ("all", [0.25], "mixed"),
    ("all", [0.1, 0.2], "pos"),
]


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("scored, base, sign", BINARY)
def test_tree_classifier_binary_follows_onnxruntime(scored, base, sign, post, formulation):
    rng = np.random.default_rng(11)
    model = tree_classifier(rng, 2, scored, labels=[3, 7], base=base, post=post, sign=sign, missing=0.3)
    decomposed(model, {"x": grid_inputs(rng, 300, 4)})


def test_tree_classifier_every_mode_missing_tracks_and_a_shared_subtree(formulation):
    rng = np.random.default_rng(5)
    modes = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
    model = tree_classifier(
        rng, 3, "all", post="SOFTMAX", modes=modes, missing=0.5, shared_eq=True, n_trees=8
    )
    x = grid_inputs(rng, 500, 4, nan=0.2)
    x[:5, 0] = [-1.0, 0.5, 1.25, np.nan, 2.0]  # the shared chain's members
    decomposed(model, {"x": x}, rtol=1e-5)


@pytest.mark.parametrize("dtype", [F64, I64])
def test_tree_classifier_double_and_integer_inputs(dtype, formulation):
    rng = np.random.default_rng(3)
    nodes, leaves = random_trees(rng, 4, 3, missing=0.5)
    attrs = {
        **nodes,
        **leaf_weights(rng, leaves, 3, "all"),
        "classlabels_int64s": [0, 1, 2],
        "post_transform": "SOFTMAX",
    }
    model = model_of(
        "TreeEnsembleClassifier", [("x", dtype, ["N", 3])], [("l", I64, ["N"]), ("p", F, ["N", 3])], **attrs
    )
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    x = grid_inputs(rng, 200, 3, nan=0.0, dtype=np.float64) * (4 if dtype == I64 else 1)
    decomposed(model, {"x": x.astype(np_type)}, rtol=1e-5)


@pytest.mark.parametrize("how", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets", [1, 3])
def test_tree_regressor(how, targets, formulation):
    rng = np.random.default_rng(targets * 10 + len(how))
    nodes, leaves = random_trees(rng, 6, 4, missing=0.4, modes=("BRANCH_LEQ", "BRANCH_LT"))
    style = "all" if targets == 1 else "some"
    weights = leaf_weights(rng, leaves, targets, style, prefix="target")
    for post, base in (
        ("NONE", None),
        ("NONE", [0.5] * targets),
        ("LOGISTIC", [0.25] * targets),
        ("SOFTMAX", None),
    ):
        attrs = {**nodes, **weights, "n_targets": targets, "aggregate_function": how, "post_transform": post}
        if base is not None:
            attrs["base_values"] = base
        model = model_of("TreeEnsembleRegressor", [("x", F, ["N", 4])], [("y", F, ["N", targets])], **attrs)
        decomposed(model, {"x": grid_inputs(rng, 300, 4)}, rtol=1e-5)


def test_tree_regressor_single_target_probit_and_leaves_without_weights(formulation):
    rng = np.random.default_rng(8)
    nodes, leaves = random_trees(rng, 3, 4)
    weights = leaf_weights(rng, leaves[::2], 1, "all", prefix="target")  # half the leaves have no weight
    nodes["nodes_values"] = [
        v if m != "LEAF" else 0.125 for v, m in zip(nodes["nodes_values"], nodes["nodes_modes"])
    ]
    for post in ("NONE", "PROBIT", "LOGISTIC"):
        attrs = {**nodes, **weights, "n_targets": 1, "post_transform": post, "aggregate_function": "AVERAGE"}
        model = model_of("TreeEnsembleRegressor", [("x", F, ["N", 4])], [("y", F, ["N", 1])], **attrs)
        decomposed(model, {"x": grid_inputs(rng, 200, 4) / 8})


def _v5(rng, n_trees, targets, how, post, members=True):
    """An opset-5 TreeEnsemble: random trees from random_trees, leaves renumbered into leaf arrays, some nodes
    turned into BRANCH_MEMBER."""
    nodes, _ = random_trees(rng, n_trees, 4, missing=0.3, modes=("BRANCH_LEQ", "BRANCH_GT"))
    idx = {(t, n): k for k, (t, n) in enumerate(zip(nodes["nodes_treeids"], nodes["nodes_nodeids"]))}
    inner = [k for k, m in enumerate(nodes["nodes_modes"]) if m != "LEAF"]
    leaf = [k for k, m in enumerate(nodes["nodes_modes"]) if m == "LEAF"]
    pos_inner, pos_leaf = {k: i for i, k in enumerate(inner)}, {k: i for i, k in enumerate(leaf)}
    kinds = {"BRANCH_LEQ": 0, "BRANCH_GT": 3}
    a = {
        "tree_roots": [],
        "nodes_featureids": [],
        "nodes_modes": [],
        "nodes_splits": [],
        "membership_values": [],
    }
    for key in ("truenodeids", "trueleafs", "falsenodeids", "falseleafs", "missing_value_tracks_true"):
        a[f"nodes_{key}"] = []
    for k in inner:
        t = nodes["nodes_treeids"][k]
        if nodes["nodes_nodeids"][k] == 0:
            a["tree_roots"].append(pos_inner[k])
        mode = kinds[nodes["nodes_modes"][k]]
        if members and rng.random() < 0.3:
            mode = 6
            a["membership_values"] += [float(v) for v in rng.choice(np.arange(-2, 3), 3, replace=False)] + [
                np.nan
            ]  # onnxruntime: integers only
        a["nodes_modes"].append(mode)
        a["nodes_featureids"].append(nodes["nodes_featureids"][k])
        a["nodes_splits"].append(nodes["nodes_values"][k])
        a["nodes_missing_value_tracks_true"].append(nodes["nodes_missing_value_tracks_true"][k])
        for side in ("true", "false"):
            child = idx[(t, nodes[f"nodes_{side}nodeids"][k])]
            is_leaf = child in pos_leaf
            a[f"nodes_{side}nodeids"].append(pos_leaf[child] if is_leaf else pos_inner[child])
            a[f"nodes_{side}leafs"].append(int(is_leaf))
    targets_of = rng.integers(targets, size=len(leaf))
    tensors = {
        "nodes_splits": np.array(a.pop("nodes_splits"), np.float32),
        "nodes_modes": np.array(a.pop("nodes_modes"), np.uint8),
        "leaf_weights": (rng.integers(-20, 21, size=len(leaf)) / 16).astype(np.float32),
    }
    members_list = a.pop("membership_values")
    if members_list:
        tensors["membership_values"] = np.array(members_list, np.float32)
    attrs = {**a, **{k: numpy_helper.from_array(v) for k, v in tensors.items()}}
    attrs.update(
        leaf_targetids=targets_of.tolist(), n_targets=targets, aggregate_function=how, post_transform=post
    )
    return model_of("TreeEnsemble", [("x", F, ["N", 4])], [("y", F, ["N", targets])], ml=5, opset=21, **attrs)


def _as_double(model):
    """The same TreeEnsemble on doubles: double input, output, splits and leaf weights."""
    for vi in [*model.graph.input, *model.graph.output]:
        vi.type.tensor_type.elem_type = F64
    for attr in model.graph.node[0].attribute:
        if attr.name in ("nodes_splits", "leaf_weights", "membership_values"):
            attr.t.CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float64), attr.t.name)
            )
    return model


@pytest.mark.parametrize("post", [0, 1, 2, 3, 4])
def test_tree_ensemble_opset5_on_doubles(post, formulation):
    rng = np.random.default_rng(post)
    model = _as_double(_v5(rng, 3, 3, 1, post))
    x = np.round(grid_inputs(rng, 200, 4, dtype=np.float64) * 2)
    decomposed(model, {"x": x}, rtol=1e-6)


@pytest.mark.parametrize("how", [0, 1, 2, 3])
@pytest.mark.parametrize("targets, post", [(1, 0), (2, 2), (3, 1)])
def test_tree_ensemble_opset5_with_set_membership(how, targets, post, formulation):
    rng = np.random.default_rng(how * 5 + targets)
    model = _v5(rng, 4, targets, how, post)
    # categorical values are integers: there onnxruntime's set membership is the spec's (x in the set)
    decomposed(model, {"x": np.round(grid_inputs(rng, 300, 4) * 2)}, rtol=1e-5)


def test_a_deep_forest_goes_through_tree_traversal():
    # as a default scikit-learn random forest: hundreds of leaves per tree, a path matrix too large for GEMM
    rng = np.random.default_rng(21)
    nodes, leaves = random_trees(rng, 30, 4, max_depth=16, missing=0.2)
    attrs = {**nodes, **leaf_weights(rng, leaves, 3, "all", "pos"), "classlabels_int64s": [0, 1, 2]}
    model = model_of(
        "TreeEnsembleClassifier", [("x", F, ["N", 4])], [("l", I64, ["N"]), ("p", F, ["N", 3])], **attrs
    )
    out = decomposed(model, {"x": grid_inputs(rng, 500, 4)}, rtol=1e-5)
    assert "GatherElements" in {n.op_type for n in out.graph.node} and "MatMul" not in {
        n.op_type for n in out.graph.node
    }


# -- linear models and preprocessing ----------------------------------------------------------------------------
@pytest.mark.parametrize("post", TRANSFORMS)
def test_linear_classifier_multiclass(post):
    rng = np.random.default_rng(1)
    coef = (rng.standard_normal(12) * 0.3).astype(np.float32).tolist()
    model = model_of(
        "LinearClassifier", [("x", F, ["N", 4])], [("l", I64, ["N"]), ("p", F, ["N", 3])],
        coefficients=coef, intercepts=[0.1, -0.2, 0.05], classlabels_ints=[2, 0, 9], post_transform=post,
        multi_class=1,
    )  # fmt: skip
    x = rng.standard_normal((200, 4)).astype(np.float32) * (0.2 if post == "PROBIT" else 1)
    decomposed(model, {"x": x})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_classifier_binary_one_score_and_two_scores(post):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((100, 3)).astype(np.float32)
    one = model_of(
        "LinearClassifier", [("x", F, ["N", 3])], [("l", I64, ["N"]), ("p", F, ["N", 2])],
        coefficients=[0.5, -0.25, 0.125], intercepts=[0.1], classlabels_ints=[4, 8], post_transform=post,
    )  # fmt: skip
    decomposed(one, {"x": x})
    two = model_of(  # skl2onnx's binary logistic regression: -w, w and -b, b
        "LinearClassifier", [("x", I64, ["N", 3])], [("l", I64, ["N"]), ("p", F, ["N", 2])],
        coefficients=[-0.5, 0.25, -0.125, 0.5, -0.25, 0.125], intercepts=[-0.1, 0.1], classlabels_ints=[0, 1],
        post_transform=post,
    )  # fmt: skip
    decomposed(two, {"x": rng.integers(-3, 4, (100, 3))})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "PROBIT", "SOFTMAX"])
@pytest.mark.parametrize("targets", [1, 2])
def test_linear_regressor(post, targets):
    rng = np.random.default_rng(targets)
    coef = (rng.standard_normal(3 * targets) * 0.1).astype(np.float32).tolist()
    model = model_of(
        "LinearRegressor", [("x", F, ["N", 3])], [("y", F, ["N", targets])],
        coefficients=coef, intercepts=[0.3] * targets, targets=targets, post_transform=post,
    )  # fmt: skip
    decomposed(model, {"x": rng.standard_normal((50, 3)).astype(np.float32)})


def test_linear_regressor_one_dimensional_input_gives_one_row():
    model = model_of("LinearRegressor", [("x", F, [3])], [("y", F, [1, 1])], coefficients=[1.0, 2.0, 3.0])
    decomposed(model, {"x": np.array([1, 2, 3], np.float32)})


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("dtype", [F, I64])
def test_normalizer(norm, dtype):
    rng = np.random.default_rng(4)
    x = rng.integers(-3, 4, (60, 5)).astype(helper.tensor_dtype_to_np_dtype(dtype))
    x[0] = 0  # a zero norm leaves the row as it is
    x[1] = [0, 0, -3, 0, 0]  # MAX of 0 with a negative entry
    model = model_of("Normalizer", [("x", dtype, ["N", 5])], [("y", F, ["N", 5])], norm=norm)
    decomposed(model, {"x": x})


def test_binarizer():  # onnxruntime implements it for float only
    x = np.array([[-1, 0, 0.5, 1], [2, 0.25, 0.75, 3]], np.float32)
    model = model_of("Binarizer", [("x", F, [2, 4])], [("y", F, [2, 4])], threshold=0.5)
    decomposed(model, {"x": x})


def test_imputer_nan_and_value_and_integers():
    x = np.array([[np.nan, 1, 2], [3, np.nan, -1], [-1, -1, np.nan]], np.float32)
    nan = model_of(
        "Imputer", [("x", F, ["N", 3])], [("y", F, ["N", 3])],
        imputed_value_floats=[0.5, 1.5, 2.5], replaced_value_float=float("nan"),
    )  # fmt: skip
    decomposed(nan, {"x": x})
    value = model_of(
        "Imputer",
        [("x", F, ["N", 3])],
        [("y", F, ["N", 3])],
        imputed_value_floats=[9.0],
        replaced_value_float=-1.0,
    )
    decomposed(value, {"x": np.nan_to_num(x, nan=4.0)})
    ints = model_of(
        "Imputer",
        [("x", I64, ["N", 3])],
        [("y", I64, ["N", 3])],
        imputed_value_int64s=[7, 8, 9],
        replaced_value_int64=-1,
    )
    decomposed(ints, {"x": np.array([[-1, 2, 3], [4, -1, -1]], np.int64)})


def test_array_feature_extractor_two_and_one_dimensions():
    idx = numpy_helper.from_array(np.array([2, 0, 2], np.int64), "i")
    two = model_of(
        "ArrayFeatureExtractor", [("x", F, ["N", 4]), ("i", I64, [3])], [("y", F, ["N", 3])], inits=[idx]
    )
    decomposed(two, {"x": np.arange(12, dtype=np.float32).reshape(3, 4)})
    one = model_of(
        "ArrayFeatureExtractor", [("x", I64, [4]), ("i", I64, [3])], [("y", I64, [1, 3])], inits=[idx]
    )
    decomposed(one, {"x": np.array([5, 6, 7, 8], np.int64)})


@pytest.mark.parametrize("dtype", [I64, F])
def test_one_hot_encoder_on_numbers(dtype):
    x = np.array([[1, 3], [2, 9], [3.7, 1]]).astype(helper.tensor_dtype_to_np_dtype(dtype))
    model = model_of(
        "OneHotEncoder", [("x", dtype, ["N", 2])], [("y", F, ["N", 2, 3])], cats_int64s=[1, 2, 3], zeros=1
    )
    decomposed(model, {"x": x})


def test_label_encoder_numbers_opset2_and_opset4():
    x = np.array([[1, 5], [3, 2]], np.int64)
    ints = model_of(
        "LabelEncoder", [("x", I64, ["N", 2])], [("y", I64, ["N", 2])], ml=2,
        keys_int64s=[1, 2, 3], values_int64s=[10, 20, 30], default_int64=-7,
    )  # fmt: skip
    decomposed(ints, {"x": x})
    to_float = model_of(
        "LabelEncoder", [("x", I64, ["N", 2])], [("y", F, ["N", 2])], ml=2,
        keys_int64s=[1, 2, 3], values_floats=[0.5, 1.5, 2.5], default_float=-1.0,
    )  # fmt: skip
    decomposed(to_float, {"x": x})
    v4 = model_of(
        "LabelEncoder", [("x", F, ["N"])], [("y", I64, ["N"])], ml=4,
        keys_tensor=numpy_helper.from_array(np.array([0.5, 1.5], np.float32)),
        values_tensor=numpy_helper.from_array(np.array([4, 5], np.int64)),
        default_tensor=numpy_helper.from_array(np.array([-1], np.int64)),
    )  # fmt: skip
    decomposed(v4, {"x": np.array([0.5, 1.0, 1.5], np.float32)})


# -- SVMs --------------------------------------------------------------------------------------------------------
KERNELS = [("LINEAR", [0.0, 0.0, 0.0]), ("POLY", [0.5, 1.0, 2.0]), ("POLY", [0.5, 1.0, 3.0]),
           ("POLY", [0.25, 0.5, 2.5]), ("RBF", [0.3, 0.0, 0.0]), ("SIGMOID", [0.2, -0.5, 0.0])]  # fmt: skip


@pytest.mark.parametrize("kernel, params", KERNELS)
def test_svm_regressor_kernels(kernel, params):
    rng = np.random.default_rng(6)
    sv = rng.standard_normal((7, 3)).astype(np.float32)
    attrs = dict(
        kernel_type=kernel, kernel_params=params, rho=[0.25], support_vectors=sv.reshape(-1).tolist()
    )
    model = model_of(
        "SVMRegressor", [("x", F, ["N", 3])], [("y", F, ["N", 1])], n_supports=7,
        coefficients=rng.standard_normal(7).astype(np.float32).tolist(), **attrs,
    )  # fmt: skip
    decomposed(model, {"x": np.abs(rng.standard_normal((40, 3))).astype(np.float32)}, rtol=1e-5)


def test_svm_regressor_linear_mode_and_one_class():
    x = np.random.default_rng(0).standard_normal((30, 3)).astype(np.float32)
    linear = model_of(
        "SVMRegressor", [("x", F, ["N", 3])], [("y", F, ["N", 1])],
        coefficients=[1.0, -2.0, 0.5], rho=[0.1], kernel_params=[0.0, 0.0, 0.0],
    )  # fmt: skip
    decomposed(linear, {"x": x})
    one_class = model_of(
        "SVMRegressor", [("x", F, ["N", 3])], [("y", F, ["N", 1])], n_supports=2, one_class=1, kernel_type="RBF",
        kernel_params=[0.5, 0, 0], coefficients=[1.0, -1.0], rho=[0.05], support_vectors=[0.0, 0.0, 0.0, 1.0, 1.0, 1.0],
    )  # fmt: skip
    decomposed(one_class, {"x": x})


def svm_classifier(rng, classes, kernel="RBF", params=(0.3, 0.0, 0.0), proba=False, post="NONE", labels=None):
    per_class = [3, 4, 2, 3][:classes]
    sv = rng.standard_normal((sum(per_class), 3)).astype(np.float32)
    attrs = dict(
        kernel_type=kernel, kernel_params=list(params), vectors_per_class=per_class,
        support_vectors=sv.reshape(-1).tolist(), post_transform=post,
        coefficients=rng.standard_normal((classes - 1) * sum(per_class)).astype(np.float32).tolist(),
        rho=(rng.standard_normal(classes * (classes - 1) // 2) * 0.2).astype(np.float32).tolist(),
        classlabels_ints=labels or list(range(classes)),
    )  # fmt: skip
    if proba:
        attrs.update(prob_a=[-1.2], prob_b=[0.1])
    width = classes if proba or classes == 2 else classes * (classes - 1) // 2  # proba: one per class
    return model_of(
        "SVMClassifier", [("x", F, ["N", 3])], [("l", I64, ["N"]), ("p", F, ["N", width])], **attrs
    )


@pytest.mark.parametrize("kernel, params", KERNELS)
@pytest.mark.parametrize("classes", [2, 3])
def test_svm_classifier_votes(kernel, params, classes):
    rng = np.random.default_rng(classes)
    model = svm_classifier(rng, classes, kernel, params, labels=[5, 6, 9][:classes])
    decomposed(model, {"x": rng.standard_normal((60, 3)).astype(np.float32)}, rtol=1e-5)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_svm_classifier_binary_transforms_and_probabilities(post):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((300, 3)).astype(np.float32)
    decomposed(svm_classifier(rng, 2, post=post), {"x": x}, rtol=1e-5)
    decomposed(svm_classifier(rng, 2, "LINEAR", proba=True, post=post), {"x": x}, rtol=1e-5)


def test_svm_classifier_liblinear_mode():
    rng = np.random.default_rng(13)
    x = rng.standard_normal((80, 3)).astype(np.float32)
    for classes, coef in ((2, [0.5, -1, 0.25, -0.5, 1, -0.25]), (3, rng.standard_normal(9).tolist())):
        model = model_of(
            "SVMClassifier", [("x", F, ["N", 3])], [("l", I64, ["N"]), ("p", F, ["N", classes])],
            coefficients=[float(c) for c in coef], rho=[0.1], classlabels_ints=list(range(1, classes + 1)),
            kernel_params=[0.0, 0.0, 0.0],
        )  # fmt: skip
        decomposed(model, {"x": x})


# -- ZipMap ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("labels", [[2, 0, 1], ["b", "a", "c"]])
def test_zipmap_is_dropped_and_its_maps_compare_with_the_tensor(labels):
    key = TensorProto.INT64 if isinstance(labels[0], int) else TensorProto.STRING
    seq = helper.make_sequence_type_proto(
        helper.make_map_type_proto(key, helper.make_tensor_type_proto(F, []))
    )
    attr = {"classlabels_int64s" if key == TensorProto.INT64 else "classlabels_strings": labels}
    node = helper.make_node("ZipMap", ["p"], ["out"], "zm", domain="ai.onnx.ml", **attr)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("p", F, ["N", 3])], [helper.make_value_info("out", seq)]
    )
    model = helper.make_model(
        graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    )
    out = fix(model, node="zm")
    onnx.checker.check_model(out, full_check=True)
    assert out.graph.output[0].type.tensor_type.elem_type == F and [n.op_type for n in out.graph.node] == [
        "Identity"
    ]
    p = np.random.default_rng(0).random((4, 3)).astype(np.float32)
    report = verify(model, out, feeds={"p": p}, safety="changes-semantics")
    assert report.status == "ok" and report.worst() == (0.0, 0.0), report.summary()
    assert "a sequence of maps became a tensor" in report.message
    assert verify(model, out, feeds={"p": p}).status == "failed"  # an exact fix may not change the type


# -- refusals --------------------------------------------------------------------------------------------------
def _unchanged_after_refusal(model, match, node="n"):
    before = model.SerializeToString()
    with pytest.raises(FixError, match=match):
        fix(model, node=node)
    assert model.SerializeToString() == before


def test_refusals_name_the_node_and_leave_the_model_unchanged():
    rng = np.random.default_rng(0)
    nodes, leaves = random_trees(rng, 2, 4)
    strings = model_of(
        "TreeEnsembleClassifier", [("x", F, ["N", 4])],
        [("label", TensorProto.STRING, ["N"]), ("scores", F, ["N", 3])],
        **nodes, **leaf_weights(rng, leaves, 3, "all"), classlabels_strings=["high", "low", "mid"],
    )  # fmt: skip
    _unchanged_after_refusal(strings, r"TreeEnsembleClassifier 'n': its label output 'label' holds strings")
    svm = svm_classifier(rng, 2, kernel="RBF")
    for a in svm.graph.node[0].attribute:
        if a.name == "kernel_type":
            a.s = b"CHEBYSHEV"
    _unchanged_after_refusal(svm, r"SVMClassifier 'n': unknown kernel_type 'CHEBYSHEV'")
    three = svm_classifier(rng, 3, proba=True)
    _unchanged_after_refusal(three, r"SVMClassifier 'n': probabilities for 3 classes .* pairwise coupling")
    ohe = model_of(
        "OneHotEncoder", [("s", TensorProto.STRING, ["N"])], [("y", F, ["N", 2])], cats_strings=["a", "b"]
    )
    _unchanged_after_refusal(ohe, r"OneHotEncoder 'n': its categories are strings")
    old = model_of(
        "Imputer", [("x", F, ["N", 2])], [("y", F, ["N", 2])], opset=8,
        imputed_value_floats=[0.0], replaced_value_float=float("nan"),
    )  # fmt: skip
    _unchanged_after_refusal(
        old, r"Imputer 'n': .* needs IsNaN and Where \(ai.onnx opset 9\); the model imports opset 8"
    )


def test_string_labels_nobody_reads_still_decompose():
    rng = np.random.default_rng(1)
    nodes, leaves = random_trees(rng, 3, 4)
    model = model_of(
        "TreeEnsembleClassifier", [("x", F, ["N", 4])], [("label", TensorProto.STRING, ["N"]), ("scores", F, ["N", 3])],
        **nodes, **leaf_weights(rng, leaves, 3, "all"), classlabels_strings=["high", "low", "mid"],
    )  # fmt: skip
    del model.graph.output[0]  # nothing reads the label
    decomposed(model, {"x": grid_inputs(rng, 50, 4)})


def test_a_model_importing_only_ai_onnx_ml_gets_a_default_opset():
    # onnxmltools writes XGBoost models with ai.onnx.ml as their only opset
    rng = np.random.default_rng(2)
    nodes, leaves = random_trees(rng, 3, 4, modes=("BRANCH_LT",))
    model = model_of(
        "TreeEnsembleRegressor", [("x", F, ["N", 4])], [("y", F, ["N", 1])],
        **nodes, **leaf_weights(rng, leaves, 1, "all", prefix="target"), n_targets=1, base_values=[0.5],
    )  # fmt: skip
    del model.opset_import[0]
    out = decomposed(model, {"x": grid_inputs(rng, 50, 4)})
    assert {(o.domain, o.version) for o in out.opset_import} == {("", 17)}
