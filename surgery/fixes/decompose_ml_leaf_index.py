"""Which leaf each row reaches in each tree of an ensemble, in standard ops: the GEMM formulation, and tree
traversal for ensembles whose path matrices would be too large. Used by decompose_ml_trees; registers nothing.

GEMM formulation, for one tree with internal nodes i and root-to-leaf paths l:

- decisions D[n, i] in {0, 1}: whether row n takes node i's true branch (x[feature_i] compared with the
  threshold, NaN following the node's missing-value track);
- path matrix P[i, l] = +1 if path l takes node i's true branch, -1 if it takes the false branch, 0 if it does
  not pass node i; c[l] = the number of true branches on path l;
- S = D P: S[n, l] = (true branches taken as the path takes them) - (false branches the row does not take);
  S[n, l] <= c[l], with equality exactly when the row follows path l, so the leaf is where S > c - 1/2.

All trees run as one batched product ([N, T, 1, I] x [T, I, L], trees padded to the largest); decisions and
paths are small integers that every float format (TF32 included) holds exactly. The reached path per tree is
the ArgMax over one 1 and zeros. Shared subtrees (LightGBM writes set membership as chains of BRANCH_EQ nodes
with one true child) are unfolded into separate paths.

Tree traversal, when T x I x L passes MAX_PATH_ENTRIES (deep trees: a default scikit-learn random forest has
thousands of leaves per tree): every node of every tree in one table, and as many rounds as the deepest tree
has levels, each moving every row one level down in every tree (Gather of the node's feature, threshold and
children, GatherElements of the row's value, Where). Leaves point to themselves. Needs ai.onnx opset 11.

Comparisons, in both: only Less and Greater (opset 7): x <= t is x < nextafter(t, +inf), x >= t is
x > nextafter(t, -inf) (exact for float32 inputs against float32 thresholds), and a true missing-value track
turns "x < t" into "not (x >= t)", which NaN satisfies. Each decision is a + b L + c G + d L G for per-node
constants over the two comparison results L = x < cL and G = x > cG.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from surgery.fixes import FixError
from surgery.fixes.decompose_ml_builder import FLOAT, INT64, Builder, describe

MAX_PATH_ENTRIES = 4_000_000  # T x I x L of the GEMM path matrix (16 MB of float32); beyond it: traversal
MAX_PATHS_PER_TREE = 65_536  # root-to-leaf paths of one tree unfolded for the GEMM formulation
MAX_DEPTH = 4096


@dataclass
class Split:
    feature: int
    mode: str  # LEQ, LT, GTE, GT, EQ, NEQ
    threshold: float
    missing_true: bool


@dataclass
class Forest:
    """The trees as a graph: roots[t] is tree t's root; children(ref) -> (true ref, false ref), or None for a
    leaf; split_of(ref) -> Split for an internal node. Refs are any hashable node names."""

    roots: list
    children: Callable
    split_of: Callable


@dataclass
class Leaves:
    """Where the index points: rows of the value tables, and for each tree the rows its leaves own."""

    rows: int
    by_tree: list[list[tuple[int, object]]] = field(default_factory=list)  # per tree: (row, leaf ref)


def comparison(split: Split, np_type, where: str) -> tuple[float, float, tuple[int, int, int, int]]:
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
    return table[(m, mt)]


def features_used(forest: Forest) -> int:
    """1 + the largest feature index any split reads."""
    top, seen, stack = 0, set(), list(forest.roots)
    while stack:
        ref = stack.pop()
        if ref in seen:
            continue
        seen.add(ref)
        kids = forest.children(ref)
        if kids is not None:
            top = max(top, forest.split_of(ref).feature)
            stack.extend(kids)
    return top + 1


def leaf_index(b: Builder, x: str, forest: Forest, np_type) -> tuple[str, Leaves]:
    """[N, T, 1] int64 rows of the value tables (one per row and tree) and where the leaves sit in them."""
    where = describe(b.node)
    counts = [_count(forest, root, where) for root in forest.roots]
    width = max(1, *(c[0] for c in counts))
    paths = max(c[1] for c in counts)
    if len(forest.roots) * width * paths <= MAX_PATH_ENTRIES and paths <= MAX_PATHS_PER_TREE:
        trees = [_unfold(forest, root, where) for root in forest.roots]
        return _gemm(b, x, trees, np_type)
    b.need(11, "GatherElements, for the traversal of trees too large for the GEMM formulation")
    return _traversal(b, x, forest, np_type)


def _count(forest: Forest, root, where: str) -> tuple[int, int]:
    """(internal nodes, root-to-leaf paths) of one tree, a shared subtree counted once / on every path."""
    paths: dict = {}
    internal = set()
    stack = [(root, False)]
    while stack:
        ref, expanded = stack.pop()
        if ref in paths:
            continue
        kids = forest.children(ref)
        if kids is None:
            paths[ref] = 1
        elif expanded:
            paths[ref] = sum(paths[k] for k in kids)
            internal.add(ref)
        else:
            if len(stack) > 4 * MAX_DEPTH * 2:
                raise FixError(f"{where}: a tree is over {MAX_DEPTH} levels deep (a cycle?)")
            stack.append((ref, True))
            stack.extend((k, False) for k in kids if k not in paths)
    return len(internal), paths[root]


@dataclass
class _Tree:
    splits: list[Split] = field(default_factory=list)
    paths: list[tuple[list[tuple[int, bool]], object]] = field(default_factory=list)  # (edges, leaf ref)


def _unfold(forest: Forest, root, where: str) -> _Tree:
    """Paths from `root` to the leaves; a node reached twice (a shared subtree) keeps one decision column."""
    tree, column = _Tree(), {}
    stack = [(root, [], 0)]
    while stack:
        ref, edges, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise FixError(f"{where}: a path is over {MAX_DEPTH} nodes deep (a cycle?)")
        kids = forest.children(ref)
        if kids is None:
            tree.paths.append((edges, ref))
            continue
        if ref not in column:
            column[ref] = len(tree.splits)
            tree.splits.append(forest.split_of(ref))
        k = column[ref]
        stack.append((kids[1], [*edges, (k, False)], depth + 1))
        stack.append((kids[0], [*edges, (k, True)], depth + 1))
    tree.paths.reverse()
    return tree


def _gemm(b: Builder, x: str, trees: list[_Tree], np_type) -> tuple[str, Leaves]:
    where = describe(b.node)
    n_trees = len(trees)
    width = max(1, *(len(t.splits) for t in trees))
    depth = max(len(t.paths) for t in trees)
    feature = np.zeros((n_trees, width), np.int64)
    c_less, c_more = np.zeros((n_trees, width), np_type), np.zeros((n_trees, width), np_type)
    coef = np.zeros((4, n_trees, width), np.float32)
    paths = np.zeros((n_trees, width, depth), np.float32)
    needed = np.full((n_trees, 1, depth), 0.5, np.float32)  # padding paths: S = 0 is never > 0.5
    for t, tree in enumerate(trees):
        for k, split in enumerate(tree.splits):
            feature[t, k] = split.feature
            c_less[t, k], c_more[t, k], coef[:, t, k] = comparison(split, np_type, where)
        for p, (edges, _) in enumerate(tree.paths):
            for k, went_true in edges:
                paths[t, k, p] = 1.0 if went_true else -1.0
            needed[t, 0, p] = sum(1 for _, went_true in edges if went_true) - 0.5
    picked = b.op("Gather", [x, b.const(feature.reshape(-1), "features")], "node_inputs", axis=1)
    decisions = _decisions(b, picked, c_less.reshape(-1), c_more.reshape(-1), coef.reshape(4, -1))
    grid = b.reshape(decisions, [-1, n_trees, 1, width], "decisions_by_tree")
    score = b.op("MatMul", [grid, b.const(paths, "paths")], "path_scores")
    reached = b.cast(b.op("Greater", [score, b.const(needed, "path_lengths")], "reached"), FLOAT, "reached")
    local = b.op("ArgMax", [reached], "leaf", axis=3, keepdims=0)
    offsets = b.const((np.arange(n_trees, dtype=np.int64) * depth).reshape(n_trees, 1), "tree_offsets")
    leaves = Leaves(
        n_trees * depth,
        [[(t * depth + p, leaf) for p, (_, leaf) in enumerate(tree.paths)] for t, tree in enumerate(trees)],
    )
    return b.op("Add", [local, offsets], "leaf_index"), leaves


def _decisions(b: Builder, picked: str, c_less, c_more, coef) -> str:
    """a + b L + c G + d L G over the columns of `picked` (float32 0/1)."""
    used = {name: bool(coef[k].any()) for k, name in enumerate("abcd")}
    less = more = None
    if used["b"] or used["d"]:
        less = b.cast(b.op("Less", [picked, b.const(c_less, "less_than")], "below"), FLOAT, "below")
    if used["c"] or used["d"]:
        more = b.cast(b.op("Greater", [picked, b.const(c_more, "more_than")], "above"), FLOAT, "above")
    terms = []
    for name, k, factor in (("b", 1, less), ("c", 2, more)):
        if used[name]:
            plain = bool((coef[k] == 1).all())  # the comparison itself, no per-node factor
            terms.append(factor if plain else b.op("Mul", [factor, b.const(coef[k], name)]))
    if used["d"]:
        terms.append(b.op("Mul", [b.op("Mul", [less, more], "both"), b.const(coef[3], "d")]))
    if used["a"]:
        terms.append(b.const(coef[0], "a"))
    if not terms:  # every tree is a single leaf
        return b.op("Mul", [b.cast(picked, FLOAT), b.const(np.float32(0), "zero")], "decisions")
    decisions = terms[0]
    for term in terms[1:]:
        decisions = b.op("Add", [decisions, term], "decisions")
    return decisions


def _traversal(b: Builder, x: str, forest: Forest, np_type) -> tuple[str, Leaves]:
    where = describe(b.node)
    number: dict = {}
    order: list = []
    by_tree = []
    for root in forest.roots:  # number every node reachable from the roots (a shared node once)
        own, stack, seen = [], [root], set()
        while stack:
            ref = stack.pop()
            if ref in seen:
                continue
            seen.add(ref)
            if ref not in number:
                number[ref] = len(order)
                order.append(ref)
            kids = forest.children(ref)
            if kids is None:
                own.append((number[ref], ref))
            else:
                stack.extend(kids)
        by_tree.append(own)
    levels = max(_depth(forest, root, where) for root in forest.roots)
    count = len(order)
    feature = np.zeros(count, np.int64)
    c_less, c_more = np.zeros(count, np_type), np.zeros(count, np_type)
    truth = np.zeros((count, 4), bool)  # by code 2 [x < cL] + [x > cG]
    true_next = np.arange(count, dtype=np.int64)  # leaves stay where they are
    false_next = np.arange(count, dtype=np.int64)
    for i, ref in enumerate(order):
        kids = forest.children(ref)
        if kids is None:
            continue
        split = forest.split_of(ref)
        feature[i] = split.feature
        c_less[i], c_more[i], (a, bb, c, d) = comparison(split, np_type, where)
        for less in (0, 1):
            for more in (0, 1):
                truth[i, 2 * less + more] = a + bb * less + c * more + d * less * more > 0.5
        true_next[i], false_next[i] = number[kids[0]], number[kids[1]]
    tables = {
        name: b.const(v, name)
        for name, v in (
            ("node_feature", feature),
            ("node_less_than", c_less),
            ("node_more_than", c_more),
            ("node_truth", truth.reshape(-1)),
            ("node_true_next", true_next),
            ("node_false_next", false_next),
        )
    }
    roots = np.array([number[r] for r in forest.roots], np.int64)
    index = None
    for level in range(levels):
        if index is None:  # first level: the roots are constants, so a plain Gather of their features
            value = b.op("Gather", [x, b.const(feature[roots], "root_features")], "value", axis=1)
            at = b.const(roots, "roots")
        else:
            column = b.op("Gather", [tables["node_feature"], index], "feature", axis=0)
            value = b.op("GatherElements", [x, column], "value", axis=1)
            at = index
        less = b.op(
            "Less", [value, b.op("Gather", [tables["node_less_than"], at], "less_than", axis=0)], "below"
        )
        more = b.op(
            "Greater", [value, b.op("Gather", [tables["node_more_than"], at], "more_than", axis=0)], "above"
        )
        code = b.op(
            "Add",
            [
                b.op("Mul", [at, b.const(np.int64(4), "four")]),
                b.op(
                    "Add",
                    [b.op("Mul", [b.cast(less, INT64), b.const(np.int64(2), "two")]), b.cast(more, INT64)],
                ),
            ],
            "code",
        )
        go = b.op("Gather", [tables["node_truth"], code], "goes_true", axis=0)
        index = b.where(
            go,
            b.op("Gather", [tables["node_true_next"], at], "true_next", axis=0),
            b.op("Gather", [tables["node_false_next"], at], "false_next", axis=0),
            f"level{level + 1}",
        )
    if index is None:  # every tree is a leaf
        zero_rows = b.op(
            "Mul",
            [
                b.cast(b.op("Gather", [x, b.const(np.zeros(len(roots), np.int64), "first")], axis=1), INT64),
                b.const(np.int64(0), "zero"),
            ],
        )
        index = b.op("Add", [zero_rows, b.const(roots, "roots")], "leaf_rows")
    return b.reshape(index, [-1, len(forest.roots), 1], "leaf_index"), Leaves(count, by_tree)


def _depth(forest: Forest, root, where: str) -> int:
    """Internal nodes on the longest root-to-leaf path."""
    depth: dict = {}
    stack = [(root, False)]
    while stack:
        ref, expanded = stack.pop()
        if ref in depth:
            continue
        kids = forest.children(ref)
        if kids is None:
            depth[ref] = 0
        elif expanded:
            depth[ref] = 1 + max(depth[k] for k in kids)
        else:
            if len(stack) > 8 * MAX_DEPTH:
                raise FixError(f"{where}: a tree is over {MAX_DEPTH} levels deep (a cycle?)")
            stack.append((ref, True))
            stack.extend((k, False) for k in kids if k not in depth)
    return depth[root]
