"""SVMRegressor and SVMClassifier (ai.onnx.ml) decomposed into standard ops, with the support vectors as
constants: the kernel (LINEAR, POLY, RBF, SIGMOID) against every support vector, then the coefficients.

As onnxruntime computes them: the kernels through Gemm with alpha = gamma and C = coef0 (POLY, SIGMOID) or
plain (LINEAR), RBF as exp(-gamma * sum((x - sv)^2)) from the differences (so the [N, vectors, features]
differences are materialised). Classifiers: one-vs-one decision values per class pair, a vote per pair
(value > 0 votes for the first class), label = the class with most votes (first on ties). With prob_a/prob_b
and two classes, Platt's sigmoid and onnxruntime's pairwise coupling iteration (at most two rounds for two
classes, unrolled here with its stopping test); with more classes the coupling iterates up to 100 times per
row, which is refused."""

from __future__ import annotations

import numpy as np

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
    post_transform,
)

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def _kernel(b: Builder, x: str, vectors: np.ndarray, a: dict) -> str:
    """[N, V] kernel values of x [N, F] against the support vectors [V, F]."""
    kind = a.get("kernel_type", "LINEAR")
    if kind not in KERNELS:
        raise FixError(
            f"{describe(b.node)}: unknown kernel_type '{kind}'. Note: {', '.join(KERNELS)} decompose"
        )
    params = list(a.get("kernel_params") or [0.0, 0.0, 0.0])
    gamma, coef0, degree = (np.float32(v) for v in (params + [0.0, 0.0, 0.0])[:3])
    sv = b.const(vectors.astype(np.float32), "support_vectors")
    if kind == "RBF":
        diff = b.op("Sub", [b.unsqueeze(x, [1], "row"), sv], "difference")
        total = b.reduce("ReduceSum", b.op("Mul", [diff, diff], "squared"), [-1], 0, "distance2")
        return b.op("Exp", [b.op("Mul", [total, b.const(-gamma, "minus_gamma")], "scaled")], "rbf")
    if kind == "LINEAR":
        return b.op("Gemm", [x, sv], "dot", transB=1)
    dot = b.op("Gemm", [x, sv, b.const(np.float32(coef0), "coef0")], "dot", transB=1, alpha=float(gamma))
    if kind == "SIGMOID":
        return b.op("Tanh", [dot], "sigmoid_kernel")
    if degree == 2:
        return b.op("Mul", [dot, dot], "poly")
    if degree == 3:
        return b.op("Mul", [b.op("Mul", [dot, dot]), dot], "poly")
    return b.op("Pow", [dot, b.const(np.float32(degree), "degree")], "poly")


def _vectors(b: Builder, a: dict, count: int) -> np.ndarray:
    sv = np.asarray(a.get("support_vectors") or [], np.float32)
    if count <= 0 or sv.size % count:
        raise FixError(
            f"{describe(b.node)}: {sv.size} support vector values do not split into {count} vectors"
        )
    return sv.reshape(count, sv.size // count)


@decomposition("ai.onnx.ml", "SVMRegressor")
def svm_regressor(node, facts, fresh):
    """y = kernel(x, SV) . coefficients + rho[0] (n_supports > 0), else x . coefficients + rho[0];
    one_class: 1 where y > 0, else -1. onnxruntime applies no post_transform here."""
    b, a = Builder(node, facts, fresh), attrs(node)
    coef = np.asarray(a.get("coefficients") or [], np.float32)
    rho = b.const(np.asarray((a.get("rho") or [0.0])[:1], np.float32), "rho")
    count = int(a.get("n_supports", 0))
    if count > 0:
        vectors = _vectors(b, a, count)
        x = b.rows(b.as_float(node.input[0]), vectors.shape[1], like=node.input[0])
        kernel = _kernel(b, x, vectors, a)
        y = b.op("Gemm", [kernel, b.const(coef.reshape(1, -1), "coefficients"), rho], "score", transB=1)
    else:
        x = b.rows(b.as_float(node.input[0]), coef.size, like=node.input[0])
        y = b.op("Gemm", [x, b.const(coef.reshape(1, -1), "coefficients"), rho], "score", transB=1)
    if a.get("one_class", 0):
        above = b.cast(b.op("Greater", [y, b.const(np.float32(0), "zero")], "inlier"), FLOAT)
        two = b.op("Mul", [above, b.const(np.float32(2), "two")])
        b.op("Sub", [two, b.const(np.float32(1), "one")], "sign", node.output[0])
    else:
        b.op("Identity", [y], "score", node.output[0])
    return b.result()


def _pairs(classes: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]


def _pair_matrix(coef: np.ndarray, per_class: list[int]) -> np.ndarray:
    """[pairs, V]: the coefficients that combine the kernel values into each pair's decision value (libsvm's
    layout: coefficients [classes - 1, V]; class i's vectors against class j use row j - 1, class j's row i)."""
    classes, total = len(per_class), sum(per_class)
    start = np.concatenate([[0], np.cumsum(per_class)])
    rows = coef.reshape(classes - 1, total)
    out = np.zeros((len(_pairs(classes)), total), np.float32)
    for k, (i, j) in enumerate(_pairs(classes)):
        out[k, start[i] : start[i + 1]] = rows[j - 1, start[i] : start[i + 1]]
        out[k, start[j] : start[j + 1]] = rows[i, start[j] : start[j + 1]]
    return out


def _pair_decisions(b: Builder, kernel: str, coef: np.ndarray, per_class: list[int], rho, a: dict) -> str:
    """[N, pairs] decision values. One Gemm over all vectors, unless a kernel value can be NaN for finite
    inputs (POLY with a fractional degree: a negative base): onnxruntime sums each pair over its two classes'
    vectors only, so another class's NaN must not reach it; then each pair gathers its own vectors."""
    weights = _pair_matrix(coef, per_class)
    degree = float((list(a.get("kernel_params") or []) + [0.0, 0.0, 0.0])[2])
    if a.get("kernel_type", "LINEAR") != "POLY" or degree == int(degree):
        return b.op(
            "Gemm", [kernel, b.const(weights, "pair_coefficients"), b.const(rho, "rho")], "decision", transB=1
        )
    used = [np.nonzero(row)[0] for row in _pair_mask(per_class)]
    width = max(len(u) for u in used)
    # padding repeats the pair's first vector with coefficient 0: NaN there is NaN in the pair's sum anyway
    index = np.array([np.pad(u, (0, width - len(u)), constant_values=u[0]) for u in used], np.int64)
    picked = np.zeros((len(used), width), np.float32)
    for k, u in enumerate(used):
        picked[k, : len(u)] = weights[k, u]
    rows = b.op(
        "Gather", [kernel, b.const(index, "pair_vectors")], "pair_kernels", axis=1
    )  # [N, pairs, width]
    terms = b.op("Mul", [rows, b.const(picked, "pair_coefficients")], "terms")
    sums = b.reduce("ReduceSum", terms, [2], 0, "pair_sums")
    return b.op("Add", [sums, b.const(rho, "rho")], "decision")


def _pair_mask(per_class: list[int]) -> np.ndarray:
    """[pairs, V]: the vectors of each pair's two classes."""
    start = np.concatenate([[0], np.cumsum(per_class)])
    out = np.zeros((len(_pairs(len(per_class))), int(start[-1])), bool)
    for k, (i, j) in enumerate(_pairs(len(per_class))):
        out[k, start[i] : start[i + 1]] = out[k, start[j] : start[j + 1]] = True
    return out


def _coupled_probabilities(b: Builder, scores: str, prob_a: float, prob_b: float) -> str:
    """Two classes: Platt's sigmoid of the decision value, then onnxruntime's pairwise coupling loop
    (libsvm's multiclass_probability), which for two classes stops within two rounds; unrolled three times,
    each round applied only to rows that have not yet passed the stopping test. Returns [N, 2]."""
    f = np.float32
    c = lambda v, what: b.const(f(v), what)  # noqa: E731
    val = b.op("Add", [b.op("Mul", [scores, c(prob_a, "prob_a")]), c(prob_b, "prob_b")], "platt")
    # 1 - logistic(val), logistic as onnxruntime computes it: 1 / (1 + exp(-|v|)), mirrored for v < 0
    grown = b.op("Add", [c(1, "one"), b.op("Exp", [b.op("Neg", [b.op("Abs", [val])])])])
    pos = b.op("Div", [c(1, "one"), grown], "logistic_abs")
    neg_side = b.op("Less", [val, c(0, "zero")], "negative")
    logistic = b.where(neg_side, b.op("Sub", [c(1, "one"), pos]), pos, "logistic")
    p01 = b.op("Sub", [c(1, "one"), logistic], "pair_probability")
    r01 = b.op("Min", [b.op("Max", [p01, c(1e-7, "low")]), c(1 - 1e-7, "high")], "r01")
    r10 = b.op("Sub", [c(1, "one"), r01], "r10")
    q00, q11 = b.op("Mul", [r10, r10], "q00"), b.op("Mul", [r01, r01], "q11")
    q01 = b.op("Neg", [b.op("Mul", [r10, r01])], "q01")
    q = [[q00, q01], [q01, q11]]
    p = [c(0.5, "p0"), c(0.5, "p1")]
    eps = c(0.005 / 2, "eps")
    done = None
    for _ in range(3):
        qp = [b.op("Add", [b.op("Mul", [q[i][0], p[0]]), b.op("Mul", [q[i][1], p[1]])], "qp") for i in (0, 1)]
        pqp = b.op("Add", [b.op("Mul", [p[0], qp[0]]), b.op("Mul", [p[1], qp[1]])], "pqp")
        err = b.op("Max", [b.op("Abs", [b.op("Sub", [qp[i], pqp])]) for i in (0, 1)], "error")
        converged = b.op("Less", [err, eps], "converged")
        done = converged if done is None else b.op("Or", [done, converged], "done")
        new_p = list(p)
        for i in (0, 1):
            diff = b.op("Div", [b.op("Sub", [pqp, qp[i]]), q[i][i]], "diff")
            new_p[i] = b.op("Add", [new_p[i], diff])
            grow = b.op("Add", [c(1, "one"), diff], "grow")
            step = b.op("Add", [b.op("Mul", [diff, q[i][i]]), b.op("Mul", [c(2, "two"), qp[i]])])
            pqp = b.op(
                "Div", [b.op("Div", [b.op("Add", [pqp, b.op("Mul", [diff, step])]), grow]), grow], "pqp"
            )
            for j in (0, 1):
                qp[j] = b.op("Div", [b.op("Add", [qp[j], b.op("Mul", [diff, q[i][j]])]), grow], "qp")
                new_p[j] = b.op("Div", [new_p[j], grow], "p")
        p = [b.where(done, p[k], new_p[k], "p") for k in (0, 1)]
    return b.concat(p, 1, "probabilities")


@decomposition("ai.onnx.ml", "SVMClassifier")
def svm_classifier(node, facts, fresh):
    """Support vectors (vectors_per_class): kernel, one-vs-one decision values, votes; the label is the
    class with most votes. Without support vectors (liblinear): scores = x W^T + rho[0], label = argmax.
    Scores output as onnxruntime writes it: the pair decision values (two classes: [-s, s], or [1 - s, s]
    under a post_transform), or the class probabilities when prob_a is given."""
    b, a = Builder(node, facts, fresh), attrs(node)
    labels = int_labels(b, a, "classlabels_ints", "classlabels_strings", 0)
    classes = len(a.get("classlabels_ints") or a.get("classlabels_strings") or [])
    per_class = [int(v) for v in a.get("vectors_per_class") or []]
    coef = np.asarray(a.get("coefficients") or [], np.float32)
    rho = np.asarray(a.get("rho") or [0.0], np.float32)
    prob_a, prob_b = a.get("prob_a") or [], a.get("prob_b") or []
    kind = a.get("post_transform", "NONE")
    if classes < 2:
        raise FixError(f"{describe(node)}: {classes} class label(s); a classifier needs two or more")
    if sum(per_class) == 0:  # liblinear: one row of coefficients per class, one shared rho
        if coef.size % classes:
            raise FixError(f"{describe(node)}: {coef.size} coefficients for {classes} classes")
        width = coef.size // classes
        x = b.rows(b.as_float(node.input[0]), width, like=node.input[0])
        w = b.const(coef.reshape(classes, width), "coefficients")
        scores = b.op("Gemm", [x, w, b.const(rho[:1], "rho")], "scores", transB=1)
        if labels is not None and b.used(0):
            best = b.op("ArgMax", [scores], "argmax", axis=1, keepdims=0)
            if classes == 2 and not prob_a:
                _linear_binary_label(b, scores, best, labels, bool((coef >= 0).all()))
            else:
                label_lookup(b, best, labels, node.output[0])
        if b.used(1):
            post_transform(b, scores, kind, node.output[1])
        return b.result()
    if len(per_class) != classes:
        raise FixError(
            f"{describe(node)}: vectors_per_class has {len(per_class)} entries for {classes} classes"
        )
    pairs = _pairs(classes)
    if coef.size != (classes - 1) * sum(per_class) or rho.size < len(pairs):
        raise FixError(
            f"{describe(node)}: coefficients/rho do not match {classes} classes of {per_class} vectors"
        )
    if prob_a and classes > 2:
        raise FixError(
            f"{describe(node)}: probabilities for {classes} classes come from onnxruntime's pairwise coupling, "
            "an iteration of up to 100 rounds per row with a data-dependent stop; it is not unrolled here. "
            "Note: the label and the decision values decompose without prob_a/prob_b (drop them to get those)"
        )
    vectors = _vectors(b, a, sum(per_class))
    x = b.rows(b.as_float(node.input[0]), vectors.shape[1], like=node.input[0])
    kernel = _kernel(b, x, vectors, a)
    decision = _pair_decisions(b, kernel, coef, per_class, rho[: len(pairs)], a)
    if labels is not None and b.used(0):
        first = np.zeros((len(pairs), classes), np.float32)
        second = np.zeros((len(pairs), classes), np.float32)
        for k, (i, j) in enumerate(pairs):
            first[k, i], second[k, j] = 1, 1
        wins = b.cast(b.op("Greater", [decision, b.const(np.float32(0), "zero")], "first_wins"), FLOAT)
        votes = b.op(
            "Add",
            [
                b.op("MatMul", [wins, b.const(first - second, "vote_swing")]),
                b.const(second.sum(0), "votes_if_lost"),
            ],
            "votes",
        )
        best = b.op("ArgMax", [votes], "most_votes", axis=1, keepdims=0)
        label_lookup(b, best, labels, node.output[0])
    if b.used(1):
        if prob_a:
            probs = _coupled_probabilities(b, decision, float(prob_a[0]), float(prob_b[0]))
            post_transform(b, probs, kind, node.output[1])
        elif classes == 2:
            binary_pair(b, decision, kind, complement=kind != "NONE", out=node.output[1])
        else:
            post_transform(b, decision, kind, node.output[1])
    return b.result()


def _linear_binary_label(b: Builder, scores: str, best: str, labels: list[int], all_positive: bool) -> None:
    """onnxruntime's two-class rule without probabilities: labels[1] when the top score passes 0.5 (all
    coefficients >= 0) or 0 (otherwise), else the label of the top score."""
    top = b.reduce("ReduceMax", scores, [1], 0, "top")
    # top >= 0.5 is top > the float32 just below 0.5 (exact, and false for NaN as >= is)
    bar = np.nextafter(np.float32(0.5), np.float32(-np.inf)) if all_positive else np.float32(0)
    passes = b.op("Greater", [top, b.const(np.float32(bar), "bar")], "passes")
    chosen = b.op("Gather", [b.const(np.array(labels, np.int64), "classlabels"), best], "by_score", axis=0)
    b.where(passes, b.const(np.int64(labels[1]), "positive"), chosen, "label", b.node.output[0])
