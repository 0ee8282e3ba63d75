"""Precision: which nodes break accuracy in fp16 / bf16 / INT8, found by emulating the current model node by node
(surgery.usecases.precision, as `onnx-surgery precision` runs it), and the step that keeps exactly those in
float32, applied through the workspace like any fix (undo in the sidebar)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: the modules the pages import

import session  # noqa: E402
import session_store  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402

from surgery.graph import node_keys  # noqa: E402
from surgery.usecases.precision import (  # noqa: E402
    DEFAULT_CALIB,
    DEFAULT_TOLERANCE,
    PrecisionInputError,
    PrecisionRequest,
    search,
)

sidebar.render()

st.title("Precision")
st.caption(
    "Every intermediate rounded to fp16 / bf16 as an engine computes it (INT8: the Q/DQ nodes `quantize` writes), "
    "not as onnxruntime's CPU provider runs a float16 model, which computes many ops in float32 and hides "
    "overflow. The smallest set of nodes kept in float32 that brings every output within the tolerance becomes "
    "one step: casts in the graph (INT8: quantize with those nodes excluded)."
)

if not session.has_model():
    st.info("Open a model in the Workbench first.")
    st.stop()

ws = session.workspace()
model = ws.current
cols = st.columns(3)
precision = cols[0].radio("Format", ["fp16", "bf16", "int8"], horizontal=True, key="precision-format")
tolerance = cols[1].number_input(
    "Tolerance (mean relative error)",
    min_value=0.0,
    value=DEFAULT_TOLERANCE,
    step=0.001,
    format="%.4f",
    key="precision-tolerance",
)
calib = cols[2].text_input("Inputs (random:N, FILE.npz, folder)", value=DEFAULT_CALIB, key="precision-calib")
keep = st.multiselect("Keep in float32 anyway", node_keys(model.graph.node), key="precision-keep")

OUTCOME, APPLIED = "precision_outcome", "precision_applied"
if st.session_state.get(APPLIED):
    st.success(f"applied: {st.session_state.pop(APPLIED)} (undo in the sidebar)")
if st.button("Find the nodes to keep", type="primary", key="precision-run"):
    bar = st.progress(0.0, text="starting")
    request = PrecisionRequest(precision, calib=calib, tolerance=float(tolerance), keep=list(keep))
    try:
        outcome = search(
            model,
            request,
            base_dir=ws.original.base_dir,
            progress=lambda f, m: bar.progress(min(max(f, 0.0), 1.0), text=m),
        )
        st.session_state[OUTCOME] = (session.fingerprint(), outcome)
    except PrecisionInputError as exc:
        st.session_state.pop(OUTCOME, None)
        st.error(str(exc))
    except Exception as exc:  # noqa: BLE001 - onnxruntime's refusal of the model, in one line
        from surgery.text import error_line

        st.session_state.pop(OUTCOME, None)
        st.error(f"the model cannot be emulated: {error_line(exc)}")
    bar.empty()

held = st.session_state.get(OUTCOME)
if held is not None and held[0] != session.fingerprint():
    st.caption("The model changed since the last search: run it again.")
    held = None
if held is not None:
    o = held[1]
    good = o.within
    (st.success if good else st.error)(
        f"{o.precision}: worst output error {o.before.error:.3g} with everything reduced, {o.after.error:.3g} "
        f"with {len(o.kept)} node(s) in float32 ({'within' if good else 'not within'} {o.tolerance:g}); "
        f"{o.reduced_share:.1%} of the float compute in {o.precision}; {o.runs} emulated runs in "
        f"{o.seconds:.2f} s"
    )
    st.markdown("**Error per output**")
    st.dataframe(
        [
            {
                "output": b.name,
                "before": b.mean_rel,
                "after": a.mean_rel,
                "max abs after": a.max_abs,
                "inf/NaN before": b.nonfinite,
            }
            for b, a in zip(o.before.outputs, o.after.outputs)
        ],
        hide_index=True,
        key="precision-outputs",
    )
    if o.overflow_origins:
        st.markdown("inf/NaN first appears at: " + ", ".join(f"`{k}`" for k in o.overflow_origins[:8]))
    st.markdown(f"**Kept in float32** ({len(o.kept)})")
    st.dataframe(
        [
            {
                "node": k.key,
                "op": k.op_type,
                "why": k.reason,
                "max |value|": k.max_abs,
                "sensitivity": k.sensitivity,
            }
            for k in o.kept
        ],
        hide_index=True,
        key="precision-kept",
    )
    st.markdown("**Every float node**: activation range against the format's limit, and sensitivity")
    worst = max((n["sensitivity"] or 0.0 for n in o.nodes if n["sensitivity"] != float("inf")), default=0.0)
    st.dataframe(
        [
            {
                "node": n["key"],
                "op": n["op_type"],
                "of limit": min(n["of_limit"], 1.0),
                "sensitivity": min(n["sensitivity"] if n["sensitivity"] is not None else 0.0, worst or 1.0),
                "kept": n["kept"],
                "why": n["reason"],
            }
            for n in o.nodes
        ],
        column_config={
            "of limit": st.column_config.ProgressColumn("range / limit", min_value=0.0, max_value=1.0),
            "sensitivity": st.column_config.ProgressColumn(
                "error alone", min_value=0.0, max_value=worst or 1.0, format="%.2e"
            ),
        },
        hide_index=True,
        key="precision-nodes",
    )
    if o.step is not None:
        st.code(o.step.describe(), language=None)
        if o.precision == "int8":
            st.caption(f"quantize --exclude {' '.join(o.exclude) or '(none)'}")
        else:
            st.caption(f"trtexec (weakly typed builds): {o.layer_precisions}")
        if st.button("Apply the step", key="precision-apply"):
            from surgery.fixes import FixError

            try:
                session.workspace().apply(o.step)
            except FixError as exc:
                st.error(str(exc))
            else:
                session_store.remember_session()
                st.session_state.pop(OUTCOME, None)
                st.session_state[APPLIED] = o.step.describe()
                st.rerun()  # the sidebar lists the new step, with its undo
