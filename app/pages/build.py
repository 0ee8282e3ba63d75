"""Test build: pick backends and options, watch progress, read the log, compare latency and accuracy."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: adapter, sidebar, graph_component

import adapter  # noqa: E402
import pandas as pd  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402

from surgery.backends.base import BuildOptions  # noqa: E402
from surgery.build import build_model  # noqa: E402
from surgery.graph import GraphFacts  # noqa: E402
from surgery.specs import parse_profiles  # noqa: E402

sidebar.render()
s = adapter.state()
ws = adapter.workspace()
st.title("Test build")
st.caption(
    "Builds the current model (with your fixes) on each backend this machine has. TensorRT uses full "
    "TensorRT where installed with a GPU, else TensorRT-RTX, which builds ahead of time without a GPU."
)
c = st.columns([3, 1, 1])
here, why_not = adapter.buildable()
backends = c[0].multiselect(
    "Backends",
    here,
    default=[b for b in ("tensorrt", "onnxruntime") if b in here],
    key="build_backends",
)
for name, reason in why_not.items():
    st.caption(f"`{name}` cannot build here: {reason}")
precision = c[1].selectbox("Precision", ["fp32", "fp16", "bf16", "int8"], key="build_precision")
runs = c[2].number_input("Timed runs", 1, 1000, 20, key="build_runs")
facts = GraphFacts.of(ws.current, infer=False)
dynamic = [n for n in facts.graph_inputs if facts.info(n).is_dynamic]
profiles = {}
for name in dynamic:
    text = st.text_input(
        f"Profile for dynamic input `{name}` {facts.info(name).shape_str()} (min:opt:max)",
        key=f"profile-{name}",
        placeholder="1x3x224x224:4x3x224x224:8x3x224x224",
    )
    if text:
        try:
            profiles.update(parse_profiles([f"{name}:{text}"], dynamic))
        except ValueError as exc:  # the same one-line message as `build --profile`
            st.error(str(exc).replace("--profile", "profile"))
if st.button("Build", key="build_go", type="primary", disabled=not backends):
    results = []
    for backend in backends:
        bar = st.progress(0.0, text=f"{backend}: starting")
        report = build_model(
            backend,
            ws.current,
            BuildOptions(precision=precision, runs=int(runs), profiles=profiles),
            progress=lambda f, m, bar=bar: bar.progress(min(max(f, 0.0), 1.0), text=m[:80]),
            base_dir=str(ws.original.base_dir) if ws.original.base_dir else None,
        )
        bar.progress(
            1.0, text=f"{backend}: {'built' if report.ok else 'failed'} in {report.build_seconds:.2f} s"
        )
        results.append(report)
    s.build_results = results
for r in s.get("build_results", []):
    with st.container(border=True):
        head = f"**{r.backend}** — " + ("built" if r.ok else "failed") + f" in {r.build_seconds:.2f} s"
        (st.success if r.ok else st.error)(head, icon=":material/build:")
        if r.error:
            st.code(r.error, language=None, wrap_lines=True)
        if r.node and st.button(f"Show node {r.node} in the graph", key=f"build-node-{r.backend}"):
            s.selected = r.node
            st.switch_page("pages/workbench.py")
        if r.note:
            st.caption(r.note)
        if r.artifact and Path(r.artifact).exists():
            st.download_button(
                f"Download {Path(r.artifact).name}",
                Path(r.artifact).read_bytes(),
                Path(r.artifact).name,
                key=f"dl-{r.backend}",
            )
        if r.log:
            with st.expander("Log"):
                st.code(r.log[-5000:], language=None)
rows = [
    {
        "backend": r.backend,
        "median ms": r.latency_ms["median"],
        "p90 ms": r.latency_ms["p90"],
        "worst mean rel error": max(v["mean_rel"] for v in r.accuracy.values()) if r.accuracy else None,
    }
    for r in s.get("build_results", [])
    if r.latency_ms
]
if rows:
    df = pd.DataFrame(rows).set_index("backend")
    charts = st.columns(2)
    charts[0].markdown("**Latency (ms)**")
    charts[0].bar_chart(df[["median ms", "p90 ms"]], stack=False)
    if df["worst mean rel error"].notna().any():
        charts[1].markdown("**Accuracy against onnxruntime (worst mean relative error)**")
        charts[1].bar_chart(df[["worst mean rel error"]])
    st.dataframe(df, key="build_table")
