"""The graph view: a Streamlit v2 component (no build step) drawing with vis-network, inlined from the pyvis
package (never a CDN), and app/static/graph.js (edges along the layout's routes, tooltips, minimap, first view,
keys). Positions come from surgery.view; a click on a node reaches Python as `selected`."""

from __future__ import annotations

import json
import weakref
from functools import cache
from pathlib import Path

import streamlit as st

STATIC = Path(__file__).resolve().parent / "static"
HTML = """<div class="graph-root" data-testid="graph-root">
<div class="graph-canvas" data-testid="graph-canvas"></div>
<div class="graph-tools" role="toolbar" aria-label="graph view">
<button type="button" data-act="fit" title="show the whole graph (f)">Fit</button>
<button type="button" data-act="real" title="labels at their real size">1:1</button>
<button type="button" data-act="out" title="zoom out (-, or Ctrl + wheel)">−</button>
<button type="button" data-act="in" title="zoom in (+, or Ctrl + wheel)">+</button>
<span class="graph-zoom"></span>
<button type="button" data-act="shapes" aria-pressed="true" title="tensor dtypes and shapes on edges">Shapes</button>
</div>
<canvas class="graph-minimap" width="190" height="130" title="overview: click or drag to move"></canvas>
<div class="graph-tooltip" role="tooltip"></div>
<div class="graph-hint">wheel: scroll · Ctrl+wheel: zoom · drag: pan · n / p: next / previous rejected</div>
</div>"""
CSS = """
.graph-root { position: relative; border: 1px solid #d5dbe1; border-radius: 6px; background: #fbfcfd;
  height: 640px; overflow: hidden; outline: none; }
.graph-root:focus-visible { border-color: #1f5fbf; }
.graph-canvas { position: absolute; inset: 0; }
.graph-tools { position: absolute; top: 8px; left: 8px; display: flex; gap: 4px; align-items: center;
  font: 12px sans-serif; }
.graph-tools button { font: 12px sans-serif; padding: 3px 8px; border: 1px solid #c3ccd6; border-radius: 4px;
  background: #ffffffee; color: #1d2733; cursor: pointer; }
.graph-tools button:hover { border-color: #1f5fbf; color: #1f5fbf; }
.graph-tools button[aria-pressed="true"] { background: #e7effb; border-color: #1f5fbf; }
.graph-zoom { min-width: 3.2em; text-align: center; color: #55606c; }
.graph-minimap { position: absolute; right: 8px; bottom: 8px; border: 1px solid #c3ccd6; border-radius: 4px;
  background: #fff; cursor: pointer; width: min(190px, 26%); height: auto; }
.graph-tooltip { position: absolute; display: none; z-index: 5; max-width: 560px; padding: 6px 9px;
  background: #1d2733f2; color: #f4f6f8; border-radius: 5px; font: 12px/1.45 ui-monospace, monospace;
  white-space: pre-wrap; word-break: break-all; pointer-events: none; box-shadow: 0 2px 8px #0003; }
.graph-hint { position: absolute; left: 8px; bottom: 6px; font: 11px sans-serif; color: #6b7785;
  pointer-events: none; background: #fbfcfdea; padding: 1px 5px; border-radius: 3px; transition: opacity 0.4s; }
.graph-root.graph-used .graph-hint { opacity: 0; }
"""


@cache
def _vis_source() -> str:
    # find_spec, not `import pyvis`: only its bundled file is read, and importing the package (IPython, networkx,
    # jinja2) costs ~0.6 s on the first page of a fresh server
    from importlib.util import find_spec

    root = Path(find_spec("pyvis").origin).parent
    path = next(iter(sorted(root.glob("lib/vis-9*/vis-network.min.js"), reverse=True)))
    return path.read_text()


@cache
def js_body() -> str:
    return (STATIC / "graph.js").read_text()


JS_BODY = js_body()  # the benchmark draws with exactly this


@cache
def _component():
    return st.components.v2.component(
        "onnx_surgery_graph", html=HTML, css=CSS, js=_vis_source() + "\n" + js_body()
    )


# A drawing travels in three elements, each re-sent only when it changes: Streamlit sends an element identical to
# the one the browser holds as a reference to it (its message cache). The shape (positions, routes, labels, with
# vis-network and graph.js: 1.2 MB on a 1B export) changes with the layout; the paint (the verdicts' colours and
# hover texts, ~0.4 MB there) when a check comes in; the pick (the selected node) with a click, a search hit or
# Next rejected. graph.js draws once a shape has its paint. The two small elements show nothing and hide their
# own rows.
PAINTED = ("color", "status", "title", "badge")  # what a node's verdicts change (surgery.view.draw.paint)
PART_JS = """export default function ({ data, parentElement }) {
  const row = parentElement.getRootNode().host?.closest('[data-testid="stElementContainer"]');
  if (row) row.style.display = 'none';
  if (!data) return;
  if (data instanceof Uint8Array) data = JSON.parse(new TextDecoder().decode(data));  // the paint, as bytes
  const parts = (globalThis.__onnxSurgeryParts = globalThis.__onnxSurgeryParts || { pick: {}, paint: {} });
  parts[data.part][data.view] = data;
  const view = (globalThis.__onnxSurgeryViews || {})[data.view];
  if (view) view[data.part](data);
}"""


@cache
def _part_component():
    return st.components.v2.component("onnx_surgery_graph_part", js=PART_JS)


def parts(payload: dict, key: str, report_drawn: bool = False) -> tuple[dict, dict, dict]:
    """A surgery.view payload as its three elements' data: (shape, paint, pick). `key` names the drawing (the
    graph element's key: two side by side have their own); the paint's arrays follow the shape's nodes."""
    nodes = payload["nodes"]
    shape = {k: v for k, v in payload.items() if k not in ("selected", "start")}
    shape["nodes"] = [{k: v for k, v in n.items() if k not in PAINTED} for n in nodes]
    shape["view"] = key
    paint = {"part": "paint", "view": key, "layout_id": payload["layout_id"], "start": payload.get("start")}
    paint["report_drawn"] = report_drawn  # it changes with the checks pending, as the verdicts do
    paint.update({f: [n[f] for n in nodes] for f in PAINTED})
    return shape, paint, _pick(key, payload.get("selected"))


def _pick(key: str, selected: str | None) -> dict:
    return {"part": "pick", "view": key, "selected": selected}


# (id(view), key, report_drawn) -> (weak ref to the view, shape, paint, layout id); an entry goes with its view
_WIRE: dict[tuple, tuple] = {}


def _wire(view, key: str, report_drawn: bool) -> tuple[bytes, bytes, str]:
    """The shape's and the paint's data as JSON bytes, encoded once per view object (the app's views are cached
    per model version, window and verdicts): a rerun that draws the same view (a click) sends them as they were,
    and Streamlit, which hashes each element, finds the browser holds them. Encoding them every run was a third
    of a click's run on a 1B export (1.6 MB)."""
    slot = (id(view), key, report_drawn)
    hit = _WIRE.get(slot)
    if hit is not None and hit[0]() is view:
        return hit[1:]
    payload = view.payload()
    shape, paint, _ = parts(payload, key, report_drawn)
    wire = (_json(shape), _json(paint), payload["layout_id"])
    _WIRE[slot] = (weakref.ref(view, lambda _, slot=slot: _WIRE.pop(slot, None)), *wire)
    return wire


def _json(data: dict) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def graph(view, selected: str | None = None, key: str = "graph", on_select=None, report_drawn: bool = False):
    """Draw `view` (a surgery.view View, sent as `parts`) with `selected` picked. Returns the component result
    and the drawn layout's id (`.selected` is `{ref, at}` for the last click: `ref` is a node key or
    ``group:<scope>``, `at` a timestamp). `on_select` runs
    before the page when a click comes in (`st.session_state[key]["selected"]` holds it). With `report_drawn`
    (the page's checks wait for it; a report is a rerun, so only then), `.drawn` becomes the layout id once it
    is drawn on screen."""
    shape, paint, layout_id = _wire(view, key, report_drawn)
    result = _component()(
        data=shape,
        key=key,
        on_selected_change=on_select or (lambda: None),
        on_drawn_change=lambda: None,
    )
    _part_component()(data=paint, key=f"{key}-paint")
    _part_component()(data=_pick(key, selected), key=f"{key}-pick")
    return result, layout_id
