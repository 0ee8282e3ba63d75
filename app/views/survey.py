"""Survey: a whole folder of models against several targets (surgery.usecases.survey, as `onnx-surgery survey`).
Open a survey's report.json, or run a survey on a folder under --models-dir with its progress; see the matrix
models × targets; open any model in the workbench with the target it failed on."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app/: the modules the pages import


import checks  # noqa: E402
import opening  # noqa: E402
import pandas as pd  # noqa: E402
import session  # noqa: E402
import sidebar  # noqa: E402
import streamlit as st  # noqa: E402

from surgery.usecases.survey import survey  # noqa: E402
from surgery.usecases.survey.cells import final_outcome  # noqa: E402
from surgery.usecases.survey.report import BACKGROUNDS, COLOURS  # noqa: E402
from surgery.usecases.survey.request import OUTCOMES, SurveyInputError, SurveyRequest  # noqa: E402

MAX_BUTTONS = 100  # models listed with an "open" button at once (the filter narrows them)


def _under_models_dir(path: str) -> Path | None:
    """`path` (absolute, or relative to --models-dir) when it is under --models-dir, else None with the error
    said."""
    root = session.models_dir()
    if root is None:
        st.error("server paths are off: start the app with --models-dir DIR")
        return None
    p = (root / path).expanduser().resolve()
    if root != p and root not in p.parents:
        st.error(f"{path}: refused — only paths under {root} can be read")
        return None
    return p


def _load_report(data: bytes | str, source: str) -> None:
    try:
        report = json.loads(data)
        if (
            not isinstance(report, dict)
            or not isinstance(report.get("models"), list)
            or "targets" not in report
        ):
            raise ValueError("not a survey report (no 'models' and 'targets')")
    except ValueError as exc:
        st.session_state.survey_error = f"{source}: {exc}"
        return
    st.session_state.survey_report = report
    st.session_state.survey_error = None


def _open(path: str, target: str) -> None:
    """A button's callback (a widget's state may only be set before the widgets are drawn): open the model as
    the workbench does, with the target it failed on."""
    if opening.open_path(path):
        st.session_state.targets = [target]
        st.session_state.survey_go = True


def _failed_on(cell_by_target: dict) -> str | None:
    """The first target that refuses the model after the fixes (else the first that cannot confirm or failed)."""
    for wanted in ("rejects", "cannot confirm", "error"):
        for t, cell in cell_by_target.items():
            if final_outcome(cell) == wanted:
                return t
    return None


sidebar.render()
s = st.session_state
if s.pop("survey_go", False):
    st.switch_page("views/workbench.py")

st.title("Survey")
st.caption(
    "Every model of a folder against every target, as `onnx-surgery survey PATH… -t T … -o OUT` does: open its "
    "report.json, or run one here on a folder under the models folder."
)
if s.get("error"):
    st.error(s.error)

with st.expander("Open a report", expanded="survey_report" not in s):
    up = st.file_uploader("report.json", type=["json"], key="survey_upload")
    if up is not None and s.get("survey_upload_seen") != (up.name, up.size):
        s.survey_upload_seen = (up.name, up.size)
        _load_report(up.getvalue(), up.name)
    if session.models_dir() is not None:
        path = st.text_input(f"or a report.json under {session.models_dir()}", key="survey_report_path")
        if path and st.button("Open report", key="survey_open_report"):
            p = _under_models_dir(path)
            if p is not None:
                try:
                    _load_report(p.read_bytes(), path)
                except OSError as exc:
                    s.survey_error = f"{path}: {exc.strerror}"

if session.models_dir() is not None:
    with st.expander("Run a survey", expanded="survey_report" not in s):
        folder = st.text_input(f"Folder under {session.models_dir()}", key="survey_folder")
        targets = st.multiselect(
            "Targets", checks.target_options(), default=checks.default_targets(), key="survey_targets"
        )
        fix = st.checkbox("Fix what a target rejects (--fix)", key="survey_fix")
        workers = st.number_input("Workers", 1, 16, 1, key="survey_workers")
        if st.button("Run survey", key="survey_run", type="primary", disabled=not (folder and targets)):
            p = _under_models_dir(folder)
            if p is not None:
                bar = st.progress(0.0, text="starting")

                def progress(p_):
                    bar.progress(p_.done / max(p_.total, 1), text=p_.line())

                try:
                    result = survey(
                        SurveyRequest([str(p)], list(targets), fix=fix, workers=int(workers)),
                        progress=progress,
                    )
                    s.survey_report, s.survey_error = result.report, None
                except SurveyInputError as exc:
                    s.survey_error = str(exc)

if s.get("survey_error"):
    st.error(s.survey_error)

report = s.get("survey_report")
if report:
    targets = report["targets"]
    models = report["models"]
    fixed = report.get("fix")
    st.subheader(f"{len(models)} models × {len(targets)} targets")
    cols = st.columns(max(len(targets), 1))
    for col, t in zip(cols, targets):
        summary = report["summary"]["targets"].get(t, {})
        after = summary.get("after", {})
        if fixed and summary.get("fixed"):
            col.metric(
                t, f"{summary['repaired']}/{summary['fixed']} repaired", f"{after.get('accepts', 0)} accept"
            )
        else:
            col.metric(t, f"{after.get('accepts', 0)}/{summary.get('models', 0)} accept")
    chosen = st.selectbox("Show", ["every model", *[f"refused by a target: {o}" for o in OUTCOMES[1:]]])
    wanted = None if chosen == "every model" else chosen.split(": ", 1)[1]
    shown = [
        m for m in models if wanted is None or any(final_outcome(c) == wanted for c in m["targets"].values())
    ]
    rows = []
    for m in shown:
        row = {"model": m["name"], "nodes": m.get("nodes")}
        for t in targets:
            cell = m["targets"].get(t)
            if cell is None:
                row[t] = "not run"
            elif cell.get("fix"):
                row[t] = f"{cell['outcome']} → {final_outcome(cell)} ({len(cell['fix']['steps'])} steps)"
            else:
                row[t] = cell["outcome"]
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["model", "nodes", *targets])

    def colour(value):
        final = str(value).split(" → ")[-1].split(" (")[0]
        return f"background-color: {BACKGROUNDS[final]}; color: {COLOURS[final]}" if final in COLOURS else ""

    st.dataframe(frame.style.map(colour, subset=list(targets)), hide_index=True, key="survey_matrix")
    top = report["summary"].get("top_reasons", [])[:10]
    if top:
        st.markdown("**Top refusal reasons**")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "models": r["models"],
                        "the backend's words": r["reason"],
                        "op types": ", ".join(r["op_types"]),
                        "targets": ", ".join(r["targets"]),
                        "rules that answer": ", ".join(r["rules"]) or "none",
                    }
                    for r in top
                ]
            ),
            hide_index=True,
            key="survey_reasons",
        )
    failing = [(k, m, _failed_on(m["targets"])) for k, m in enumerate(shown)]
    failing = [(k, m, t) for k, m, t in failing if t]
    if failing:
        st.markdown("**Open in the workbench** (with the target it failed on)")
        if session.models_dir() is None:
            st.caption("Opening server paths is off: start the app with --models-dir DIR holding the models.")
        for k, m, t in failing[:MAX_BUTTONS]:
            st.button(
                f"{m['name']} — {t}: {final_outcome(m['targets'][t])}",
                key=f"survey-open-{k}",
                on_click=_open,
                args=(m["path"], t),
                disabled=session.models_dir() is None,
            )
        if len(failing) > MAX_BUTTONS:
            st.caption(f"{len(failing) - MAX_BUTTONS} more: narrow the list with Show")
