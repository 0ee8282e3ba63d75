"""Start a new rule file with every section in place (ruff's scaffolding habit):

    python -m surgery.rulebook.scaffold my-rule --op Resize --primitive fold_constants [--dir rules]

The file validates as written; its TODOs (and the built-in rule tests, which refuse a TODO) say what is left:
the backend's words, the fixture graph, its near-miss, references. Then run `python -m surgery.rulebook.docs`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from surgery.fixes import FixError
from surgery.rulebook.loader import BUILTIN_DIR, load_rule_text
from surgery.rulebook.schema import RuleError, required_params

TEMPLATE = """\
id: {id}
title: TODO one line
what: TODO what the rule does to the graph.
why: >
  TODO which backend rejects what, in its own words (quote the parser's message).
targets:
  tensorrt-static: "*"
  tensorrt: "*"
match:
  op: {op}
  domain: ""
fix:
  primitive: {primitive}
  params:
{params}
safety: {safety}
safety_note: TODO why the fix has this safety class.
example:
  graph: |
    <ir_version: 8, opset_import: ["" : 13]>
    failing (float[1,4] x) => (float[1,4] y) {{
      [node] y = {op} (x)
    }}
  node: node
  before: TODO the failing pattern
  after: TODO what the fix makes of it
  near_miss: |
    <ir_version: 8, opset_import: ["" : 13]>
    near_miss (float[1,4] x) => (float[1,4] y) {{
      [node] y = Identity (x)
    }}
references:
  - TODO where the backend's words come from
"""


def scaffold(rule_id: str, op: str, primitive: str, folder: Path = BUILTIN_DIR) -> Path:
    from surgery.fixes import get_fix

    fix = get_fix(primitive)
    needed = required_params(fix)
    params = "\n".join(
        f"    {name}: $node"
        if name == "node"
        else (f"    {name}: TODO  # {doc}" if name in needed else f"    # {name}: {doc}")
        for name, doc in fix.params.items()
    )
    text = TEMPLATE.format(
        id=rule_id, op=op, primitive=primitive, params=params or "    {}", safety=fix.safety.value
    )
    path = Path(folder) / f"{rule_id}.yaml"
    if path.exists():
        raise RuleError(f"{path}: exists. Note: pick another id")
    load_rule_text(text, str(path))  # the template itself must validate
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m surgery.rulebook.scaffold", description=__doc__.split("\n")[0]
    )
    ap.add_argument("id")
    ap.add_argument("--op", required=True)
    ap.add_argument("--primitive", required=True)
    ap.add_argument("--dir", type=Path, default=BUILTIN_DIR)
    args = ap.parse_args(argv)
    try:
        path = scaffold(args.id, args.op, args.primitive, args.dir)
    except (RuleError, FixError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}; fill in the TODOs, then run python -m surgery.rulebook.docs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
