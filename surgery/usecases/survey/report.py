"""A survey's report (surgery.usecases.survey) as one self-contained HTML page and as SARIF.

The page needs no network: its style, its script (sorting and filtering the matrix) and its chart (inline SVG)
are in the file. Every text that comes from a model or a backend is escaped."""

from __future__ import annotations

import html
from typing import Any

from surgery.usecases.survey.cells import final_outcome
from surgery.usecases.survey.request import OUTCOMES

COLOURS = {
    "accepts": "#2e7d32",
    "rejects": "#c62828",
    "cannot confirm": "#ef8f00",
    "unavailable": "#9e9e9e",
    "error": "#6a1b9a",
}
BACKGROUNDS = {
    "accepts": "#e8f5e9",
    "rejects": "#ffebee",
    "cannot confirm": "#fff3e0",
    "unavailable": "#f2f2f2",
    "error": "#f3e5f5",
}

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #1f2328; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.meta { color: #57606a; margin-bottom: 16px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { border: 1px solid #d0d7de; border-radius: 8px; padding: 10px 14px; min-width: 200px; }
.card b { display: block; font-size: 15px; margin-bottom: 4px; }
.rate { font-size: 22px; font-weight: 600; }
.muted { color: #57606a; font-size: 12px; }
table { border-collapse: collapse; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; position: sticky; top: 0; z-index: 1; }
#matrix th.sortable { cursor: pointer; user-select: none; white-space: nowrap; }
#matrix th.sortable::after { content: " \\2195"; color: #8c959f; }
#matrix th[aria-sort="ascending"]::after { content: " \\2191"; color: #1f2328; }
#matrix th[aria-sort="descending"]::after { content: " \\2193"; color: #1f2328; }
#matrix td.model { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; max-width: 420px;
  overflow-wrap: anywhere; }
#matrix td.num { text-align: right; white-space: nowrap; }
td.cell { min-width: 120px; max-width: 260px; }
td.cell .o { font-weight: 600; white-space: nowrap; }
td.cell .why { font-size: 11px; color: #57606a; display: block; }
.controls { display: flex; gap: 12px; align-items: center; margin: 8px 0; flex-wrap: wrap; }
.controls input[type=search] { width: 280px; padding: 4px 6px; }
.legend span { display: inline-block; padding: 1px 8px; border-radius: 4px; margin-right: 6px; font-size: 12px; }
table.reasons { width: 100%; table-layout: fixed; } .reasons td { font-size: 13px; overflow-wrap: anywhere; }
code { font-size: 12px; background: #f6f8fa; padding: 0 3px; border-radius: 3px; }
"""

SCRIPT = """
(function () {
  var table = document.getElementById('matrix');
  var body = table.tBodies[0];
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, col) {
    if (!th.classList.contains('sortable')) return;
    th.addEventListener('click', function () {
      var asc = th.getAttribute('aria-sort') !== 'ascending';
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute('data-sort'), y = b.cells[col].getAttribute('data-sort');
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  var text = document.getElementById('filter-text');
  var outcome = document.getElementById('filter-outcome');
  var shown = document.getElementById('shown');
  function filter() {
    var q = text.value.toLowerCase(), o = outcome.value, n = 0;
    Array.prototype.forEach.call(body.rows, function (r) {
      var ok = (!q || r.textContent.toLowerCase().indexOf(q) >= 0) &&
               (!o || (' ' + r.getAttribute('data-outcomes') + ' ').indexOf(' ' + o + ' ') >= 0);
      r.style.display = ok ? '' : 'none';
      if (ok) n++;
    });
    shown.textContent = n + ' of ' + body.rows.length + ' models shown';
  }
  text.addEventListener('input', filter);
  outcome.addEventListener('change', filter);
  filter();
})();
"""


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _size(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _short(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _cell_html(cell: dict | None) -> tuple[str, str, str]:
    """(the cell's <td>, its final outcome, its sort key)."""
    if cell is None:
        return "<td class='cell' data-sort='9'>not run</td>", "", "9"
    final = final_outcome(cell)
    before = cell["outcome"]
    fixed = cell.get("fix")
    if fixed:
        steps = len(fixed.get("steps", []))
        head = f"{before} → {final}" if final != before else f"still {final}"
        verified = {"ok": "verified", "skipped": "not verifiable here", None: ""}.get(
            fixed.get("verification"), f"verification {fixed.get('verification')}"
        )
        sub = (f"{steps} step{'s' if steps != 1 else ''}" if steps else "no rule applied") + (
            f" · {verified}" if verified else ""
        )
    else:
        head, sub = final, ""
    if before == "error":
        why = cell.get("error", "")
    elif before == "unavailable":
        why = cell.get("note", "")
    else:
        reasons = (fixed or {}).get("reasons") if fixed else None
        if reasons:
            why = reasons[0]
        else:
            first = next((r for r in cell.get("reasons", []) if r["status"] == "rejected"), None) or next(
                iter(cell.get("reasons", [])), None
            )
            why = "" if first is None else f"{', '.join(first['op_types']) or 'model'}: {first['reason']}"
    rejected = (fixed or cell).get("rejected", {}).get("nodes", 0)
    tip = "; ".join(filter(None, [head, sub, f"{rejected} node(s) rejected" if rejected else "", why]))
    rules = cell.get("rules") or []
    if rules and final != "accepts":
        tip += f"; rules that answer: {', '.join(rules)}"
    order = OUTCOMES.index(final) if final in OUTCOMES else 8
    td = (
        f"<td class='cell' data-sort='{order}' title='{_e(tip)}' style='background:{BACKGROUNDS.get(final, '#fff')}'>"
        f"<span class='o' style='color:{COLOURS.get(final, '#000')}'>{_e(head)}</span>"
        + (f" <span class='muted'>{_e(sub)}</span>" if sub else "")
        + (f"<span class='why'>{_e(_short(why))}</span>" if why and final != "accepts" else "")
        + "</td>"
    )
    return td, final, str(order)


def _chart(report: dict) -> str:
    """Stacked horizontal bars per target: the final outcomes (and, after --fix, the outcomes before)."""
    targets = report["targets"]
    per = report["summary"]["targets"]
    rows = []
    for t in targets:
        if report.get("fix"):
            rows.append((f"{t} (before fix)", per[t]["before"]))
            rows.append((f"{t} (after fix)", per[t]["after"]))
        else:
            rows.append((t, per[t]["after"]))
    label_w, bar_w, row_h = 250, 460, 26
    height = row_h * len(rows) + 34
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{label_w + bar_w + 60}' height='{height}' "
        f"role='img' aria-label='outcomes per target'>"
    ]
    for k, (label, counts) in enumerate(rows):
        y = 6 + k * row_h
        total = sum(counts.values()) or 1
        parts.append(
            f"<text x='{label_w - 8}' y='{y + 15}' text-anchor='end' font-size='12'>{_e(label)}</text>"
        )
        x = float(label_w)
        for o in OUTCOMES:
            n = counts.get(o, 0)
            if not n:
                continue
            w = bar_w * n / total
            parts.append(
                f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='{row_h - 6}' fill='{COLOURS[o]}'>"
                f"<title>{_e(label)}: {n} {_e(o)}</title></rect>"
            )
            if w > 22:
                parts.append(
                    f"<text x='{x + w / 2:.1f}' y='{y + 15}' text-anchor='middle' font-size='11' "
                    f"fill='#fff'>{n}</text>"
                )
            x += w
    y = height - 12
    x = label_w
    for o in OUTCOMES:
        parts.append(f"<rect x='{x}' y='{y - 9}' width='10' height='10' fill='{COLOURS[o]}'/>")
        parts.append(f"<text x='{x + 14}' y='{y}' font-size='11'>{_e(o)}</text>")
        x += 14 + 7 * len(o) + 18
    parts.append("</svg>")
    return "".join(parts)


def to_html(report: dict) -> str:
    """The report as one HTML page: cards per target (outcomes, repair rate), the chart, the matrix (models ×
    targets, coloured by the outcome after the fixes, sortable by any column, filterable by text and outcome),
    and the refusal reasons said for the most models with the rules that answer them."""
    targets = report["targets"]
    models = report["models"]
    per = report["summary"]["targets"]
    stats = report.get("stats", {})
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>Survey: {len(models)} models × {len(targets)} targets</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Survey: {len(models)} model{'s' if len(models) != 1 else ''} × {len(targets)} "
        f"target{'s' if len(targets) != 1 else ''}</h1>",
        "<div class='meta'>"
        + " · ".join(
            _e(x)
            for x in [
                f"started {report.get('started', '')}",
                f"{report['tool']['name']} {report['tool']['version']}",
                f"depth {report.get('depth') or 'each target’s default'}",
                "with --fix" if report.get("fix") else "checked only (no --fix)",
                f"{stats.get('cells', 0)} cells: {stats.get('computed', 0)} computed, "
                f"{stats.get('cached', 0)} from the cache, {stats.get('errors', 0)} errors, "
                f"{stats.get('seconds', 0)} s",
            ]
        )
        + "</div>",
        "<h2>Per target</h2><div class='cards'>",
    ]
    for t in targets:
        s = per[t]
        counts = ", ".join(f"{n} {o}" for o, n in s["after"].items())
        if report.get("fix"):
            rate = (
                f"<span class='rate'>{s['repaired']}/{s['fixed']}</span> repaired ({s['repair_rate']:.0%})"
                if s["fixed"]
                else "<span class='rate'>—</span> nothing to repair"
            )
        else:
            acc = s["after"].get("accepts", 0)
            rate = f"<span class='rate'>{acc}/{s['models']}</span> accepted"
        out.append(
            f"<div class='card'><b>{_e(t)}</b>{rate}<div class='muted'>{_e(counts)}"
            + (
                f"<br>before fix: {_e(', '.join(f'{n} {o}' for o, n in s['before'].items()))}"
                if report.get("fix")
                else ""
            )
            + "</div></div>"
        )
    out.append("</div>")
    out.append("<h2>Outcomes per target</h2>" + _chart(report))
    legend = "".join(
        f"<span style='background:{BACKGROUNDS[o]};color:{COLOURS[o]}'>{_e(o)}</span>" for o in OUTCOMES
    )
    options = "".join(f"<option value='{_e(o.replace(' ', '-'))}'>{_e(o)}</option>" for o in OUTCOMES)
    out.append(
        "<h2>Matrix</h2><div class='controls'>"
        "<input type='search' id='filter-text' placeholder='filter: model, op type, reason…' "
        "aria-label='filter the models'>"
        f"<label>outcome <select id='filter-outcome'><option value=''>any</option>{options}</select></label>"
        f"<span id='shown' class='muted'></span><span class='legend'>{legend}</span></div>"
    )
    head = "".join(f"<th class='sortable'>{_e(t)}</th>" for t in targets)
    out.append(
        "<table id='matrix'><thead><tr><th class='sortable'>model</th><th class='sortable'>nodes</th>"
        f"<th class='sortable'>size</th>{head}</tr></thead><tbody>"
    )
    for m in models:
        cells, finals = [], []
        for t in targets:
            td, final, _ = _cell_html(m["targets"].get(t))
            cells.append(td)
            finals.append(final)
        out.append(
            f"<tr data-outcomes='{_e(' '.join(f.replace(' ', '-') for f in finals))}'>"
            f"<td class='model' data-sort='{_e(m['name'].lower())}' title='{_e(m['path'])}&#10;sha256 "
            f"{_e(m['sha256'])}'>{_e(m['name'])}</td>"
            f"<td class='num' data-sort='{m.get('nodes') or 0}'>{_e(m.get('nodes') if m.get('nodes') is not None else '?')}</td>"
            f"<td class='num' data-sort='{m.get('bytes') or 0}'>{_e(_size(m.get('bytes')))}</td>"
            + "".join(cells)
            + "</tr>"
        )
    out.append("</tbody></table>")
    top = report["summary"]["top_reasons"]
    out.append("<h2>Top refusal reasons across the zoo</h2>")
    if not top:
        out.append("<p>No target refuses any model.</p>")
    else:
        out.append(
            "<table class='reasons'><colgroup><col style='width:64px'><col style='width:38%'><col style='width:13%'>"
            "<col style='width:17%'><col style='width:11%'><col></colgroup><thead><tr><th>models</th><th>the backend's words</th><th>code</th>"
            "<th>op types</th><th>targets</th><th>rules that answer</th></tr></thead><tbody>"
        )
        for r in top:
            ops = ", ".join(f"{op} ×{n}" if n > 1 else op for op, n in r["op_types"].items())
            rules = (
                ", ".join(f"<code>{_e(x)}</code>" for x in r["rules"]) or "<span class='muted'>none</span>"
            )
            out.append(
                f"<tr><td class='num'>{r['models']}</td><td class='words'>{_e(r['reason'])}"
                + (
                    f"<div class='muted'>why: {_e(r['explanation'])}</div>"
                    if r.get("explanation") and r["explanation"] != r["reason"]
                    else ""
                )
                + "</td>"
                f"<td>{_e(r['code'])}</td><td>{_e(ops)}</td><td>{_e(', '.join(r['targets']))}</td>"
                f"<td>{rules}</td></tr>"
            )
        out.append("</tbody></table>")
    out.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(out)


def to_sarif(report: dict) -> dict:
    """SARIF 2.1.0 for CI: a result per model and target still refused after the fixes (an error, one per
    reason), and per cell that could not be computed (a warning: survey/error)."""
    results, rules = [], {}
    for m in report["models"]:
        for t, cell in m["targets"].items():
            final = final_outcome(cell)
            if final == "error":
                rules.setdefault(
                    "survey/error", {"id": "survey/error", "shortDescription": {"text": "cell failed"}}
                )
                results.append(_result(m, t, "survey/error", "warning", cell.get("error", "error"), cell))
                continue
            if final != "rejects":
                continue
            fixed = cell.get("fix")
            reasons = [r for r in cell.get("reasons", []) if r["status"] == "rejected"]
            if fixed:  # the reasons left after the fixes, as `fix` gives them
                texts = [(fixed.get("rejected", {}).get("by_op"), line) for line in fixed.get("reasons", [])]
                for by_op, line in texts or [(None, "still rejected after fix")]:
                    rules.setdefault("survey/rejects", _rule("survey/rejects"))
                    results.append(_result(m, t, "survey/rejects", "error", line, cell, by_op))
                continue
            for r in reasons or [{"code": "", "reason": "rejected", "op_types": {}, "rules": []}]:
                rule_id = r["code"] or "survey/rejects"
                rules.setdefault(rule_id, _rule(rule_id))
                results.append(_result(m, t, rule_id, "error", r["reason"], cell, r["op_types"], r["rules"]))
    from surgery.sarif import sarif_log

    paths = [m["path"] for m in report["models"]]
    return sarif_log(list(rules.values()), results, paths, report["tool"]["version"])


def _rule(rule_id: str) -> dict:
    return {"id": rule_id, "shortDescription": {"text": f"a target refuses the model ({rule_id})"}}


def _result(m, target, rule_id, level, text, cell, op_types=None, answering=None) -> dict:
    return {
        "ruleId": rule_id,
        "level": level,
        "message": {"text": f"{target}: {text}"},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": m["path"]}}}],
        "properties": {
            "model": m["name"],
            "sha256": m["sha256"],
            "target": target,
            "outcome": cell["outcome"],
            "outcomeAfterFix": final_outcome(cell),
            "opTypes": op_types or {},
            "rules": answering or cell.get("rules", []),
        },
    }
