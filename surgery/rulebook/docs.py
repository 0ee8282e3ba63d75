"""Generate docs/rules.md from the rule files: `python -m surgery.rulebook.docs` (a test keeps it current)."""

from __future__ import annotations

import sys

import yaml

from surgery.rulebook.loader import BUILTIN_DIR, load_rules

DOCS = BUILTIN_DIR.parent / "docs" / "rules.md"


def render(rules) -> str:
    out = [
        "# Built-in rules",
        "",
        "Generated from `rules/*.yaml` by `python -m surgery.rulebook.docs`; do not edit by hand.",
        "A rule is data: a match, a fix primitive with parameters, and a safety class. Apply them with",
        "`onnx-surgery fix MODEL --target T -o OUT`, or one at a time in the app.",
        "",
        "| rule | targets | fix | safety |",
        "|---|---|---|---|",
    ]
    for r in sorted(rules, key=lambda r: r.id):
        targets = ", ".join(f"{t} {s}" if s not in ("*", "") else t for t, s in r.targets.items()) or "any"
        out.append(f"| [`{r.id}`](#{r.id}) | {targets} | `{r.primitive}` | {r.safety} |")
    for r in sorted(rules, key=lambda r: r.id):
        ex = r.example
        out += [
            "",
            f"## {r.id}",
            "",
            f"**{r.title}**",
            "",
            "Targets: "
            + (
                ", ".join(f"`{t}` {s}" if s not in ("*", "") else f"`{t}`" for t, s in r.targets.items())
                or "any"
            ),
            "",
            "### What it does",
            "",
            r.what,
            "",
            "```yaml",
            yaml.safe_dump({"match": r.match, "fix": r.fix}, sort_keys=False, width=100).rstrip(),
            "```",
            "",
            "### Why is this bad",
            "",
            r.why,
            "",
            "### Example",
            "",
        ]
        if ex.get("model"):
            out.append(
                f"Sample model: `sample_models/{ex['model']}.onnx`"
                + (f", node `{ex['node']}`" if ex.get("node") else "")
            )
            out.append("")
        out += [
            f"- before: `{ex.get('before', '-')}`",
            f"- after: `{ex.get('after', '-')}`",
            "",
        ]
        if ex.get("graph"):
            out += [f"Fixture (node `{ex.get('node')}`):", "", "```", ex["graph"].rstrip(), "```", ""]
        if ex.get("near_miss"):
            out += ["Near-miss (the rule stays quiet):", "", "```", ex["near_miss"].rstrip(), "```", ""]
        out += [
            "### Fix safety",
            "",
            f"**{r.safety}**" + (f" — {r.safety_note}" if r.safety_note else ""),
            "",
        ]
        if r.references:
            out += ["### References", ""] + [f"- {ref}" for ref in r.references] + [""]
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(render(load_rules([BUILTIN_DIR])))
    print(f"wrote {DOCS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
