"""The app's server process: `python -m surgery.cli.serve run APP [streamlit options]` is `streamlit run`, after
the server has imported what every first page needs.

A Streamlit server imports a page's modules on the first page it serves: onnx, numpy, the Workbench's own modules,
and, when the first graph is drawn, pandas and pyarrow (Streamlit's component serialization looks for data frames
in the payload). On this project's 2-core machine that is ~1 s of the first page, every time a server starts
(bench/app_open.py). Importing them here, before the server answers, moves that second to the server's start,
where `onnx-surgery app` prints its address: a page, the first one included, then only does the page's work.

Streamlit's full collection after every script run (`runner.postScriptGC`) is turned off: with a 100k-node model's
facts cached it walks them after each rerun (0.07-0.13 s here, more in a busy server), and the next rerun, the
click a user makes right after a search, waits for it. Python's own generational collector still runs.

The start model (`onnx-surgery app MODEL`) is read ahead, with its facts and first drawing, in a thread of the
server while it starts and the browser loads the page (app/graph_facts.py, `read_ahead`)."""

from __future__ import annotations

import os
import sys


def preload() -> None:
    from surgery.resources import APP_DIR

    sys.path.insert(0, str(APP_DIR))  # the pages import the app's modules from app/ (the same names, once)
    import graph_component  # noqa: F401
    import graph_facts  # noqa: F401  (the Workbench's modules: onnx, numpy, the library)
    import graph_view  # noqa: F401
    import pandas  # noqa: F401  (Streamlit's component serialization imports both on the first graph drawn)
    import pyarrow  # noqa: F401
    import sidebar  # noqa: F401
    import streamlit.delta_generator as dg
    import verdicts  # noqa: F401

    import surgery.backends.tensorrt.predictor  # noqa: F401  (the sidebar lists its versions; it reads yaml tables)
    import surgery.view.draw  # noqa: F401

    # Streamlit's first element in a process asks whether it runs in a REPL, to warn there: `inspect.stack()`,
    # which resolves the path of every loaded module (0.2-0.35 s of the first page here). This is `streamlit run`,
    # never a REPL: the question is marked asked.
    if hasattr(dg, "_use_warning_has_been_displayed"):
        dg._use_warning_has_been_displayed = True


def main() -> None:
    import gc

    preload()
    # what the server imported lives as long as it does: out of the collector's way (each full collection would
    # walk it again; gc.freeze's documented use)
    gc.collect()
    gc.freeze()
    from streamlit.web import bootstrap, cli

    start = os.environ.get("ONNX_SURGERY_START_MODEL")
    on_start = getattr(bootstrap, "_on_server_start", None)
    if start and on_start is not None:
        # read once the server answers, while the browser loads the page (read while the server starts, the
        # model held the interpreter's lock and the server answered 1 s later); app/graph_facts.py says how the page
        # uses it. `_on_server_start` is Streamlit's hook that bootstrap.run calls once the server listens:
        # without it, nothing is read ahead.
        import graph_facts

        def started(server):
            on_start(server)
            graph_facts.read_ahead(start)

        bootstrap._on_server_start = started

    args = sys.argv[1:]
    if args[:1] == ["run"] and not any(a.startswith("--runner.postScriptGC") for a in args):
        args.insert(1, "--runner.postScriptGC=false")
    sys.argv = ["streamlit", *args]
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main()
