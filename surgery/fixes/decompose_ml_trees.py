"""Tree ensembles (ai.onnx.ml TreeEnsembleClassifier, TreeEnsembleRegressor, and the opset-5 TreeEnsemble)
decomposed into standard ops with the GEMM formulation: every decision of every tree at once, then a matrix
product that finds the leaf each row reaches, then the leaves' values.

The math, for one tree with internal nodes i and root-to-leaf paths l:

- decisions D[n, i] in {0, 1}: whether row n takes node i's true branch (x[feature_i] compared with the
  threshold, NaN following the node's missing-value track);
- path matrix P[i, l] = +1 if path l takes node i's true branch, -1 if it takes the false branch, 0 if it does
  not pass node i; c[l] = the number of true branches on path l;
- S = D P: S[n, l] = (true branches taken as the path takes them) - (false branches the row does not take);
  S[n, l] <= c[l], with equality exactly when the row follows path l, so the leaf is where S > c - 1/2.

All trees run as one batched product ([N, T, 1, I] x [T, I, L], trees padded to the largest), decisions and
paths being small integers that every float format (TF32 included) holds exactly. The reached leaf's index per
tree (ArgMax over one 1 and zeros) gathers its values from a [T * L, classes] table, and the trees' values are
summed (or averaged, or their min/max taken): leaf values never go through a matrix product, so a TF32 GEMM on
a GPU cannot round them.

Comparisons use only Less and Greater (opset 7): x <= t is x < nextafter(t, +inf), x >= t is
x > nextafter(t, -inf) (exact for float32 inputs against float32 thresholds), and a true missing-value track
turns "x < t" into "not (x >= t)", which NaN satisfies. Each decision is a + b L + c G + d L G for per-node
constants over the two comparison results L = x < cL and G = x > cG.

What onnxruntime does (and the decomposition reproduces): a class or target that no reached leaf scores is
written as 0 (its base value is dropped too) and never wins the label; with two classes the binary rules of
onnxruntime's TreeAggregatorClassifier apply (scores [1 - s, s] or [-s, s] from one score, labels from
s > 0.5 or s > 0; a two-class ensemble whose leaves score both classes labels 1 or 0, not its class labels);
a single-target regressor takes each leaf's first weight (the node's value when it has none) and applies only
PROBIT. Shared subtrees (LightGBM writes set membership as chains of BRANCH_EQ nodes with one true child) are
unfolded into separate paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
MAX_PATH_ENTRIES = 16_000_000  # T x I x L of the path matrix (64 MB of float32)
MAX_PATHS_PER_TREE = 65_536  # root-to-leaf paths of one tree after unfolding shared subtrees


@dataclass
class Split:
    feature: int
    mode: str
    threshold: float
    missing_true: bool


@dataclass
class Tree:
    splits: list[Split] = field(default_factory=list)
    paths: list[tuple[list[tuple[int, bool]], object]] = field(default_factory=list)  # (edges, leaf key)


def _unfold(root, children, split_of, limit_paths: int, where: str) -> Tree:
    """Paths from `root` to the leaves. children(ref) -> (true_ref, false_ref), or None for a leaf;
    split_of(ref) -> Split. A node reached twice (a shared subtree) keeps one decision column."""
    tree, column = Tree(), {}
    stack = [(root, [], 0)]
    while stack:
        ref, edges, depth = stack.pop()
        if depth > 4096:
            raise FixError(f"{where}: a path is over 4096 nodes deep (a cycle?)")
        kids = children(ref)
        if kids is None:
            tree.paths.append((edges, ref))
            if len(tree.paths) > limit_paths:
                raise FixError(f"{where}: a tree unfolds into more than {limit_paths} paths")
            continue
        if ref not in column:
            column[ref] = len(tree.splits)
            tree.splits.append(split_of(ref))
        k = column[ref]
        stack.append((kids[1], [*edges, (k, False)], depth + 1))
        stack.append((kids[0], [*edges, (k, True)], depth + 1))
    tree.paths.reverse()
    return tree


# -- reading the attributes --------------------------------------------------------------------------------------
def _v3_trees(node, a: dict) -> tuple[list[Tree], dict, dict]:
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
    trees = [_unfold((t, first[t]), children, split_of, MAX_PATHS_PER_TREE, where) for t in roots]
    own = {key: float(values[k]) for key, k in index.items()}
    leaves = {key for key, k in index.items() if modes[k] == "LEAF"}
    return trees, own, leaves


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


# -- the GEMM formulation -----------------------------------------------------------------------------------------
def _comparison(split: Split, np_type, where: str) -> tuple[float, float, tuple[int, int, int, int]]:
    """(cL, cG, (a, b, c, d)) with decision = a + b [x < cL] + c [x > cG] + d [x < cL][x > cG]."""
    t = np_type(split.threshold)
    up, down = np.nextafter(t, np_type(np.inf)), np.nextafter(t, np_type(-np.inf))
    m, mt = split.mode, split.missing_true
    if not np.isfinite(t) and (
        (m in ("LEQ", "EQ", "NEQ") and up == t and not mt)
        or (m in ("GTE", "EQ", "NEQ") and down == t and not mt)
        or (m == "LT" and mt and down == t)
        or (m == "GT" and mt and up == t)
    ):
        raise FixError(f"{where}: threshold {split.threshold} in mode BRANCH_{m} has no exact comparison")
    table = {
        ("LEQ", False): (up, 0, (0, 1, 0, 0)),  # x < up(t)
        ("LEQ", True): (0, t, (1, 0, -1, 0)),  # not x > t
        ("LT", False): (t, 0, (0, 1, 0, 0)),
        ("LT", True): (0, down, (1, 0, -1, 0)),  # not x >= t
        ("GTE", False): (0, down, (0, 0, 1, 0)),  # x > down(t)
        ("GTE", True): (t, 0, (1, -1, 0, 0)),  # not x < t
        ("GT", False): (0, t, (0, 0, 1, 0)),
        ("GT", True): (up, 0, (1, -1, 0, 0)),  # not x <= t
        ("EQ", False): (up, down, (0, 0, 0, 1)),  # x <= t and x >= t
        ("EQ", True): (t, t, (1, -1, -1, 1)),  # neither x < t nor x > t (NaN: neither)
        ("NEQ", False): (up, down, (1, 0, 0, -1)),  # not (x <= t and x >= t): NaN != t is true
        ("NEQ", True): (up, down, (1, 0, 0, -1)),
    }
    cl, cg, coef = table[(m, mt)]
    return cl, cg, coef


def _leaf_index(b: Builder, x: str, trees: list[Tree], np_type) -> tuple[str, int]:
    """[N, T, 1] int64: the flat index (tree * L + path) of the path each row follows in each tree."""
    where = describe(b.node)
    n_trees = len(trees)
    width = max(1, *(len(t.splits) for t in trees))
    depth = max(len(t.paths) for t in trees)
    if n_trees * width * depth > MAX_PATH_ENTRIES:
        raise FixError(
            f"{where}: the path matrix would hold {n_trees} x {width} x {depth} entries (over "
            f"{MAX_PATH_ENTRIES}); the GEMM formulation does not fit trees this deep. Note: split the ensemble"
        )
    feature = np.zeros((n_trees, width), np.int64)
    c_less, c_more = np.zeros((n_trees, width), np_type), np.zeros((n_trees, width), np_type)
    coef = np.zeros((4, n_trees, width), np.float32)
    paths = np.zeros((n_trees, width, depth), np.float32)
    needed = np.full((n_trees, 1, depth), 0.5, np.float32)  # padding paths: S = 0 is never > 0.5
    for t, tree in enumerate(trees):
        for k, split in enumerate(tree.splits):
            feature[t, k] = split.feature
            c_less[t, k], c_more[t, k], coef[:, t, k] = _comparison(split, np_type, where)
        for p, (edges, _) in enumerate(tree.paths):
            for k, went_true in edges:
                paths[t, k, p] = 1.0 if went_true else -1.0
            needed[t, 0, p] = sum(1 for _, went_true in edges if went_true) - 0.5
    picked = b.op("Gather", [x, b.const(feature.reshape(-1), "features")], "node_inputs", axis=1)
    terms = []
    used = {name: bool(coef[k].any()) for k, name in enumerate("abcd")}
    less = more = None
    if used["b"] or used["d"]:
        less = b.cast(
            b.op("Less", [picked, b.const(c_less.reshape(-1), "less_than")], "below"), FLOAT, "below"
        )
    if used["c"] or used["d"]:
        more = b.cast(
            b.op("Greater", [picked, b.const(c_more.reshape(-1), "more_than")], "above"), FLOAT, "above"
        )
    for name, k, factor in (("b", 1, less), ("c", 2, more)):
        if used[name]:
            ones = (coef[k] == 1) | (coef[k] == 0)
            terms.append(
                factor
                if ones.all() and coef[k].all()
                else b.op("Mul", [factor, b.const(coef[k].reshape(-1), name)])
            )
    if used["d"]:
        both = b.op("Mul", [less, more], "both")
        terms.append(b.op("Mul", [both, b.const(coef[3].reshape(-1), "d")]))
    if used["a"]:
        terms.append(b.const(coef[0].reshape(-1), "a"))
    decisions = terms[0]
    for term in terms[1:]:
        decisions = b.op("Add", [decisions, term], "decisions")
    if not terms:  # every tree is a single leaf
        decisions = b.op("Mul", [b.cast(picked, FLOAT), b.const(np.float32(0), "zero")], "decisions")
    grid = b.reshape(decisions, [-1, n_trees, 1, width], "decisions_by_tree")
    score = b.op("MatMul", [grid, b.const(paths, "paths")], "path_scores")
    reached = b.cast(b.op("Greater", [score, b.const(needed, "path_lengths")], "reached"), FLOAT, "reached")
    local = b.op("ArgMax", [reached], "leaf", axis=3, keepdims=0)
    offsets = b.const((np.arange(n_trees, dtype=np.int64) * depth).reshape(n_trees, 1), "tree_offsets")
    return b.op("Add", [local, offsets], "leaf_index"), depth


def _input(b: Builder, n_features: int):
    """X as [N, F] in the type the comparisons run in (float32; float64 for double inputs)."""
    x = b.node.input[0]
    if b.dtype(x) == TensorProto.DOUBLE:
        return b.rows(x, n_features, exact=False), np.float64
    return b.rows(b.as_float(x), n_features, exact=False, like=x), np.float32


def _table(trees, depth, columns, entries, fill, np_type) -> tuple[np.ndarray, np.ndarray]:
    """(values [T * depth, columns], present [T * depth, columns]) for leaf entries {leaf key: [(col, w)]}."""
    values = np.full((len(trees) * depth, columns), fill, np.float64)
    present = np.zeros((len(trees) * depth, columns), bool)
    for t, tree in enumerate(trees):
        for p, (_, leaf) in enumerate(tree.paths):
            for col, w in entries.get(leaf, ()):
                row = t * depth + p
                if not 0 <= col < columns:
                    raise FixError(f"leaf {leaf} writes to column {col}, outside 0..{columns - 1}")
                values[row, col] = w if not present[row, col] else values[row, col] + w
                present[row, col] = True
    return values.astype(np_type), present


def _always(trees, depth, present) -> np.ndarray:
    """[columns] bool: the column is scored whatever the row (some tree scores it on every path)."""
    per_tree = present.reshape(len(trees), depth, -1)
    out = np.zeros(present.shape[1], bool)
    for t, tree in enumerate(trees):
        out |= per_tree[t, : len(tree.paths)].all(axis=0)
    return out


def _gathered(b: Builder, table: str, index: str, reduce: str, what: str) -> str:
    rows = b.op("Gather", [table, index], what, axis=0)  # [N, T, 1, C]
    return b.reduce(reduce, rows, [1, 2], 0, what)


def _aggregate(b, trees, depth, index, entries, columns, how: str, np_type):
    """(value [N, C], has [N, C] bool or None when every column is always scored)."""
    fill = {"MIN": np.inf, "MAX": -np.inf}.get(how, 0.0)
    values, present = _table(trees, depth, columns, entries, fill, np_type)
    reduce = {"MIN": "ReduceMin", "MAX": "ReduceMax"}.get(how, "ReduceSum")
    total = _gathered(b, b.const(values, "leaf_values"), index, reduce, "tree_values")
    if how == "AVERAGE":
        total = b.op("Div", [total, b.const(np_type(len(trees)), "tree_count")], "average")
    always = _always(trees, depth, present)
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
    trees, own, leaves = _v3_trees(node, a)
    weights = _v3_weights(node, a, "target", leaves)
    targets = int(a.get("n_targets", 1))
    how = a.get("aggregate_function", "SUM")
    _regress(b, trees, own, weights, targets, how, _base_values(a), a.get("post_transform", "NONE"), "v3")
    return b.result()


def _regress(b: Builder, trees, own, weights, targets, how, base, kind, version) -> None:
    """Aggregate per target, base values, post_transform. v3 (TreeEnsembleRegressor) writes float whatever
    the input; v5 (TreeEnsemble) writes the input's type."""
    where = describe(b.node)
    if how not in V5_AGGREGATES:
        raise FixError(f"{where}: unknown aggregate_function '{how}'")
    n_features = 1 + max((s.feature for t in trees for s in t.splits), default=0)
    x, vt = _input(b, n_features)
    index, depth = _leaf_index(b, x, trees, vt)
    entries: dict = {}
    for leaf, col, w in weights:
        entries.setdefault(leaf, []).append((col, w))
    if targets == 1 and version == "v3":  # onnxruntime: each leaf's first weight, else the node's own value
        for leaf in {p[1] for t in trees for p in t.paths}:
            if len(entries.get(leaf, ())) > 1:
                raise FixError(f"{where}: leaf {leaf} holds several weights for its single target")
            entries[leaf] = [(0, entries[leaf][0][1] if leaf in entries else own[leaf])]
    value, has = _aggregate(b, trees, depth, index, entries, targets, how, vt)
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
    trees, _, leaves = _v3_trees(node, a)
    weights = _v3_weights(node, a, "class", leaves)
    labels = int_labels(b, a, "classlabels_int64s", "classlabels_strings", 0)
    classes = len(a.get("classlabels_int64s") or a.get("classlabels_strings") or [])
    if classes < 2:
        raise FixError(f"{where}: {classes} class label(s); a classifier needs two or more")
    base, kind = _base_values(a), a.get("post_transform", "NONE")
    n_features = 1 + max((s.feature for t in trees for s in t.splits), default=0)
    x, vt = _input(b, n_features)  # onnxruntime sums in double for double inputs, else in float
    index, depth = _leaf_index(b, x, trees, vt)
    entries: dict = {}
    for leaf, col, w in weights:
        entries.setdefault(leaf, []).append((col, w))
    values, present = _table(trees, depth, classes, entries, 0.0, vt)
    sums = _gathered(b, b.const(values, "leaf_values"), index, "ReduceSum", "class_sums")
    always = _always(trees, depth, present)
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
    trees = []
    for root in a.get("tree_roots") or []:
        if true_leaf[root] and false_leaf[root] and trues[root] == falses[root]:
            trees.append(Tree([], [([], ("leaf", trues[root]))]))  # a tree that is one leaf
        else:
            trees.append(_unfold(("node", root), children, split_of, MAX_PATHS_PER_TREE, where))
    leaf_weights = np.asarray(a.get("leaf_weights"), np.float64).reshape(-1)
    weights = [
        (("leaf", k), int(t), float(w)) for k, (t, w) in enumerate(zip(a.get("leaf_targetids"), leaf_weights))
    ]
    how = V5_AGGREGATES[int(a.get("aggregate_function", 1))]
    kind = V5_TRANSFORMS[int(a.get("post_transform", 0))]
    _regress(b, trees, {}, weights, int(a.get("n_targets", 1)), how, [], kind, "v5")
    return b.result()
