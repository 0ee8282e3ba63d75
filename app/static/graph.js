// The graph view, drawn with vis-network (inlined before this file from the pyvis package, never a CDN).
// Positions and edge routes come from surgery.view (Python); this file only paints and listens:
// - nodes are vis-network nodes (style per kind and status in vis groups: 10k nodes without 10k option objects);
// - edges are drawn here on the canvas along their routes (dot's splines or the builtin polylines), with the
//   tensor's shape as a label, so they go around nodes as the layout planned;
// - the first view is readable: labels at >= 11 px on screen, centred on the selected node, else the first
//   rejected one, else the graph's inputs; Fit and the minimap give the overview;
// - wheel scrolls, Ctrl/⌘ + wheel zooms, drag pans (as in Netron); keys: n / p next / previous rejected or cannot-confirm,
//   f fit, + / - zoom, Esc hides the tooltip;
// - hover shows a DOM tooltip (plain text: name, op, domain, typed inputs and outputs, every target's verdict);
// - while the layout stays the same (same layout_id), a rerun only recolours: the viewport stays;
// - this element brings the drawing's shape; its paint (verdict colours, hover texts) and pick (the selected
//   node) come in small elements of their own (graph_component.parts), so that a check or a click does not
//   re-send the shape: they reach the view registered under the drawing's key.
export default function (component) {
  const { data: raw, setStateValue, parentElement } = component;
  const root = parentElement.querySelector('.graph-root');
  const el = parentElement.querySelector('.graph-canvas');
  if (!raw || !el || !root) return;
  // the shape comes as JSON bytes (encoded once per drawing on the server), read again only when they change
  if (raw !== el.__raw) el.__shape = raw instanceof Uint8Array ? JSON.parse(new TextDecoder().decode(raw)) : raw;
  el.__raw = raw;
  const data = el.__shape;
  el.__send = setStateValue;
  const views = (globalThis.__onnxSurgeryViews = globalThis.__onnxSurgeryViews || {});
  views[data.view || 'graph'] = {
    pick: (d) => { if (el.__st) select(el.__st, d.selected || null); },
    paint: () => show(root, el),
  };
  show(root, el);
  return undefined;  // the network lives on the element: a rerun with the same layout keeps the viewport
}

function parts(kind) {
  const all = (globalThis.__onnxSurgeryParts = globalThis.__onnxSurgeryParts || { pick: {}, paint: {} });
  return all[kind];
}

function show(root, el) {
  // drawn once the shape has its paint (the paint's element comes right after the shape's)
  const shape = el.__shape, paint = parts('paint')[shape.view || 'graph'];
  if (!paint || paint.layout_id !== shape.layout_id) return;
  const data = painted(shape, paint);
  const st = el.__st;
  if (st && st.layoutId === data.layout_id) {
    st.send = el.__send;
    if (st.shape !== shape) reshape(st, data);
    st.shape = shape;
    update(st, data);
    return;
  }
  if (st) st.destroy();
  el.__st = build(root, el, data, el.__send);
  el.__st.shape = shape;
}

function reshape(st, data) {
  // a new shape with the same boxes at the same places (the layout id): what is written on them or on the edges
  // may differ (a step that fixed an input's shape: every edge's shape below it)
  st.edges = data.edges.map((e) => edgeGeometry(e, data.curved));
  st.labelSpots = null;
  const relabelled = data.nodes
    .filter((n) => st.byId.has(n.id) && st.byId.get(n.id).label !== n.label)
    .map((n) => ({ id: n.id, label: n.label }));
  if (relabelled.length) st.nodes.update(relabelled);
}

function painted(shape, paint) {
  const nodes = shape.nodes.map((n, i) => ({
    ...n, color: paint.color[i], status: paint.status[i], title: paint.title[i], badge: paint.badge[i],
  }));
  return { ...shape, nodes, start: paint.start, report_drawn: paint.report_drawn };
}

const FONT = { op: 14, group: 14, constant: 11, input: 12, output: 12 };
// vertical margins that make each kind's box as tall as the layout reserved (cheaper than heightConstraint)
const MARGIN_Y = { op: 8, group: 11, constant: 5, input: 6, output: 6 };
const ON_DARK = new Set(['supported', 'rejected']);
const MIN_LABEL_PX = 11;

function groupName(n) { return n.kind + ':' + n.status + ':' + n.color + ':' + (n.diff || ''); }

function groupStyle(n) {
  const dark = (n.kind === 'op' || n.kind === 'group') && ON_DARK.has(n.status);
  const border = n.kind === 'constant' ? '#9aa7b4' : '#4b5866';
  return {
    shape: 'box',
    color: { background: n.color, border: border,
             highlight: { background: n.color, border: '#123f8c' }, hover: { background: n.color, border: '#123f8c' } },
    font: { size: FONT[n.kind] || 13, color: dark ? '#ffffff' : '#1d2733', face: 'arial' },
    margin: { top: MARGIN_Y[n.kind] || 6, bottom: MARGIN_Y[n.kind] || 6, left: 8, right: 8 },
    shapeProperties: { borderRadius: n.kind === 'input' || n.kind === 'output' ? 12 : n.kind === 'group' ? 6 : 3 },
    borderWidth: n.kind === 'group' ? 2 : 1,
    ...(n.diff === 'removed' ? {  // only in the before model: struck out in red
      color: { background: '#fbe9e9', border: '#d64545', highlight: { background: '#fbe9e9', border: '#123f8c' },
               hover: { background: '#fbe9e9', border: '#123f8c' } },
      font: { size: FONT[n.kind] || 13, color: '#9b2c2c', face: 'arial' },
      shapeProperties: { borderDashes: [5, 3], borderRadius: 3 }, borderWidth: 2,
    } : n.diff === 'added' ? { borderWidth: 3, color: { background: n.color, border: '#0b6b3a',
      highlight: { background: n.color, border: '#123f8c' }, hover: { background: n.color, border: '#123f8c' } } } : {}),
  };
}

function build(root, el, data, send) {
  const st = { root, el, send, layoutId: data.layout_id, data, byId: new Map(), order: [], listeners: [], observers: [] };
  st.view = data.view || 'graph';
  st.selected = (parts('pick')[st.view] || {}).selected || null;
  st.firstPick = !st.selected;  // a selection that comes after the first view gets the first view's placing
  const groups = {};
  const nodes = data.nodes.map((n) => {
    const g = groupName(n);
    if (!groups[g]) groups[g] = groupStyle(n);
    st.byId.set(n.id, n);
    // the box fills the width the layout reserved (an estimate at least as wide as the label: no wrapping)
    return { id: n.id, label: n.label, x: n.x, y: n.y, group: g, widthConstraint: { minimum: n.w } };
  });
  // every verdict's style for ops and groups from the start: a recolour then finds its styles there (vis-network
  // goes over every node when its groups are set: ~0.2 s for 1.3k boxes)
  for (const kind of ['op', 'group']) {
    for (const { status, color } of data.legend || []) {
      const n = { kind, status, color, diff: '' };
      if (!groups[groupName(n)]) groups[groupName(n)] = groupStyle(n);
    }
  }
  st.order = data.nodes.filter((n) => n.kind === 'op' || n.kind === 'group').map((n) => n.id);
  st.edges = data.edges.map((e) => edgeGeometry(e, data.curved));
  st.nodes = new globalThis.vis.DataSet(nodes);
  st.groups = groups;
  const many = nodes.length;
  const network = new globalThis.vis.Network(el, { nodes: st.nodes, edges: new globalThis.vis.DataSet([]) }, {
    physics: false,
    layout: { improvedLayout: false },
    groups: groups,
    interaction: { hover: many < 20000, hoverConnectedEdges: false, keyboard: false, tooltipDelay: 3600000,
                   selectConnectedEdges: false, zoomSpeed: 0.6 },
    nodes: { margin: { top: 4, bottom: 4, left: 8, right: 8 }, borderWidthSelected: 3 },
  });
  st.network = network;
  globalThis.__onnxSurgeryNetwork = network;
  globalThis.__onnxSurgeryGraph = st;
  network.on('beforeDrawing', (ctx) => drawEdges(st, ctx));
  network.on('afterDrawing', (ctx) => {
    drawBadges(st, ctx); drawStrikes(st, ctx); drawMinimapView(st); el.setAttribute('data-drawn', '1');
    reportDrawn(st);
  });
  network.on('zoom', () => noteScale(st));
  network.on('dragEnd', () => noteScale(st));
  network.on('click', (p) => {
    hideTip(st);
    st.firstPick = false;
    const n = p.nodes && p.nodes.length ? st.byId.get(p.nodes[0]) : null;
    if (n && n.ref) st.send('selected', { ref: n.ref, at: Date.now() });
    else network.selectNodes([...st.selectedIds], false);  // the background or a box with no node behind it: the selection stays
  });
  network.on('hoverNode', (p) => showTip(st, p.node, p.pointer.DOM));
  network.on('blurNode', () => hideTip(st));
  network.on('dragStart', () => { hideTip(st); st.moved = true; });
  tools(st);
  minimap(st);
  wheelAndKeys(st);
  update(st, data, true);
  whenLaidOut(st, () => {
    fitHeight(st);
    network.setSize('100%', '100%');  // now, not at vis-network's next resize callback: the first view needs it
    initialView(st, st.data);  // the latest data: verdicts may have come in while it waited
  });
  st.ready = true;
  requestAnimationFrame(() => el.setAttribute('data-drawn', '1'));
  st.destroy = () => {
    for (const [target, type, fn, opts] of st.listeners) target.removeEventListener(type, fn, opts);
    for (const o of st.observers) o.disconnect();
    network.destroy();
  };
  return st;
}

function reportDrawn(st) {
  // once per layout and page, when the app asks (checks are pending): it starts them when the drawing is on
  // screen (their reruns would hold the first drawing up)
  const seen = (globalThis.__onnxSurgeryDrawn = globalThis.__onnxSurgeryDrawn || new Set());
  if (!st.data.report_drawn || !st.el.clientWidth || seen.has(st.layoutId)) return;
  seen.add(st.layoutId);
  st.send('drawn', st.layoutId);
}

function listen(st, target, type, fn, opts) {
  target.addEventListener(type, fn, opts);
  st.listeners.push([target, type, fn, opts]);
}

function whenLaidOut(st, fn) {
  // Streamlit can hand the component its element before the element is in the page (a container whose content
  // is being replaced): sizes read then are 0, and a first view centred in a 0-pixel canvas puts the node it
  // centres on at the canvas's left edge. Run `fn` once the element has its size.
  if (st.root.isConnected && st.el.clientWidth > 0) { fn(); return; }
  const ro = new ResizeObserver(() => {
    if (!st.root.isConnected || !st.el.clientWidth) return;
    ro.disconnect();
    fn();
  });
  ro.observe(st.root);
  st.observers.push(ro);
}

function fitHeight(st) {
  // the canvas takes the page's height below where it starts (the graph is the main thing on the page)
  const scroller = scrollParent(st.root);
  const size = () => {
    const top = st.root.getBoundingClientRect().top + (scroller ? scroller.scrollTop - scroller.getBoundingClientRect().top : window.scrollY);
    const h = Math.max(460, window.innerHeight - top - 18), was = parseFloat(st.root.style.height || '0');
    if (Math.abs(was - h) <= 1) return;
    // vis-network rescales the view by the canvas's change in size: keep the zoom (labels stay as readable as
    // they were) and what is at the canvas's top left (the first view puts the graph's inputs at its top)
    const net = was > 0 ? st.network : null;
    const scale = net && net.getScale(), corner = net && net.DOMtoCanvas({ x: 0, y: 0 });
    st.root.style.height = h + 'px';
    if (net) {
      net.setSize('100%', '100%');
      const position = { x: corner.x + st.el.clientWidth / 2 / scale, y: corner.y + st.el.clientHeight / 2 / scale };
      net.moveTo({ position, scale, animation: false });
      noteScale(st);
    }
  };
  size();
  listen(st, window, 'resize', size);
  // what is above the canvas can grow after it is sized (a caption, the legend's counts, a wrapped row): the
  // canvas would then run past the window's bottom. Checked twice a second (one layout read), no event says so.
  const timer = setInterval(() => { if (st.root.isConnected) size(); }, 500);
  st.observers.push({ disconnect: () => clearInterval(timer) });
}

function scrollParent(node) {
  // the page's scrolling element, across the component's shadow root
  for (let n = node.parentNode || node.host; n; n = n.parentNode || n.host) {
    if (n.nodeType !== 1) continue;
    const oy = getComputedStyle(n).overflowY;
    if ((oy === 'auto' || oy === 'scroll') && n.scrollHeight > n.clientHeight) return n;
  }
  return null;
}

function edgeGeometry(e, curved) {
  const p = e.pts;
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (let i = 0; i < p.length; i += 2) {
    x0 = Math.min(x0, p[i]); x1 = Math.max(x1, p[i]); y0 = Math.min(y0, p[i + 1]); y1 = Math.max(y1, p[i + 1]);
  }
  return { from: e.from, to: e.to, pts: p, curved: curved && p.length >= 8, label: e.label || '', box: [x0, y0, x1, y1] };
}

function drawEdges(st, ctx) {
  if (!st.ready) return;  // nothing before the first view is set (vis-network first fits the whole graph)
  const net = st.network;
  const scale = net.getScale();
  const a = net.DOMtoCanvas({ x: 0, y: 0 });
  const b = net.DOMtoCanvas({ x: st.el.clientWidth, y: st.el.clientHeight });
  const sel = st.selectedIds || new Set();
  const hot = [];
  ctx.save();
  ctx.lineWidth = 1.2 / Math.max(scale, 0.25);
  ctx.strokeStyle = '#8f9aa6';
  ctx.fillStyle = '#8f9aa6';
  ctx.beginPath();
  const heads = [];
  const showLabels = st.data.shapes && scale * 10 >= 7;
  for (const e of st.edges) {
    if (e.box[2] < a.x || e.box[0] > b.x || e.box[3] < a.y || e.box[1] > b.y) continue;
    if (sel.has(e.from) || sel.has(e.to)) { hot.push(e); continue; }
    path(ctx, e);
    heads.push(e);
  }
  ctx.stroke();
  for (const e of heads) arrow(ctx, e, scale);
  if (hot.length) {
    ctx.strokeStyle = '#1f5fbf'; ctx.fillStyle = '#1f5fbf'; ctx.lineWidth = 2.4 / Math.max(scale, 0.25);
    ctx.beginPath();
    for (const e of hot) path(ctx, e);
    ctx.stroke();
    for (const e of hot) arrow(ctx, e, scale);
  }
  if (showLabels) {
    ctx.font = LABEL_FONT;
    ctx.textBaseline = 'top';
    if (!st.labelSpots) st.labelSpots = placeLabels(st, ctx);
    for (const l of st.labelSpots) {
      if (l.x + l.w < a.x || l.x > b.x || l.y + LABEL_H < a.y || l.y > b.y) continue;
      ctx.fillStyle = 'rgba(251,252,253,0.85)';
      ctx.fillRect(l.x - 1, l.y - 1, l.w + 2, LABEL_H);
      ctx.fillStyle = '#55606c';
      ctx.fillText(l.text, l.x, l.y);
    }
  }
  ctx.restore();
}

const LABEL_FONT = '10px arial', LABEL_H = 12, LABEL_CELL = 64;

function placeLabels(st, ctx) {
  // Where each tensor's shape label goes, once per layout (canvas units: the same at every zoom). A label
  // starts beside its edge just below the producer; where that place is taken (another label, a node: a
  // fan-out's edges all leave from one point) it moves along its edge, or to the edge's other side; a label
  // with no free place within reach is left out (the hover tooltip has every shape).
  const taken = new Map();  // grid cell -> rectangles in it
  const cells = (r, fn) => {
    for (let cx = Math.floor(r[0] / LABEL_CELL); cx <= Math.floor(r[2] / LABEL_CELL); cx++) {
      for (let cy = Math.floor(r[1] / LABEL_CELL); cy <= Math.floor(r[3] / LABEL_CELL); cy++) {
        if (fn(cx + ',' + cy)) return true;
      }
    }
    return false;
  };
  const overlaps = (r) => cells(r, (k) => (taken.get(k) || []).some(
    (q) => r[0] < q[2] && q[0] < r[2] && r[1] < q[3] && q[1] < r[3]));
  const take = (r) => cells(r, (k) => { (taken.get(k) || taken.set(k, []).get(k)).push(r); });
  for (const n of st.data.nodes) take([n.x - n.w / 2 - 1, n.y - n.h / 2 - 1, n.x + n.w / 2 + 1, n.y + n.h / 2 + 1]);
  const byTensor = new Map();  // one label per tensor: the edges to its consumers share their first stretch
  for (const e of st.edges) {
    if (!e.label) continue;
    const k = e.from + '|' + e.label;
    (byTensor.get(k) || byTensor.set(k, []).get(k)).push(e);
  }
  const spots = [];
  const tensors = [...byTensor.values()].sort((p, q) => p[0].pts[1] - q[0].pts[1] || p[0].pts[0] - q[0].pts[0]);
  for (const edges of tensors) {
    const w = ctx.measureText(edges[0].label).width;
    const spot = firstFree(edges, w, overlaps);
    if (!spot) continue;
    take([spot.x - 1, spot.y - 1, spot.x + w + 1, spot.y + LABEL_H - 1]);
    spots.push({ x: spot.x, y: spot.y, w, text: edges[0].label });
  }
  return spots;
}

function firstFree(edges, w, overlaps) {
  // the first place beside one of `edges`, walking down from its start in 10-unit steps (at most 160)
  for (let d = 0; d <= 160; d += 10) {
    for (const e of edges) {
      const p = pointAlong(e, d);
      if (!p) continue;
      for (const x of [p.x + 4, p.x - 4 - w]) {
        const y = p.y + 3;
        if (!overlaps([x - 1, y - 1, x + w + 1, y + LABEL_H - 1])) return { x, y };
      }
    }
  }
  return null;
}

function pointAlong(e, d) {
  // the point `d` canvas units along the edge's route from its start (null past its last 16 units)
  if (!e.line) {
    e.line = polyline(e);
    e.length = 0;
    for (let i = 2; i < e.line.length; i += 2) e.length += Math.hypot(e.line[i] - e.line[i - 2], e.line[i + 1] - e.line[i - 1]);
  }
  if (e.length - d < 16) return null;
  const q = e.line;
  let left = d;
  for (let i = 2; i < q.length; i += 2) {
    const len = Math.hypot(q[i] - q[i - 2], q[i + 1] - q[i - 1]);
    if (left <= len) {
      const t = len ? left / len : 0;
      return { x: q[i - 2] + (q[i] - q[i - 2]) * t, y: q[i - 1] + (q[i + 1] - q[i - 1]) * t };
    }
    left -= len;
  }
  return null;
}

function polyline(e) {
  // the route as straight pieces: a curved route's Bézier segments sampled at 8 points each
  const p = e.pts;
  if (!e.curved) return p;
  const out = [p[0], p[1]];
  for (let i = 2; i + 5 < p.length; i += 6) {
    const x0 = out[out.length - 2], y0 = out[out.length - 1];
    for (let k = 1; k <= 8; k++) {
      const t = k / 8, u = 1 - t;
      out.push(u * u * u * x0 + 3 * u * u * t * p[i] + 3 * u * t * t * p[i + 2] + t * t * t * p[i + 4],
               u * u * u * y0 + 3 * u * u * t * p[i + 1] + 3 * u * t * t * p[i + 3] + t * t * t * p[i + 5]);
    }
  }
  return out;
}

function path(ctx, e) {
  const p = e.pts;
  ctx.moveTo(p[0], p[1]);
  if (e.curved) {
    for (let i = 2; i + 5 < p.length; i += 6) ctx.bezierCurveTo(p[i], p[i + 1], p[i + 2], p[i + 3], p[i + 4], p[i + 5]);
  } else {
    for (let i = 2; i < p.length; i += 2) ctx.lineTo(p[i], p[i + 1]);
  }
}

function arrow(ctx, e, scale) {
  const p = e.pts;  // routes end on the target's border
  const x = p[p.length - 2], y = p[p.length - 1];
  const px = p[p.length - 4], py = p[p.length - 3];
  let dx = x - px, dy = y - py;
  const len = Math.hypot(dx, dy) || 1;
  dx /= len; dy /= len;
  const s = 7;
  ctx.beginPath();
  ctx.moveTo(x, y);
  ctx.lineTo(x - dx * s - dy * s * 0.45, y - dy * s + dx * s * 0.45);
  ctx.lineTo(x - dx * s + dy * s * 0.45, y - dy * s - dx * s * 0.45);
  ctx.closePath();
  ctx.fill();
}

function drawStrikes(st, ctx) {
  const struck = st.struck || [];
  if (!struck.length) return;
  ctx.save();
  ctx.strokeStyle = '#d64545';
  ctx.lineWidth = 1.6;
  for (const n of struck) {
    ctx.beginPath();
    ctx.moveTo(n.x - n.w / 2 + 6, n.y);
    ctx.lineTo(n.x + n.w / 2 - 6, n.y);
    ctx.stroke();
  }
  ctx.restore();
}

function drawBadges(st, ctx) {
  const withBadge = st.badged || [];
  if (!withBadge.length) return;
  ctx.save();
  ctx.font = 'bold 11px arial';
  ctx.textBaseline = 'middle';
  for (const n of withBadge) {
    const w = ctx.measureText(n.badge).width + 10;
    const x = n.x + n.w / 2 - w + 4, y = n.y - n.h / 2 - 9;
    ctx.fillStyle = n.badge.includes('rejected') ? '#b42318' : '#a86b00';
    ctx.beginPath();
    if (ctx.roundRect) ctx.roundRect(x, y, w, 16, 8); else ctx.rect(x, y, w, 16);
    ctx.fill();
    ctx.fillStyle = '#ffffff';
    ctx.fillText(n.badge, x + 5, y + 8.5);
  }
  ctx.restore();
}

function update(st, data, first) {
  const changed = [];
  let added = false;
  for (const n of data.nodes) {
    const old = st.byId.get(n.id);
    const g = groupName(n);
    if (!st.groups[g]) { st.groups[g] = groupStyle(n); added = true; }
    if (!first && old && groupName(old) !== g) changed.push({ id: n.id, group: g });
    st.byId.set(n.id, n);
  }
  // once for all the new styles: vis-network goes over every node when its groups are set
  if (added) st.network.setOptions({ groups: st.groups });
  if (changed.length) st.nodes.update(changed);
  st.data = data;
  st.badged = data.nodes.filter((n) => n.badge);
  st.struck = data.nodes.filter((n) => n.diff === 'removed' && n.kind === 'op');
  const chosen = markSelected(st);
  st.el.setAttribute('data-node-count', String(data.nodes.length));
  st.el.setAttribute('data-layout', data.layout_id);
  const btn = st.root.querySelector('[data-act="shapes"]');
  if (btn) btn.setAttribute('aria-pressed', st.data.shapes ? 'true' : 'false');
  st.minimapImage = null;
  if (!first && !st.moved && data.start && data.start !== st.start) {
    initialView(st, data);  // verdicts came in after the first draw and nobody moved: go to the first rejected
  } else if (!first && chosen.length) {
    keepInView(st, chosen[0]);
  }
  st.start = data.start;
  st.network.redraw();
}

function markSelected(st) {
  const chosen = st.data.nodes.filter((n) => n.ref && n.ref === st.selected).map((n) => n.id);
  st.selectedIds = new Set(chosen);
  st.network.selectNodes(chosen, false);
  st.el.setAttribute('data-selected', st.selected || '');
  return chosen;
}

function select(st, sel) {
  // the selection's own element changed (a click came back from the server, a search hit, Next rejected)
  if (sel === st.selected) { markSelected(st); return; }
  st.selected = sel;
  const chosen = markSelected(st);
  if (chosen.length && st.firstPick && !st.moved) initialView(st, st.data);
  else if (chosen.length && st.el.clientWidth) keepInView(st, chosen[0]);
  if (chosen.length) st.firstPick = false;
  st.network.redraw();
}

function bounds(data) {
  if (data.frame) {  // both sides of a comparison show the same area
    const [x0, y0, x1, y1] = data.frame;
    return { x0, y0, x1, y1 };
  }
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const n of data.nodes) {
    x0 = Math.min(x0, n.x - n.w / 2); x1 = Math.max(x1, n.x + n.w / 2);
    y0 = Math.min(y0, n.y - n.h / 2); y1 = Math.max(y1, n.y + n.h / 2);
  }
  return { x0, y0, x1, y1 };
}

function readableScale() { return 1.0; }

function initialView(st, data) {
  if (!st.root.isConnected || !st.el.clientWidth) { whenLaidOut(st, () => initialView(st, st.data)); return; }
  if (!data.nodes.length) { noteScale(st); return; }
  const W = st.el.clientWidth, H = st.el.clientHeight;
  const bb = bounds(data);
  const fit = Math.min(W / (bb.x1 - bb.x0 + 60), H / (bb.y1 - bb.y0 + 60));
  // the whole graph when it fits with its smallest label still >= MIN_LABEL_PX on screen (a collapsed view has
  // no 11 px constants: its 12 px inputs and outputs set the bound)
  const smallest = Math.min(...new Set(data.nodes.map((n) => FONT[n.kind] || FONT.op)));
  const minScale = MIN_LABEL_PX / smallest;
  if (fit >= minScale) {
    st.network.moveTo({ position: { x: (bb.x0 + bb.x1) / 2, y: (bb.y0 + bb.y1) / 2 }, scale: Math.min(fit, 1.25), animation: false });
  } else {
    const scale = readableScale();
    const target = data.nodes.find((n) => n.ref && n.ref === st.selected) || data.nodes.find((n) => n.id === data.start);
    let x, y;
    if (target) {  // a third from the top, so what feeds it and what follows are both in view
      x = target.x;
      y = target.y + H / 6 / scale;
    } else {  // the top of the graph: its inputs, at the top of the canvas
      const top = data.nodes.reduce((m, n) => (n.y < m.y ? n : m), data.nodes[0]);
      const firstRow = data.nodes.filter((n) => n.y <= top.y + 40);
      x = firstRow.reduce((s, n) => s + n.x, 0) / firstRow.length;
      y = -Infinity;
    }
    // no empty canvas beyond the graph's edges where the graph is bigger than the canvas
    const halfW = W / 2 / scale, halfH = H / 2 / scale;
    x = bb.x1 - bb.x0 + 60 <= 2 * halfW ? (bb.x0 + bb.x1) / 2 : Math.min(Math.max(x, bb.x0 - 30 + halfW), bb.x1 + 30 - halfW);
    y = Math.min(Math.max(y, bb.y0 - 56 + halfH), Math.max(bb.y0 - 56 + halfH, bb.y1 + 30 - halfH));  // room for the toolbar
    st.network.moveTo({ position: { x, y }, scale, animation: false });
  }
  noteScale(st);
}

function keepInView(st, id) {
  const n = st.byId.get(id);
  if (!n) return;
  const p = st.network.canvasToDOM({ x: n.x, y: n.y });
  const W = st.el.clientWidth, H = st.el.clientHeight;
  if (p.x < 40 || p.y < 40 || p.x > W - 40 || p.y > H - 40) {
    st.network.moveTo({ position: { x: n.x, y: n.y }, scale: Math.max(st.network.getScale(), readableScale()), animation: false });
  }
  noteScale(st);
}

function noteScale(st) {
  const s = st.network.getScale();
  st.el.setAttribute('data-scale', s.toFixed(3));
  st.el.setAttribute('data-label-px', (s * FONT.op).toFixed(1));
  const z = st.root.querySelector('.graph-zoom');
  if (z) z.textContent = Math.round(s * 100) + '%';
}

function zoomBy(st, factor, at) {
  st.moved = true;
  const net = st.network;
  const s0 = net.getScale();
  const s1 = Math.min(4, Math.max(0.02, s0 * factor));
  const W = st.el.clientWidth, H = st.el.clientHeight;
  const c = net.getViewPosition();
  const dom = at || { x: W / 2, y: H / 2 };
  const p = net.DOMtoCanvas(dom);
  // keep the canvas point under the pointer where it is
  const nx = p.x - (dom.x - W / 2) / s1, ny = p.y - (dom.y - H / 2) / s1;
  net.moveTo({ position: at ? { x: nx, y: ny } : c, scale: s1, animation: false });
  noteScale(st);
}

function tools(st) {
  const bar = st.root.querySelector('.graph-tools');
  if (!bar) return;
  listen(st, bar, 'click', (ev) => {
    const act = ev.target.closest('[data-act]');
    if (!act) return;
    const what = act.getAttribute('data-act');
    st.moved = true;
    if (what === 'fit') { st.network.fit({ animation: false }); noteScale(st); }
    if (what === 'in') zoomBy(st, 1.25);
    if (what === 'out') zoomBy(st, 0.8);
    if (what === 'real') zoomBy(st, 1 / st.network.getScale());
    if (what === 'shapes') { st.data.shapes = !st.data.shapes; act.setAttribute('aria-pressed', st.data.shapes ? 'true' : 'false'); st.network.redraw(); }
  });
}

function wheelAndKeys(st) {
  // the keys' hint (bottom left) goes once the graph has been used on this page (it covers part of the drawing),
  // and stays gone when the component is drawn again
  const used = () => { globalThis.__onnxSurgeryGraphUsed = true; st.root.classList.add('graph-used'); };
  if (globalThis.__onnxSurgeryGraphUsed) used();
  for (const type of ['wheel', 'pointerdown', 'keydown']) listen(st, st.root, type, used);
  listen(st, st.root, 'wheel', (ev) => {
    if (!st.el.contains(ev.target)) return;
    ev.preventDefault();
    ev.stopPropagation();
    hideTip(st);
    st.moved = true;
    const r = st.el.getBoundingClientRect();
    if (ev.ctrlKey || ev.metaKey) {
      zoomBy(st, Math.exp(-ev.deltaY * 0.002), { x: ev.clientX - r.left, y: ev.clientY - r.top });
    } else {
      const s = st.network.getScale();
      const c = st.network.getViewPosition();
      const dx = ev.shiftKey && !ev.deltaX ? ev.deltaY : ev.deltaX;
      const dy = ev.shiftKey && !ev.deltaX ? 0 : ev.deltaY;
      st.network.moveTo({ position: { x: c.x + dx / s, y: c.y + dy / s }, scale: s, animation: false });
    }
  }, { capture: true, passive: false });
  st.root.setAttribute('tabindex', '0');
  listen(st, st.root, 'keydown', (ev) => {
    if (ev.target.closest('input, textarea')) return;
    const k = ev.key;
    st.moved = true;
    if (k === 'n' || k === 'p') {
      const bad = st.order.filter((id) => ['rejected', 'unknown'].includes(st.byId.get(id).status));
      if (!bad.length) return;
      const cur = st.order.indexOf([...(st.selectedIds || [])][0]);
      const pick = k === 'n'
        ? bad.find((id) => st.order.indexOf(id) > cur) || bad[0]
        : [...bad].reverse().find((id) => st.order.indexOf(id) < cur) || bad[bad.length - 1];
      const n = st.byId.get(pick);
      st.network.moveTo({ position: { x: n.x, y: n.y }, scale: Math.max(st.network.getScale(), readableScale()), animation: false });
      if (n.ref) st.send('selected', { ref: n.ref, at: Date.now() });
    } else if (k === 'f') { st.network.fit({ animation: false }); noteScale(st); }
    else if (k === '+' || k === '=') zoomBy(st, 1.25);
    else if (k === '-') zoomBy(st, 0.8);
    else if (k === 'Escape') hideTip(st);
    else return;
    ev.preventDefault();
  });
  listen(st, st.el, 'mouseleave', () => hideTip(st));
}

function showTip(st, id, dom) {
  const n = st.byId.get(id);
  const tip = st.root.querySelector('.graph-tooltip');
  if (!n || !tip || !n.title) return;
  tip.textContent = n.title;  // plain text: names from the model are never HTML
  tip.style.display = 'block';
  const W = st.el.clientWidth, H = st.el.clientHeight;
  const w = tip.offsetWidth, h = tip.offsetHeight;
  let x = dom.x + 16, y = dom.y + 16;
  if (x + w > W - 4) x = Math.max(4, dom.x - w - 16);
  if (y + h > H - 4) y = Math.max(4, H - h - 4);
  tip.style.left = x + 'px';
  tip.style.top = y + 'px';
  tip.setAttribute('data-node', id);
}

function hideTip(st) {
  const tip = st.root.querySelector('.graph-tooltip');
  if (tip) { tip.style.display = 'none'; tip.removeAttribute('data-node'); }
}

// -- minimap: every node as a dot, the viewport as a rectangle; click or drag to move there
function minimap(st) {
  const mm = st.root.querySelector('.graph-minimap');
  if (!mm) return;
  const go = (ev) => {
    st.moved = true;
    const r = mm.getBoundingClientRect();
    const m = st.minimapMap;
    if (!m) return;
    const sx = mm.width / r.width, sy = mm.height / r.height;  // the minimap may be drawn smaller
    const x = ((ev.clientX - r.left) * sx - m.ox) / m.k + m.bx, y = ((ev.clientY - r.top) * sy - m.oy) / m.k + m.by;
    st.network.moveTo({ position: { x, y }, scale: st.network.getScale(), animation: false });
  };
  let down = false;
  listen(st, mm, 'mousedown', (ev) => { down = true; go(ev); ev.preventDefault(); ev.stopPropagation(); });
  listen(st, window, 'mousemove', (ev) => { if (down) go(ev); });
  listen(st, window, 'mouseup', () => { down = false; });
}

function minimapImage(st, mm) {
  const W = mm.width, H = mm.height;
  const bb = st.data.nodes.length ? bounds(st.data) : { x0: 0, y0: 0, x1: 1, y1: 1 };
  const k = Math.min((W - 8) / (bb.x1 - bb.x0 || 1), (H - 8) / (bb.y1 - bb.y0 || 1));
  const ox = (W - (bb.x1 - bb.x0) * k) / 2, oy = (H - (bb.y1 - bb.y0) * k) / 2;
  st.minimapMap = { k, ox, oy, bx: bb.x0, by: bb.y0 };
  const img = document.createElement('canvas');
  img.width = W; img.height = H;
  const c = img.getContext('2d');
  c.fillStyle = '#ffffff';
  c.fillRect(0, 0, W, H);
  for (const n of st.data.nodes) {
    c.fillStyle = n.kind === 'op' || n.kind === 'group' ? n.color : '#c5ced8';
    const w = Math.max(1.5, n.w * k), h = Math.max(1.5, n.h * k);
    c.fillRect(ox + (n.x - bb.x0) * k - w / 2, oy + (n.y - bb.y0) * k - h / 2, w, h);
  }
  return img;
}

function drawMinimapView(st) {
  const mm = st.root.querySelector('.graph-minimap');
  if (!mm || !st.data || !st.ready) return;
  if (!st.minimapImage) {  // drawn after the graph's first frame, not before it
    if (!st.minimapPending) {
      st.minimapPending = setTimeout(() => { st.minimapPending = null; st.minimapImage = minimapImage(st, mm); drawMinimapView(st); }, 0);
    }
    return;
  }
  const c = mm.getContext('2d');
  c.drawImage(st.minimapImage, 0, 0);
  const m = st.minimapMap;
  const a = st.network.DOMtoCanvas({ x: 0, y: 0 });
  const b = st.network.DOMtoCanvas({ x: st.el.clientWidth, y: st.el.clientHeight });
  c.strokeStyle = '#1f5fbf';
  c.lineWidth = 1.5;
  c.fillStyle = 'rgba(31,95,191,0.08)';
  const x = m.ox + (a.x - m.bx) * m.k, y = m.oy + (a.y - m.by) * m.k;
  const w = (b.x - a.x) * m.k, h = (b.y - a.y) * m.k;
  c.fillRect(x, y, w, h);
  c.strokeRect(x, y, w, h);
}
