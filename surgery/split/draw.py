"""A plan drawn as Graphviz dot: parts coloured by backend, the tensors that cross between them."""

from __future__ import annotations

from surgery.split.plan import Plan
from surgery.split.regions import FALLBACK, TARGET

# -- drawing -------------------------------------------------------------------------------------------------------

PART_COLORS = {TARGET: "#2e9d57", FALLBACK: "#4a78b5"}  # target green (as a supported node), fallback blue


def to_dot(plan: Plan, max_names: int = 3) -> str:
    """The plan as a Graphviz graph: graph inputs, the parts in execution order coloured by backend (a target
    part the target refuses alone outlined red), the tensors crossing between them on the edges."""

    def q(text: str) -> str:  # a DOT string: quotes and backslashes escaped, newlines as \\n
        text = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{text}"'

    def names(tensors: list[str]) -> str:
        shown = [n if len(n) <= 40 else n[:39] + "…" for n in tensors[:max_names]]
        more = [f"+{len(tensors) - max_names} more"] if len(tensors) > max_names else []
        return "\n".join(shown + more)

    lines = [
        "digraph plan {",
        '  rankdir=LR; node [fontname="Helvetica", fontsize=11]; edge [fontname="Helvetica", fontsize=9];',
    ]
    for t in plan.inputs:
        lines.append(
            f'  {q("in:" + t.name)} [label={q(t.name)}, shape=ellipse, style=filled, fillcolor="#dfe6ee"];'
        )
    for p in plan.parts:
        ok = p.accepted or p.role != TARGET
        outcome = p.check.get("outcome", "not checked")
        label = f"part {p.index}: {p.backend}\n{len(p.nodes)} node(s)\n{outcome} alone"
        lines.append(
            f'  {q(f"part{p.index}")} [label={q(label)}, shape=box, style="filled,rounded", '
            f'fillcolor="{PART_COLORS[p.role]}", fontcolor="white", color="{"#333333" if ok else "#d64545"}", '
            f"penwidth={1 if ok else 3}];"
        )
    for o in plan.outputs:
        lines.append(f'  {q("out:" + o)} [label={q(o)}, shape=ellipse, style=filled, fillcolor="#dfe6ee"];')
    edges: dict[tuple[str, str], list[str]] = {}
    for t in plan.inputs:
        for k in t.targets:
            edges.setdefault((f"in:{t.name}", f"part{k}"), []).append(t.name)
    for c in plan.crossings:
        for k in c.targets:
            edges.setdefault((f"part{c.source}", f"part{k}"), []).append(c.name)
    for p in plan.parts:
        for o in p.outputs:
            if o in plan.outputs:
                edges.setdefault((f"part{p.index}", f"out:{o}"), [])
    for o in plan.outputs:
        if o in {t.name for t in plan.inputs}:
            edges.setdefault((f"in:{o}", f"out:{o}"), [])
    for (a, b), tensors in edges.items():
        label = f" [label={q(names(tensors))}]" if tensors and a.startswith("part") else ""
        lines.append(f"  {q(a)} -> {q(b)}{label};")
    lines.append("}")
    return "\n".join(lines)
