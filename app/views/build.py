"""Test build: pick backends and options, watch progress, read the log, compare latency and accuracy.
"INT8 (calibrate)" quantizes the current model first (surgery.quantize, random or uploaded .npz calibration) and
builds it at int8 next to its float32 original at fp16 and fp32 (surgery.backends.build.build_ladder)."""

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: the modules the pages import

import checks  # noqa: E402
import pandas as pd  # noqa: E402
import session  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402
from verdicts import inline_code, md_escape  # noqa: E402

from surgery.backends.base import BuildOptions  # noqa: E402
from surgery.backends.build import check_profiles  # noqa: E402
from surgery.graph import GraphFacts  # noqa: E402
from surgery.quantize import RANDOM_WARNING, CalibrationError, has_qdq  # noqa: E402
from surgery.specs import parse_profiles, profile_example  # noqa: E402
from surgery.usecases.build import BuildRequest, build  # noqa: E402

sidebar.render()
s = session.state()
ws = session.workspace()
st.title("Test build")
st.caption(
    "Builds the current model (with your fixes) on each backend this machine has. TensorRT uses full "
    "TensorRT where installed with a GPU, else TensorRT-RTX, which builds ahead of time without a GPU."
)
c = st.columns([3, 1, 1])
here, why_not = checks.buildable()
backends = c[0].multiselect(
    "Backends",
    here,
    default=[b for b in here if b in ("tensorrt", "onnxruntime") or b in session.state().targets],
    key="build_backends",
)
for name, reason in why_not.items():
    st.caption(f"{inline_code(name)} cannot build here: {md_escape(reason)}")
CALIBRATE = "INT8 (calibrate)"
precision = c[1].selectbox("Precision", ["fp32", "fp16", "bf16", "int8", CALIBRATE], key="build_precision")
runs = c[2].number_input(
    "Timed runs (at most)",
    1,
    1000,
    20,
    key="build_runs",
    help="timing stops after 5 s of it (at least 3 runs): a slow engine is timed in seconds, not minutes",
)
tune_trials = 0
if "tvm" in backends:
    tune_trials = st.number_input(
        "TVM tuning trials (MetaSchedule on this CPU; 0 = untuned)",
        0,
        20000,
        0,
        step=8,
        key="build_tune_trials",
        help="TVM compiles for this CPU (llvm -mcpu from LLVM's host detection). With trials, MetaSchedule "
        "tunes the model's kernels and the table shows the untuned and the tuned latency; tuned kernels are "
        "kept in ~/.cache/onnx-surgery/tvm-tuning and reused by the next build, which then runs no new trials.",
    )
calibrate = precision == CALIBRATE
if precision in ("fp16", "bf16", "int8") or calibrate:
    # a backend's own numbers can hide what breaks (onnxruntime's CPU runs many fp16 ops in fp32): the emulation
    # node by node, with the nodes to keep in float32 coloured on the graph, is one page away
    st.page_link(
        "views/precision.py",
        label="Which nodes break accuracy at this precision? The Precision page finds them and keeps them in fp32",
        icon=":material/tune:",
    )
upload, per_channel = None, False
if calibrate:
    st.caption(
        "Quantizes the current model to INT8 Q/DQ as strongly typed TensorRT takes it (onnxruntime's static "
        "quantization: zero point 0, Q/DQ on the inputs of Conv, Gemm and MatMul), then builds it at int8 next "
        "to its float32 original at fp16 and fp32. Errors are against that float32 original: mean, p99 and max "
        "relative error. The workspace's model is not changed (the CLI's `onnx-surgery quantize` records a step)."
    )
    q = st.columns([1, 2, 1])
    source = q[0].radio("Calibration data", ["random", "upload .npz"], key="calib_source")
    if source == "random":
        samples = q[1].number_input("Random samples (seeded)", 1, 4096, 32, key="calib_samples")
        st.warning(RANDOM_WARNING, icon=":material/casino:")
    else:
        upload = q[1].file_uploader(
            "Calibration .npz: one array per graph input, keyed by its name (one sample shaped like the input, "
            "or a stack of samples on a new first axis)",
            type=["npz"],
            key="calib_npz",
        )
    per_channel = q[2].checkbox("Per-channel weight scales", key="calib_per_channel")
elif has_qdq(ws.current):
    st.caption(
        "This model has Q/DQ nodes: TensorRT builds it at INT8 whatever the precision (strongly typed)."
    )
facts = GraphFacts.of(ws.current, infer=False)
dynamic = [n for n in facts.graph_inputs if facts.info(n).is_dynamic]
profiles = {}
for name in dynamic:
    text = st.text_input(
        f"Profile for dynamic input `{name}` {facts.info(name).shape_str()} (min:opt:max)",
        key=f"profile-{name}",
        placeholder=profile_example(facts.info(name).shape or []),
    )
    if text:
        try:
            one = parse_profiles([f"{name}:{text}"], dynamic)
            check_profiles(ws.current, one)
            profiles.update(one)
        except ValueError as exc:  # the same one-line message as `build --profile`
            st.error(str(exc).replace("--profile", "profile"))
if profiles:
    st.caption("Every backend that runs here is timed at the profile's min, opt and max shapes.")


def _calibration(tmp: str) -> str | None:
    """The calibration the widgets ask for, as surgery.quantize takes it (an upload is written into `tmp`); None
    (with the error shown) when there is none yet."""
    if source == "random":
        return f"random:{int(samples)}"
    if upload is None:
        st.error("Upload a calibration .npz first, or choose random calibration.")
        return None
    path = Path(tmp) / Path(upload.name).name
    path.write_bytes(upload.getvalue())
    return str(path)


def _artifact_dir() -> str:
    """This browser session's build folder, private: the last build's engines stay there to download until the
    next Build empties it, and it goes when the server stops (builds no longer leave a folder in /tmp each)."""
    old = st.session_state.get("build_artifacts")
    if old:
        shutil.rmtree(old, ignore_errors=True)
    new = tempfile.mkdtemp(prefix="onnx-surgery-build-")
    atexit.register(shutil.rmtree, new, True)
    st.session_state["build_artifacts"] = new
    return new


if st.button("Build", key="build_go", type="primary", disabled=not backends):
    s.pop("quantized", None)
    s.build_results, bars = [], {}

    def progress_for(backend):
        bars[backend] = st.progress(0.0, text=f"{backend}: starting")
        return lambda f, m: bars[backend].progress(min(max(f, 0.0), 1.0), text=m[:80])

    options = BuildOptions(
        precision=precision,
        runs=int(runs),
        profiles=profiles,
        tune_trials=int(tune_trials),
        out_dir=_artifact_dir(),
    )
    with tempfile.TemporaryDirectory(prefix="onnx-surgery-calib-") as tmp:
        calibration = _calibration(tmp) if calibrate else None
        if calibration is not None or not calibrate:
            request = BuildRequest(backends, options, calibration=calibration, per_channel=per_channel)
            bar = st.progress(0.0, text="quantizing: checking the calibration data") if calibrate else None
            try:
                outcome = build(
                    ws.current,
                    request,
                    base_dir=str(ws.original.base_dir) if ws.original.base_dir else None,
                    progress_for=progress_for,
                    quantize_progress=(lambda f, m: bar.progress(f, text=f"quantizing: {m}"[:80]))
                    if bar
                    else None,
                )
            except CalibrationError as exc:
                bar.empty()
                st.error(md_escape(str(exc).replace(str(Path(tmp)) + "/", "")), icon=":material/error:")
                outcome = None
            if outcome is not None:
                for backend, b in bars.items():
                    mine = [r for r in outcome.reports if r.backend.split("@")[0] == backend.split("@")[0]]
                    ok, seconds = all(r.ok for r in mine), sum(r.build_seconds for r in mine)
                    b.progress(1.0, text=f"{backend}: {'built' if ok else 'failed'} in {seconds:.2f} s")
                s.build_results = outcome.reports
                if outcome.quantized is not None:
                    what = f"{int(samples)} random samples" if source == "random" else upload.name
                    s.quantized = {
                        "bytes": outcome.quantized.SerializeToString(),
                        "calib": what,
                        "per_channel": per_channel,
                    }
if s.get("quantized"):
    info = s.quantized
    st.success(
        f"Quantized to INT8 on {info['calib']}"
        + (" (per-channel weights)" if info["per_channel"] else "")
        + ": built at int8 next to the float32 original at fp16 and fp32.",
        icon=":material/compress:",
    )
    st.download_button("Download the INT8 (Q/DQ) model", info["bytes"], "model.int8.onnx", key="dl-quantized")
results = s.get("build_results", [])
one_per_backend = len({r.backend for r in results}) == len(results)


def _name(r) -> str:
    return r.backend if one_per_backend else f"{r.backend} {r.precision}"


for k, r in enumerate(results):
    with st.container(border=True):
        head = f"**{_name(r)}** — " + ("built" if r.ok else "failed") + f" in {r.build_seconds:.2f} s"
        (st.success if r.ok else st.error)(head, icon=":material/build:")
        if r.error:
            st.code(r.error, language=None, wrap_lines=True)
        if r.node and st.button(
            f"Show node {md_escape(r.node)} in the graph", key=f"build-node-{k}-{r.backend}"
        ):
            s.selected = r.node
            st.switch_page("views/workbench.py")
        if r.tuning:
            from surgery.cli.build_cmd import tuning_line

            st.caption("Tuning: " + tuning_line(r))
        if r.note:
            st.caption(md_escape(r.note))
        if r.artifact and Path(r.artifact).exists():
            st.download_button(
                f"Download {Path(r.artifact).name}",
                Path(r.artifact).read_bytes(),
                Path(r.artifact).name,
                key=f"dl-{k}-{r.backend}",
            )
        if r.log:
            with st.expander("Log"):
                st.code(r.log[-5000:], language=None)


def _worst(r) -> dict:
    """The output with the largest mean relative error: its distribution (surgery.verify's definitions)."""
    worst = max(r.accuracy.values(), key=lambda v: v["mean_rel"])
    return {
        "worst mean rel error": worst["mean_rel"],
        "p99 rel error": worst.get("p99_rel"),
        "max rel error": worst.get("max_rel"),
    }


rows = [
    {
        "backend": _name(r),
        "precision": r.precision,
        "median ms": r.latency_ms["median"],
        "p90 ms": r.latency_ms["p90"],
        "timed runs": r.latency_ms.get("runs"),
        **(
            {"untuned median ms": r.tuning["untuned_ms"]["median"]}
            if (r.tuning or {}).get("untuned_ms")
            else {}
        ),
        **{f"{p} ms": e.get("median") for p, e in (r.latency_points or {}).items()},
        **(_worst(r) if r.accuracy else {"worst mean rel error": None}),
    }
    for r in results
    if r.latency_ms
]
if rows:
    df = pd.DataFrame(rows).set_index("backend")
    charts = st.columns(2)
    charts[0].markdown("**Latency (ms)**")
    shown = ["median ms", "p90 ms"] + [c for c in ("untuned median ms", "min ms", "max ms") if c in df]
    charts[0].bar_chart(df[shown], stack=False)
    if df["worst mean rel error"].notna().any():
        errors = [c for c in ("worst mean rel error", "p99 rel error", "max rel error") if c in df]
        charts[1].markdown("**Accuracy against onnxruntime fp32 (relative error of the worst output)**")
        charts[1].bar_chart(df[errors], stack=False)
    st.dataframe(df, key="build_table")
