"""Verifying a plan: the original (onnxruntime) and the chained parts on the same seeded inputs, max abs and mean
relative error per output (surgery.verify's definitions), the first crossing tensor that differs named."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto

from surgery.split.chain import PartFailed, execute
from surgery.split.plan import RTOL_OTHER_BACKEND, Plan, Verification, value_bytes
from surgery.text import error_line

# -- inputs ------------------------------------------------------------------------------------------------------


def _vocabulary(model: ModelProto) -> list[str]:
    """Strings the model's nodes list (LabelEncoder keys, TfIdf pools, CategoryMapper categories, stopwords...):
    seeded string inputs are drawn from them, plus one word none of them holds."""
    from surgery.graph import iter_subgraphs

    words: list[str] = []
    graphs = [model.graph, *(s.graph for s in iter_subgraphs(model.graph))]
    for g in graphs:
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.STRINGS:
                    words.extend(s.decode("utf-8", "replace") for s in a.strings)
    words = [w for w in dict.fromkeys(words) if w][:256]
    return [*(words or ["a", "b", "c"]), "onnx-surgery"]


def seeded_feeds(
    model: ModelProto, seed: int = 0, shapes: dict[str, list[int]] | None = None, default_dim: int = 2
) -> dict[str, np.ndarray]:
    """Deterministic inputs for every graph input: numbers as surgery.feeds draws them (a KV cache's lengths
    related to the mask's), strings drawn from the model's own vocabulary. `shapes` fixes an input's shape
    (name -> dims; '' for every input)."""
    from surgery.feeds import draw, kv_cache_dims, seeded_inputs
    from surgery.graph import tensor_info_from_type

    shapes = shapes or {}
    inits = {t.name for t in model.graph.initializer}
    numeric = ModelProto()
    strings = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        info = tensor_info_from_type(vi.name, vi.type)
        fixed = shapes.get(vi.name, shapes.get(""))
        copy = numeric.graph.input.add()
        copy.CopyFrom(vi)
        if fixed is not None:
            old = list(copy.type.tensor_type.shape.dim)
            del copy.type.tensor_type.shape.dim[:]
            for k, d in enumerate(fixed):
                dim = copy.type.tensor_type.shape.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                elif d is None and k < len(old):  # '?': the input's own dim there
                    dim.CopyFrom(old[k])
                else:  # a name, or '?' where the input has no dim: dynamic, seeded at default_dim
                    dim.dim_param = d or f"{vi.name}_dim{k}"
        if info.dtype == onnx.TensorProto.STRING:
            strings.append(copy)
            numeric.graph.input.pop()
    # a decoder's KV lengths related (mask = past + new), read from the model's own input names; where nothing is
    # overridden, drawn from the model itself, so that token ids fall inside the table their Gather reads
    related = kv_cache_dims(model)
    if strings or shapes:
        feeds = seeded_inputs(numeric, seed=seed, dims=related, default_dim=default_dim)
    else:
        feeds = draw(model, seed=seed, dims=related, default_dim=default_dim).arrays
    rng = np.random.default_rng(seed + 1)
    vocab = _vocabulary(model)
    for vi in strings:
        info = tensor_info_from_type(vi.name, vi.type)
        if info.shape is None:
            raise ValueError(f"input '{vi.name}' has no shape; give its shape to generate inputs")
        shape = [d if isinstance(d, int) else default_dim for d in info.shape]
        feeds[vi.name] = np.array(rng.choice(vocab, size=shape), dtype=object)
    order = [vi.name for vi in model.graph.input]
    return {k: feeds[k] for k in order if k in feeds}


# -- verification ------------------------------------------------------------------------------------------------


def _compare(a, b) -> tuple[float, float, str]:
    """max abs, mean rel, and a note (shape or dtype change) for a reference value `a` and a chained one `b`."""
    from surgery.verify import _maps_as_rows, max_abs_error, mean_relative_error

    a, _ = _maps_as_rows(a, None)
    b, _ = _maps_as_rows(b, None)
    if a.shape != b.shape:
        return float("inf"), float("inf"), f"shape {a.shape} became {b.shape}"
    if a.dtype.kind in "OUS" or b.dtype.kind in "OUS":
        same = bool(np.all(a.astype(str) == b.astype(str)))
        return (0.0, 0.0, "") if same else (float("inf"), float("inf"), "strings differ")
    note = "" if a.dtype == b.dtype else f"dtype {a.dtype} became {b.dtype}"
    return max_abs_error(a, b), mean_relative_error(a, b), note


def _within(value, mean_rel: float, note: str, exact: bool) -> bool:
    from surgery.verify import exact_threshold

    if note:
        return False
    dtype = np.asarray(value).dtype
    if dtype.kind in "OUSb" or dtype.kind in "iu":
        return mean_rel == 0
    return mean_rel <= (exact_threshold(dtype) if exact else RTOL_OTHER_BACKEND)


def verify_plan(
    plan: Plan,
    original: ModelProto,
    *,
    feeds: dict | None = None,
    seed: int = 0,
    shapes: dict[str, list[int]] | None = None,
) -> Verification:
    """Run the original (onnxruntime) and the chained parts on the same seeded inputs; compare every output, and
    name the first crossing tensor that differs when an output does."""
    from surgery.ort import make_session
    from surgery.verify import _with_outputs

    if feeds is None:
        try:
            feeds = seeded_feeds(original, seed=seed, shapes=shapes)
        except ValueError as exc:
            return Verification("not verified", seed, message=f"no inputs to run with: {exc}")
    shape_of = {k: list(np.shape(v)) for k, v in feeds.items()}
    crossing = [c.name for c in plan.crossings]
    try:
        sess = make_session(_with_outputs(original, crossing), plan.base_dir)
        names = [o.name for o in sess.get_outputs()]
        wanted = {i.name for i in sess.get_inputs()}
        ref = dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted})))
        del sess  # the original's weights (and its arena) go before the parts' sessions hold theirs
    except Exception as exc:
        return Verification(
            "not verified",
            seed,
            shape_of,
            message=f"the original does not run on onnxruntime, so there is nothing to compare with ({error_line(exc)})",
        )
    try:
        env, ran = execute(plan, feeds)
    except PartFailed as exc:
        return Verification("failed", seed, shape_of, message=str(exc))
    except Exception as exc:
        return Verification("failed", seed, shape_of, message=error_line(exc))
    exact = all(on == "onnxruntime" for on, _ in ran)
    notes = sorted({f"part {k}: {note}" for k, (_, note) in enumerate(ran) if note})
    for c in plan.crossings:
        c.measured_bytes = value_bytes(env.get(c.name))
        value = env.get(c.name)
        c.measured_shape = list(np.shape(value)) if isinstance(value, np.ndarray) else None
    outputs, all_ok = [], True
    for name in plan.outputs:
        a, b = ref.get(name), env.get(name)
        if a is None or b is None:
            outputs.append(
                {
                    "name": name,
                    "max_abs": float("inf"),
                    "mean_rel": float("inf"),
                    "ok": False,
                    "note": "missing",
                }
            )
            all_ok = False
            continue
        max_abs, mean_rel, note = _compare(a, b)
        ok = _within(a, mean_rel, note, exact)
        all_ok &= ok
        arr = np.asarray(a) if isinstance(a, np.ndarray) else None
        outputs.append(
            {
                "name": name,
                "dtype": str(arr.dtype) if arr is not None else type(a).__name__,
                "shape": list(arr.shape) if arr is not None else None,
                "max_abs": max_abs,
                "mean_rel": mean_rel,
                "ok": ok,
                "note": note,
            }
        )
    first = None
    if not all_ok:
        source = {o: p.index for p in plan.parts for o in p.outputs}
        for c in plan.crossings:
            if c.name in ref and c.name in env:
                max_abs, mean_rel, note = _compare(ref[c.name], env[c.name])
                if not _within(ref[c.name], mean_rel, note, exact):
                    first = {
                        "tensor": c.name,
                        "part": source.get(c.name),
                        "max_abs": max_abs,
                        "mean_rel": mean_rel,
                    }
                    break
        if first is None:
            bad = next(o for o in outputs if not o["ok"])
            first = {
                "tensor": bad["name"],
                "part": source.get(bad["name"]),
                "max_abs": bad["max_abs"],
                "mean_rel": bad["mean_rel"],
            }
    return Verification(
        "reproduces" if all_ok else "differs",
        seed,
        shape_of,
        [on for on, _ in ran],
        notes,
        outputs,
        first,
    )
