"""Remake surgery/backends/data/tensorrt_support.json from onnx-tensorrt's per-version operator tables.

    python scripts/build_trt_support.py [REFERENCE_DIR]

REFERENCE_DIR holds `ops_<tag>.md`, one docs/operators.md per onnx-tensorrt branch (default:
../shared/reference/tensorrt-ops-by-version). Each TensorRT version the predictor knows maps to the table of the
nearest branch at or before it; the data records which table, from where, and the opset range it states.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "surgery" / "backends" / "data" / "tensorrt_support.json"
UPSTREAM = "onnx/onnx-tensorrt docs/operators.md"
# version -> (table file tag, where that table comes from, note)
VERSIONS = {
    "8.0": ("8.0-GA", f"{UPSTREAM} @ branch 8.0-GA", ""),
    "8.2": ("8.2-GA", f"{UPSTREAM} @ branch 8.2-GA", ""),
    "8.4": ("8.4-GA", f"{UPSTREAM} @ branch 8.4-GA", ""),
    "8.5": ("8.5-GA", f"{UPSTREAM} @ branch 8.5-GA", ""),
    "8.6": ("8.6-GA", f"{UPSTREAM} @ branch 8.6-GA", ""),
    "9.0": ("9.0-GA", f"{UPSTREAM} @ branch 9.0-GA", ""),
    "9.1": ("9.1", f"{UPSTREAM} @ branch 9.1", ""),
    "9.2": ("9.2", f"{UPSTREAM} @ branch 9.2", ""),
    "9.3": ("9.3", f"{UPSTREAM} @ branch 9.3", ""),
    "10.0": ("10.0-GA", f"{UPSTREAM} @ branch 10.0-GA", ""),
    "10.1": ("10.1-GA", f"{UPSTREAM} @ branch 10.1-GA", ""),
    "10.2": ("10.2", f"{UPSTREAM} @ dev-10.2 (fork yuanyao-nv/onnx-tensorrt)", ""),
    **{
        f"10.{m}": (
            "10.2",
            f"{UPSTREAM} @ dev-10.2 (fork yuanyao-nv/onnx-tensorrt)",
            f"no table found for 10.{m}: the 10.2 table is used",
        )
        for m in range(3, 10)
    },
    "10.10": ("10.10-GA", f"{UPSTREAM} @ commit 3b9c961 '10.10-GA Release (#1025)'", ""),
    **{
        f"10.{m}": (
            "10.10-GA",
            f"{UPSTREAM} @ commit 3b9c961 '10.10-GA Release (#1025)'",
            f"no table found for 10.{m}: the 10.10 table is used",
        )
        for m in range(11, 15)
    },
    "10.15": (
        "10.15",
        f"{UPSTREAM} (the version headed 'TensorRT 10.15', Changelog 'TensorRT 10.15 GA Release - 2026-2-2')",
        "",
    ),
    "11.1": (
        "10.15",
        f"{UPSTREAM} 10.15 table + NVIDIA/TensorRT CHANGELOG.md 11.0 GA / 11.1 GA",
        "no 11.x table published: the 10.15 table plus the 11.0 changelog's additions (Swish)",
    ),
}
ADDED = {"11.1": {"Swish": "NVIDIA/TensorRT CHANGELOG.md, 11.0 GA (2026-6-2): Swish operator support"}}
ROW = re.compile(r"^\|\s*([A-Za-z][A-Za-z0-9_]*)\s*\|\s*([YN])\b[^|]*\|?([^|]*)\|?([^|]*)")


def parse_table(path: Path) -> tuple[dict, tuple[int, int]]:
    text = path.read_text()
    m = re.search(r"inclusive range of opset (\d+) to opset (\d+)", text)
    opsets = (
        (int(m.group(1)), int(m.group(2))) if m else (1, int(re.search(r"up to Opset (\d+)", text).group(1)))
    )
    ops = {}
    for line in text.splitlines():
        r = ROW.match(line)
        if r:
            ops[r.group(1)] = {
                "supported": r.group(2) == "Y",
                "types": r.group(3).strip(),
                "restrictions": r.group(4).strip().replace("<br />", " "),
            }
    return ops, opsets


def main() -> None:
    ref = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else ROOT.parent / "shared" / "reference" / "tensorrt-ops-by-version"
    )
    data = {
        "_about": "Operator tables of the TensorRT ONNX parser by version. Regenerate with "
        "scripts/build_trt_support.py; every entry names its source.",
        "versions": {},
    }
    for version, (tag, source, note) in VERSIONS.items():
        ops, (lo, hi) = parse_table(ref / f"ops_{tag}.md")
        for op, why in ADDED.get(version, {}).items():
            ops[op] = {"supported": True, "types": "", "restrictions": "", "source": why}
        data["versions"][version] = {
            "table": tag,
            "source": source,
            "note": note,
            "min_opset": lo,
            "max_opset": hi,
            "ops": ops,
        }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}: {len(data['versions'])} versions")


if __name__ == "__main__":
    main()
