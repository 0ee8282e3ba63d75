"""Tree ensembles (ai.onnx.ml TreeEnsembleClassifier, TreeEnsembleRegressor, and the opset-5 TreeEnsemble)
decomposed into standard ops: the leaf each row reaches in each tree (decompose_ml_leaf_index: the GEMM
formulation, or tree traversal for very deep trees), the leaves' values gathered from a [leaves, classes]
table (never through a matrix product, so a TF32 GEMM on a GPU cannot round them), summed (or averaged, or
their min/max taken) over the trees, then base values, labels and the post transform.

What onnxruntime does (and the decomposition reproduces): a class or target that no reached leaf scores is
written as 0 (its base value is dropped too) and never wins the label; with two classes the binary rules of
onnxruntime's TreeAggregatorClassifier apply (scores [1 - s, s] or [-s, s] from one score, labels from
s > 0.5 or s > 0; a two-class ensemble whose leaves score both classes labels 1 or 0, not its class labels);
a single-target regressor takes each leaf's first weight (the node's value when it has none) and applies only
PROBIT; the opset-5 TreeEnsemble reads post_transform 1 as LOGISTIC and 2 as SOFTMAX (the spec says the
reverse), and transforms in float32 for double outputs. BRANCH_MEMBER is the spec's x in the set, which is
onnxruntime's for the integer values of a categorical feature (onnxruntime truncates other values in some
cases).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from surgery.fixes import FixError
from surgery.fixes.decompose import decomposition
from surgery.fixes.decompose_ml_builder import (
    FLOAT,
    Builder,
    attrs,
    binary_pair,
    describe,
    int_labels,
    label_lookup,
    pick,
    post_transform,
)
from surgery.fixes.decompose_ml_leaf_index import Forest, Leaves, Split, features_used, leaf_index

MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
V5_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
V5_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
V5_TRANSFORMS = (
    "NONE",
    "LOGISTIC",
    "SOFTMAX",
    "SOFTMAX_ZERO",
    "PROBIT",
)  # onnxruntime's order, not the spec's


# -- reading the attributes --------------------------------------------------------------------------------------
def _v3_trees(node, a: dict) -> tuple[Forest, dict, set]:
    """Trees of a TreeEnsembleClassifier/Regressor, leaves keyed (tree id, node id); the leaf values by key
    and the nodes' own values (onnxruntime's single-target fallback)."""
    where = describe(node)
    tree_ids, node_ids = a.get("nodes_treeids") or [], a.get("nodes_nodeids") or []
    n = len(node_ids)
    values = a.get("nodes_values_as_tensor")
    values = np.asarray(values if values is not None else a.get("nodes_values") or [0.0] * n, np.float64)
    modes = a.get("nodes_modes") or []
    missing = list(a.get("nodes_missing_value_tracks_true") or []) + [0] * n
    lists = [a.get(k) or [] for k in ("nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids")]
    if any(len(x) != n for x in (tree_ids, modes, values, *lists)):
        raise FixError(f"{where}: the nodes_* attributes have different lengths")
    features, trues, falses = lists
    index = {}
    for k, key in enumerate(zip(tree_ids, node_ids)):
        if key in index:
            raise FixError(f"{where}: node {key[1]} of tree {key[0]} appears twice")
        index[key] = k
    for m in set(modes) - {"LEAF", *MODES}:
        raise FixError(f"{where}: unknown node mode '{m}'")

    def children(key):
        k = index[key]
        if modes[k] == "LEAF":
            return None
        kids = ((key[0], trues[k]), (key[0], falses[k]))
        for kid in kids:
            if kid not in index:
                raise FixError(f"{where}: node {kid[1]} of tree {kid[0]} is referenced but not defined")
        return kids

    def split_of(key):
        k = index[key]
        return Split(int(features[k]), modes[k][len("BRANCH_") :], float(values[k]), bool(missing[k]))

    roots = list(dict.fromkeys(tree_ids))  # onnxruntime: a tree's first node in attribute order is its root
    first = {}
    for k, t in enumerate(tree_ids):
        first.setdefault(t, node_ids[k])
    own = {key: float(values[k]) for key, k in index.items()}
    leaves = {key for key, k in index.items() if modes[k] == "LEAF"}
    return Forest([(t, first[t]) for t in roots], children, split_of), own, leaves


def _v3_weights(node, a: dict, prefix: str, leaves: set) -> list[tuple[tuple, int, float]]:
    """(leaf key, class/target, weight) in attribute order; weights on internal nodes are ignored, as
    onnxruntime ignores them."""
    ids = a.get(f"{prefix}_ids") or []
    trees, nodes = a.get(f"{prefix}_treeids") or [], a.get(f"{prefix}_nodeids") or []
    weights = a.get(f"{prefix}_weights_as_tensor")
    weights = list(weights if weights is not None else a.get(f"{prefix}_weights") or [])
    if not (len(ids) == len(trees) == len(nodes) == len(weights)):
        raise FixError(f"{describe(node)}: the {prefix}_* attributes have different lengths")
    return [((t, n), int(c), float(w)) for t, n, c, w in zip(trees, nodes, ids, weights) if (t, n) in leaves]


def _base_values(a: dict) -> list[float]:
    v = a.get("base_values_as_tensor")
    return [float(x) for x in (v if v is not None else a.get("base_values") or [])]


def _input(b: Builder, n_features: int):
    """X as [N, F] in the type the comparisons run in (float32; float64 for double inputs)."""
    x = b.node.input[0]
    if b.dtype(x) == TensorProto.DOUBLE:
        return b.rows(x, n_features, exact=False), np.float64
    return b.rows(b.as_float(x), n_features, exact=False, like=x), np.float32


def _table(leaves: Leaves, columns, entries, fill, np_type) -> tuple[np.ndarray, np.ndarray]:
    """(values [rows, columns], present [rows, columns]) for leaf entries {leaf ref: [(column, weight)]}."""
    values = np.full((leaves.rows, columns), fill, np.float64)
    present = np.zeros((leaves.rows, columns), bool)
    for own in leaves.by_tree:
        for row, leaf in own:
            if present[row].any():  # a leaf shared by two trees' rows: filled once
                continue
            for col, w in entries.get(leaf, ()):
                if not 0 <= col < columns:
                    raise FixError(f"leaf {leaf} writes to column {col}, outside 0..{columns - 1}")
                values[row, col] = w if not present[row, col] else values[row, col] + w
                present[row, col] = True
    return values.astype(np_type), present


def _always(leaves: Leaves, present) -> np.ndarray:
    """[columns] bool: the column is scored whatever the row (some tree scores it on every leaf)."""
    out = np.zeros(present.shape[1], bool)
    for own in leaves.by_tree:
        out |= present[[row for row, _ in own]].all(axis=0)
    return out


def _gathered(b: Builder, table: str, index: str, reduce: str, what: str) -> str:
    rows = b.op("Gather", [table, index], what, axis=0)  # [N, T, 1, C]
    return b.reduce(reduce, rows, [1, 2], 0, what)


def _aggregate(b, leaves: Leaves, index, entries, columns, how: str, np_type):
    """(value [N, C], has [N, C] bool or None when every column is always scored)."""
    fill = {"MIN": np.inf, "MAX": -np.inf}.get(how, 0.0)
    values, present = _table(leaves, columns, entries, fill, np_type)
    reduce = {"MIN": "ReduceMin", "MAX": "ReduceMax"}.get(how, "ReduceSum")
    total = _gathered(b, b.const(values, "leaf_values"), index, reduce, "tree_values")
    if how == "AVERAGE":
        total = b.op("Div", [total, b.const(np_type(len(leaves.by_tree)), "tree_count")], "average")
    always = _always(leaves, present)
    if always.all():
        return total, None
    flags = b.const(present.astype(np.float32), "leaf_scores_class")
    has = b.cast(_gathered(b, flags, index, "ReduceMax", "scored"), TensorProto.BOOL, "has_score")
    if how in ("MIN", "MAX"):
        total = b.where(has, total, b.const(np_type(0), "zero"), "tree_values")
    return total, has


def _has_aware(b: Builder, value: str, has: str | None, np_type) -> str:
    return value if has is None else b.where(has, value, b.const(np_type(0), "zero"), "written")


# -- the operators --------------------------------------------------------------------------------------------
@decomposition("ai.onnx.ml", "TreeEnsembleRegressor")
def tree_ensemble_regressor(node, facts, fresh):
    """Sum (or average, min, max) of the reached leaves' weights per target, plus base_values, then
    post_transform; onnxruntime's single-target rules as in the module doc."""
    b, a = Builder(node, facts, fresh), attrs(node)
    forest, own, leaves = _v3_trees(node, a)
    weights = _v3_weights(node, a, "target", leaves)
    targets = int(a.get("n_targets", 1))
    how = a.get("aggregate_function", "SUM")
    _regress(b, forest, own, weights, targets, how, _base_values(a), a.get("post_transform", "NONE"), "v3")
    return b.result()


def _regress(b: Builder, forest: Forest, own, weights, targets, how, base, kind, version) -> None:
    """Aggregate per target, base values, post_transform. v3 (TreeEnsembleRegressor) writes float whatever
    the input; v5 (TreeEnsemble) writes the input's type."""
    where = describe(b.node)
    if how not in V5_AGGREGATES:
        raise FixError(f"{where}: unknown aggregate_function '{how}'")
    x, vt = _input(b, features_used(forest))
    index, reached = leaf_index(b, x, forest, vt)
    entries: dict = {}
    for leaf, col, w in weights:
        entries.setdefault(leaf, []).append((col, w))
    if targets == 1 and version == "v3":  # onnxruntime: each leaf's first weight, else the node's own value
        for leaf in {leaf for own_rows in reached.by_tree for _, leaf in own_rows}:
            if len(entries.get(leaf, ())) > 1:
                raise FixError(f"{where}: leaf {leaf} holds several weights for its single target")
            entries[leaf] = [(0, entries[leaf][0][1] if leaf in entries else own[leaf])]
    value, has = _aggregate(b, reached, index, entries, targets, how, vt)
    finish = (lambda v: _as_float(b, v, vt)) if version == "v3" else (lambda v: v)  # noqa: E731
    if targets == 1:
        origin = base[0] if len(base) == 1 else 0.0
        value = _has_aware(b, value, has, vt)
        y = finish(b.op("Add", [value, b.const(np.asarray([origin], vt), "base_values")], "prediction"))
        if kind == "PROBIT":
            _transformed(b, y, kind, vt if version == "v5" else np.float32)
        else:
            b.op("Identity", [y], "prediction", b.node.output[0])
        return
    if len(base) == targets:
        value = b.op("Add", [value, b.const(np.asarray(base, vt), "base_values")], "with_base")
    _transformed(b, finish(_has_aware(b, value, has, vt)), kind, vt if version == "v5" else np.float32)


def _transformed(b: Builder, y: str, kind: str, out_type) -> None:
    """post_transform into the node's output. onnxruntime transforms in float32 whatever the output type: a
    double output is cast to float, transformed and cast back."""
    if out_type is np.float32 or kind == "NONE":
        post_transform(b, y, kind, b.node.output[0])
        return
    done = post_transform(b, b.cast(y, FLOAT, "as_float"), kind)
    b.cast(done, TensorProto.DOUBLE, "transformed", b.node.output[0])


@decomposition("ai.onnx.ml", "TreeEnsembleClassifier")
def tree_ensemble_classifier(node, facts, fresh):
    """Per class, the sum of the reached leaves' weights (plus base_values); label and scores by
    onnxruntime's rules: the best scored class for three or more classes, the binary rules for two."""
    b, a = Builder(node, facts, fresh), attrs(node)
    where = describe(node)
    forest, _, leaves = _v3_trees(node, a)
    weights = _v3_weights(node, a, "class", leaves)
    labels = int_labels(b, a, "classlabels_int64s", "classlabels_strings", 0)
    classes = len(a.get("classlabels_int64s") or a.get("classlabels_strings") or [])
    if classes < 2:
        raise FixError(f"{where}: {classes} class label(s); a classifier needs two or more")
    base, kind = _base_values(a), a.get("post_transform", "NONE")
    x, vt = _input(b, features_used(forest))  # onnxruntime sums in double for double inputs, else in float
    index, reached = leaf_index(b, x, forest, vt)
    entries: dict = {}
    for leaf, col, w in weights:
        entries.setdefault(leaf, []).append((col, w))
    values, present = _table(reached, classes, entries, 0.0, vt)
    sums = _gathered(b, b.const(values, "leaf_values"), index, "ReduceSum", "class_sums")
    always = _always(reached, present)
    if classes > 2:
        _multiclass(b, sums, present, always, index, base, kind, labels, vt)
        return b.result()
    for c in (0, 1):
        if present[:, c].any() and not always[c]:
            raise FixError(
                f"{where}: class {c} is scored by some leaves and not by others; onnxruntime then writes one "
                "or two scores depending on the row, which has no static decomposition"
            )
    # onnxruntime decides these on all class_* entries, leaves or not
    raw = a.get("class_weights_as_tensor")
    raw = list(raw if raw is not None else a.get("class_weights") or [])
    binary_case = len(set(a.get("class_ids") or [])) == 1
    all_positive = all(w >= 0 for w in raw)
    _binary(b, sums, bool(always[0]), bool(always[1]), binary_case, all_positive, base, kind, labels, vt)
    return b.result()


def _binary(b: Builder, sums, has0, has1, binary_case, all_positive, base, kind, labels, vt) -> None:
    """onnxruntime's TreeAggregatorClassifier for two classes, for a static scoring of each class. A class
    never scored has a raw sum of exactly 0, which is also what onnxruntime writes for it."""
    column = lambda c: b.op("Gather", [sums, b.const(np.array([c], np.int64), "column")], f"class{c}", axis=1)  # noqa: E731
    s0, s1 = column(0), column(1)
    size = 2 if has1 else 1
    add_second = -1  # onnxruntime's write_additional_scores
    if len(base) == 2:
        size = 2
        if has1:  # s1 = base[1] + s0, s0 = -s1 (base[0] unused)
            s1 = b.op("Add", [s0, b.const(vt(base[1]), "base1")], "class1")
            s0 = b.op("Neg", [s1], "class0") if has0 else s0
        elif has0:
            s0 = b.op("Add", [s0, b.const(vt(base[0]), "base0")], "class0")
    elif len(base) == 1:
        if has0:
            s0 = b.op("Add", [s0, b.const(vt(base[0]), "base0")], "class0")
    elif not base:
        add_second = 3
    else:
        size = 2
    positive = s1 if (size == 2 and has1) else s0
    if binary_case:
        add_second = 0 if all_positive else 2  # 0/1 and 2/3 write the same scores
    if labels is not None and b.used(0):
        bar = 0.5 if (binary_case and all_positive) else 0.0
        passes = b.reshape(b.op("Greater", [positive, b.const(vt(bar), "bar")], "positive"), [-1])
        if binary_case:
            pick(b, passes, labels[1], labels[0], b.node.output[0])
        else:  # both classes scored: onnxruntime writes 1 or 0, not the class labels
            pick(b, passes, 1, 0, b.node.output[0])
    if not b.used(1):
        return
    if size == 2:
        pair = _as_float(b, b.concat([s0, s1], 1, "scores"), vt)
        post_transform(b, pair, kind, b.node.output[1])
    elif add_second == -1:
        raise FixError(
            f"{describe(b.node)}: onnxruntime writes only the first of the two scores here (class 0 scored, "
            f"{len(base)} base value(s), both classes in class_ids); the second is undefined"
        )
    else:
        binary_pair(b, _as_float(b, s0, vt), kind, complement=add_second in (0, 1), out=b.node.output[1])


def _as_float(b: Builder, x: str, vt) -> str:
    return x if vt is np.float32 else b.cast(x, FLOAT, "as_float")


def _multiclass(b: Builder, sums, present, always, index, base, kind, labels, vt) -> None:
    """Three or more classes: base values added (a class with a base value counts as scored), the label is
    the best scored class, an unscored class is written as 0."""
    classes = present.shape[1]
    static = always.copy()
    static[: len(base)] = True
    if base:
        padded = np.zeros(classes, vt)
        padded[: min(len(base), classes)] = base[:classes]
        sums = b.op("Add", [sums, b.const(padded, "base_values")], "with_base")
    has = None
    if not static.all():
        flags = b.const(present.astype(np.float32), "leaf_scores_class")
        scored = b.cast(_gathered(b, flags, index, "ReduceMax", "scored"), TensorProto.BOOL, "scored")
        has = b.op("Or", [scored, b.const(static, "always_scored")], "has_score")
    if labels is not None and b.used(0):
        ranked = sums if has is None else b.where(has, sums, b.const(vt(-np.inf), "minus_inf"), "ranked")
        best = b.op("ArgMax", [ranked], "best_class", axis=1, keepdims=0)
        label_lookup(b, best, labels, b.node.output[0])
    if b.used(1):
        written = _as_float(b, _has_aware(b, sums, has, vt), vt)
        post_transform(b, written, kind, b.node.output[1])


@decomposition("ai.onnx.ml", "TreeEnsemble")
def tree_ensemble(node, facts, fresh):
    """The opset-5 TreeEnsemble: trees from tree_roots, leaves by index (one target and weight each),
    BRANCH_MEMBER unfolded into a chain of BRANCH_EQ; aggregate and post_transform as the regressor."""
    b, a = Builder(node, facts, fresh), attrs(node)
    where = describe(node)
    if b.dtype(node.input[0]) not in (FLOAT, TensorProto.DOUBLE, 0):
        raise FixError(f"{where}: only float and double inputs decompose (float16 is refused)")
    features = a.get("nodes_featureids") or []
    splits = np.asarray(a.get("nodes_splits"), np.float64).reshape(-1)
    modes = np.asarray(a.get("nodes_modes"), np.int64).reshape(-1)
    trues, falses = a.get("nodes_truenodeids") or [], a.get("nodes_falsenodeids") or []
    true_leaf, false_leaf = a.get("nodes_trueleafs") or [], a.get("nodes_falseleafs") or []
    missing = list(a.get("nodes_missing_value_tracks_true") or []) + [0] * len(features)
    members = np.asarray(a.get("membership_values", np.zeros(0)), np.float64).reshape(-1)
    sets, pos = {}, 0
    for k, m in enumerate(modes):
        if m == 6:
            end = pos
            while end < len(members) and not np.isnan(members[end]):
                end += 1
            sets[k], pos = [float(v) for v in members[pos:end]], end + 1
    for m in set(modes.tolist()) - set(range(len(V5_MODES))):
        raise FixError(f"{where}: unknown node mode {m}")

    def children(ref):
        kind, k = ref[0], ref[1]
        if kind == "leaf":
            return None
        if kind == "member":  # ("member", node, j): x == the j-th member, else the next member or false
            j = ref[2]
            true = ("leaf", trues[k]) if true_leaf[k] else ("node", trues[k])
            nxt = ("member", k, j + 1) if j + 1 < len(sets[k]) else None
            false = nxt or (("leaf", falses[k]) if false_leaf[k] else ("node", falses[k]))
            return true, false
        if modes[k] == 6:
            return children(("member", k, 0))
        true = ("leaf", trues[k]) if true_leaf[k] else ("node", trues[k])
        false = ("leaf", falses[k]) if false_leaf[k] else ("node", falses[k])
        return true, false

    def split_of(ref):
        k = ref[1]
        if ref[0] == "member" or modes[k] == 6:
            j = ref[2] if ref[0] == "member" else 0
            return Split(int(features[k]), "EQ", sets[k][j], bool(missing[k]) and j == 0)
        return Split(
            int(features[k]), V5_MODES[modes[k]][len("BRANCH_") :], float(splits[k]), bool(missing[k])
        )

    for k, vals in sets.items():
        if not vals or any(v != int(v) for v in vals):
            raise FixError(f"{where}: BRANCH_MEMBER node {k} needs a set of integers (onnxruntime's rule)")
    roots = [
        ("leaf", trues[r])
        if true_leaf[r] and false_leaf[r] and trues[r] == falses[r]
        else ("node", r)  # a leaf tree
        for r in a.get("tree_roots") or []
    ]
    leaf_weights = np.asarray(a.get("leaf_weights"), np.float64).reshape(-1)
    weights = [
        (("leaf", k), int(t), float(w)) for k, (t, w) in enumerate(zip(a.get("leaf_targetids"), leaf_weights))
    ]
    how = V5_AGGREGATES[int(a.get("aggregate_function", 1))]
    kind = V5_TRANSFORMS[int(a.get("post_transform", 0))]
    _regress(
        b, Forest(roots, children, split_of), {}, weights, int(a.get("n_targets", 1)), how, [], kind, "v5"
    )
    return b.result()
