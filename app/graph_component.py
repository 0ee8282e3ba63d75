"""The graph view: a Streamlit v2 component (no build step) drawing with vis-network, inlined from the pyvis
package (never a CDN). Positions come from surgery.view; a click on a node reaches Python as `selected`."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import streamlit as st

HTML = '<div class="graph-root"><div class="graph-canvas" data-testid="graph-canvas"></div></div>'
CSS = """
.graph-root { border: 1px solid #d5dbe1; border-radius: 6px; background: #fbfcfd; }
.graph-canvas { width: 100%; height: 600px; }
"""
JS_BODY = """
export default function(component) {
  const { data, setStateValue, parentElement } = component;
  const el = parentElement.querySelector('.graph-canvas');
  if (!data || !el) return;
  const nodes = data.nodes.map(n => ({
    id: n.id, label: n.label, title: n.title, x: n.x, y: n.y, shape: n.shape,
    size: n.size, color: { background: n.color, border: n.id === data.selected ? '#1f5fbf' : '#5b6875',
      highlight: { background: n.color, border: '#1f5fbf' } },
    borderWidth: n.id === data.selected ? 4 : 1,
    font: { size: n.kind === 'constant' ? 9 : 13, color: n.kind === 'op' && n.status !== 'not checked' && n.status !== 'unknown' ? '#ffffff' : '#1d2733' },
  }));
  const edges = data.edges.map((e, i) => ({ id: i, from: e.from, to: e.to, arrows: 'to' }));
  const network = new globalThis.vis.Network(el,
    { nodes: new globalThis.vis.DataSet(nodes), edges: new globalThis.vis.DataSet(edges) },
    { physics: false, layout: { improvedLayout: false },
      edges: { smooth: false, color: '#9aa5b1', width: 1 },
      interaction: { hover: true, hideEdgesOnDrag: true, hideEdgesOnZoom: nodes.length > 2000, tooltipDelay: 150 },
      nodes: { margin: 8 } });
  el.setAttribute('data-node-count', String(nodes.length));
  el.setAttribute('data-selected', data.selected || '');
  globalThis.__onnxSurgeryNetwork = network;
  network.once('afterDrawing', () => { el.setAttribute('data-drawn', '1'); });
  requestAnimationFrame(() => el.setAttribute('data-drawn', '1'));
  if (data.selected && nodes.some(n => n.id === data.selected)) {
    network.selectNodes([data.selected]);
    network.focus(data.selected, { scale: 1.0 });
  } else {
    network.fit();
  }
  network.on('click', (params) => {
    if (params.nodes && params.nodes.length) setStateValue('selected', params.nodes[0]);
  });
  return () => network.destroy();
}
"""


@cache
def _vis_source() -> str:
    import pyvis

    root = Path(pyvis.__file__).parent
    path = next(iter(sorted(root.glob("lib/vis-9*/vis-network.min.js"), reverse=True)))
    return path.read_text()


@cache
def _component():
    return st.components.v2.component(
        "onnx_surgery_graph", html=HTML, css=CSS, js=_vis_source() + "\n" + JS_BODY
    )


def graph(payload: dict, key: str = "graph", on_select=None):
    """Draw the graph; returns the component result (`.selected` is the clicked node id, if any)."""
    return _component()(data=payload, key=key, on_selected_change=on_select or (lambda: None))
