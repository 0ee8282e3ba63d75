"""The graph view: a Streamlit v2 component (no build step) drawing with vis-network, inlined from the pyvis
package (never a CDN). Positions come from surgery.view; a click on a node reaches Python as `selected`."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import streamlit as st

HTML = '<div class="graph-root"><div class="graph-canvas" data-testid="graph-canvas"></div></div>'
CSS = """
.graph-root { border: 1px solid #d5dbe1; border-radius: 6px; background: #fbfcfd; }
.graph-canvas { width: 100%; height: 640px; }
"""
# A click sends {ref, at}: `at` changes on every click, so clicking the same node again still reaches Python.
JS_BODY = """
export default function(component) {
  const { data, setStateValue, parentElement } = component;
  const el = parentElement.querySelector('.graph-canvas');
  if (!data || !el) return;
  // Styles live in vis-network groups (one per kind and status), so a node is only id, label, place, group:
  // 10k nodes parse and draw without 10k option objects.
  const groups = {};
  const refs = new Map();
  const nodes = data.nodes.map(n => {
    const g = n.kind + ':' + n.status + ':' + n.color;
    if (!groups[g]) {
      const onColor = (n.kind === 'op' || n.kind === 'group') && (n.status === 'supported' || n.status === 'rejected');
      groups[g] = {
        shape: n.shape, size: n.size,
        color: { background: n.color, border: '#5b6875',
                 highlight: { background: n.color, border: '#123f8c' }, hover: { background: n.color, border: '#123f8c' } },
        font: { size: n.kind === 'constant' ? 9 : n.kind === 'input' ? 10 : 13, color: onColor ? '#ffffff' : '#1d2733' },
      };
    }
    refs.set(n.id, n.ref);
    const node = { id: n.id, label: n.label, title: n.title, x: n.x, y: n.y, group: g };
    if (n.ref && n.ref === data.selected) {
      node.borderWidth = 3;
      node.shapeProperties = { borderDashes: [6, 3] };
      node.color = { background: n.color, border: '#123f8c', highlight: { background: n.color, border: '#123f8c' },
                     hover: { background: n.color, border: '#123f8c' } };
    }
    return node;
  });
  const edges = data.edges.map((e, i) => ({ id: i, from: e.from, to: e.to }));
  const network = new globalThis.vis.Network(el,
    { nodes: new globalThis.vis.DataSet(nodes), edges: new globalThis.vis.DataSet(edges) },
    { physics: false, layout: { improvedLayout: false }, groups: groups,
      edges: { smooth: false, color: { color: '#9aa5b1', highlight: '#123f8c' }, width: 1,
               arrows: { to: { enabled: true, scaleFactor: 0.6 } } },
      interaction: { hover: nodes.length < 5000, hideEdgesOnDrag: true, hideEdgesOnZoom: nodes.length > 2000,
                     tooltipDelay: 150, keyboard: false },
      nodes: { margin: 8, borderWidth: 1, borderWidthSelected: 3 } });
  el.setAttribute('data-node-count', String(nodes.length));
  el.setAttribute('data-selected', data.selected || '');
  globalThis.__onnxSurgeryNetwork = network;
  network.once('afterDrawing', () => { el.setAttribute('data-drawn', '1'); });
  requestAnimationFrame(() => el.setAttribute('data-drawn', '1'));
  const chosen = data.nodes.filter(n => n.ref && n.ref === data.selected).map(n => n.id);
  if (chosen.length) network.selectNodes(chosen, false);
  if (chosen.length && nodes.length > 60) {
    network.focus(chosen[0], { scale: 0.9 });
  } else {
    network.fit({ maxZoomLevel: 1.1 });
  }
  network.on('click', (params) => {
    if (!params.nodes || !params.nodes.length) return;
    const ref = refs.get(params.nodes[0]);
    if (ref) setStateValue('selected', { ref: ref, at: Date.now() });
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
    """Draw the graph; returns the component result (`.selected` is `{ref, at}` for the last click: `ref` is a
    node key or ``group:<scope>``, `at` a timestamp)."""
    return _component()(data=payload, key=key, on_selected_change=on_select or (lambda: None))
