"""Generate docs/rules.md from the rule files: `python -m surgery.rulebook.docs` (a test keeps it current)."""

from __future__ import annotations

import sys

import yaml

from surgery.rulebook.loader import BUILTIN_DIR, MAX_BYTES, MAX_DEPTH, load_rules
from surgery.rulebook.schema import (
    ATTR_CONDITIONS,
    EXAMPLE_FIELDS,
    FIX_FIELDS,
    INPUT_CONDITIONS,
    MATCH_FIELDS,
    SAFETY,
    TARGETS,
    TOP_FIELDS,
)

DOCS = BUILTIN_DIR.parent / "docs" / "rules.md"


def render(rules) -> str:
    out = [
        "# Rules",
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
    out += _format_section()
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
        if r.bound is not None:
            out += [
                f"Bound: the max absolute error on every output stays within {r.bound:.4g} of that output's range "
                "(max - min); a step beyond it is undone with its numbers.",
                "",
            ]
        if r.references:
            out += ["### References", ""] + [f"- {ref}" for ref in r.references] + [""]
    return "\n".join(out).rstrip() + "\n"


def _table(title: str, fields: dict[str, str]) -> list[str]:
    return (
        [f"**{title}**", "", "| field | meaning |", "|---|---|"]
        + [f"| `{k}` | {v.replace('|', '/')} |" for k, v in fields.items()]
        + [""]
    )


def _format_section() -> list[str]:
    """The rule file format, from the schema itself (so it cannot drift from what the loader accepts)."""
    return [
        "",
        "## Writing a rule",
        "",
        "One YAML file per rule (`rules/<id>.yaml`, or any folder given with `--rules` / `ONNX_SURGERY_RULES`).",
        f"Files are read with a safe loader after a {MAX_BYTES // 1024} KiB size limit and a {MAX_DEPTH}-level"
        " nesting limit; a rule file never runs code. A broken file gets one error naming the file, the line and"
        " the field. Save a fix made in the app as a rule with `surgery.rulebook.save.rule_from_step`.",
        "",
        *_table("Fields", TOP_FIELDS),
        *_table("match", MATCH_FIELDS),
        *_table("Input conditions (match.inputs.<i>, match.any_input)", INPUT_CONDITIONS),
        *_table("Attribute conditions (match.attrs.<name>)", ATTR_CONDITIONS),
        *_table("fix", FIX_FIELDS),
        *_table("example (the fixture a test builds)", EXAMPLE_FIELDS),
        f"Safety classes: {', '.join(f'`{x}`' for x in SAFETY)}. Targets: "
        f"{', '.join(f'`{t}`' for t in TARGETS)}, each with a version spec (`*`, `<=8.2`, `>=8.6,<10`).",
        "",
        "## Built-in rules",
    ]


def main() -> int:
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(render(load_rules([BUILTIN_DIR])))
    print(f"wrote {DOCS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
