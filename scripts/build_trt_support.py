"""Remake surgery/backends/tensorrt/data/tensorrt_support.json from onnx-tensorrt's per-version operator tables.

    python scripts/build_trt_support.py

It reads only files of this repository: surgery/backends/tensorrt/data/upstream/operators-<tag>.md, one
docs/operators.md per onnx-tensorrt branch, each with the URL and ref it came from on its first line. Each
TensorRT version the predictor knows maps to the table of the nearest branch at or before it; the output stores
each distinct table once ("tables") and, per version, which table it uses, from where, and the opset range.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "surgery" / "backends" / "tensorrt" / "data"
UPSTREAM_DIR = DATA / "upstream"
OUT = DATA / "tensorrt_support.json"
UPSTREAM = "onnx/onnx-tensorrt docs/operators.md"
# releases after the newest tag read here: their notes as published on the release page (the same text as
# CHANGELOG.md's section for 11.0 and 11.1, which were read at their tags)
_RELEASES = {
    "11.2": "https://github.com/NVIDIA/TensorRT/releases/tag/v11.2, commit 1dade06, 2026-8-4",
    "11.3": "https://github.com/NVIDIA/TensorRT/releases/tag/v11.3, commit 98adec8, 2026-9-22",
    "11.4": "https://github.com/NVIDIA/TensorRT/releases/tag/v11.4, commit 16ed063, 2026-10-9",
    "11.5": "https://github.com/NVIDIA/TensorRT/releases/tag/v11.5, commit 7fe18f0, 2026-11-18",
}
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
    "10.16": (
        "10.15",
        f"{UPSTREAM} 10.15 table + NVIDIA/TensorRT CHANGELOG.md 10.16 GA (2026-3-24) at tag v10.16 (52399f5)",
        "no 10.16 table published: the 10.15 table plus the 10.16 changelog's parser additions",
    ),
    "11.0": (
        "10.15",
        f"{UPSTREAM} 10.15 table + NVIDIA/TensorRT CHANGELOG.md 11.0 GA (2026-6-2) at tag v11.0 (771d8ef)",
        "no 11.x table published: the 10.15 table plus the 11.0 changelog's parser additions",
    ),
    "11.1": (
        "10.15",
        f"{UPSTREAM} 10.15 table + NVIDIA/TensorRT CHANGELOG.md 11.0 GA / 11.1 GA (2026-6-24, commit 82d1dca)",
        "no 11.x table published: the 10.15 table plus the 11.0/11.1 changelogs' parser additions",
    ),
    **{
        v: (
            "10.15",
            f"{UPSTREAM} 10.15 table + NVIDIA/TensorRT CHANGELOG.md 11.0 GA to {v} GA ({_RELEASES[v]})",
            f"no 11.x table published: the 10.15 table plus the changelogs' parser additions up to {v}",
        )
        for v in ("11.2", "11.3", "11.4", "11.5")
    },
}
_CL1016 = "NVIDIA/TensorRT CHANGELOG.md, 10.16 GA (2026-3-24) at tag v10.16"
_ADDED_10_16 = {
    "DistCollective": f"{_CL1016}: 'Added DistCollective operator support for multi-device execution'",
}
_CL11 = "NVIDIA/TensorRT CHANGELOG.md, 11.0 GA (2026-6-2)"
_ADDED_11 = {
    **_ADDED_10_16,  # 11.0 (2026-6-2) came after 10.16 (2026-3-24); its changelog removes no parser op
    "Swish": f"{_CL11}: Swish operator support",
    "TRT_Attention": f"{_CL11}: custom op TRT_Attention (schema: onnx/onnx-tensorrt docs/TRT_custom_ops.md)",
    "TRT_MoE": f"{_CL11}: custom op TRT_MoE",
    "TRT_KVCacheUpdate": f"{_CL11}: custom op TRT_KVCacheUpdate (schema: docs/TRT_custom_ops.md)",
}
_CL112 = f"NVIDIA/TensorRT CHANGELOG.md, 11.2 GA ({_RELEASES['11.2']})"
_ADDED_11_2 = {
    **_ADDED_11,
    # the table lists DFT N; 11.2 imports it through the new FFTPlugin (cuFFT)
    "DFT": f"{_CL112}: 'Added support for the DFT operator and 5D GridSample operators'; new FFTPlugin",
}
ADDED = {
    "10.16": _ADDED_10_16,
    "11.0": _ADDED_11,
    "11.1": _ADDED_11,
    **{v: _ADDED_11_2 for v in ("11.2", "11.3", "11.4", "11.5")},
}
# what a version changes in its table besides ops: 11.5 takes opset 25
OVERRIDES = {
    "11.5": {
        "max_opset": 25,
        "max_opset_source": f"NVIDIA/TensorRT CHANGELOG.md, 11.5 GA ({_RELEASES['11.5']}): 'Added support for "
        "ONNX opset 25 and updated the supported ONNX release to 1.22.0'",
    }
}
# the data-type names of the tables' header line -> ONNX TensorProto names
DTYPES = {
    "DOUBLE": "DOUBLE",
    "FLOAT32": "FLOAT",
    "FLOAT16": "FLOAT16",
    "BFLOAT16": "BFLOAT16",
    "FP8": "FLOAT8E4M3FN",
    "FP4": "FLOAT4E2M1",
    "INT32": "INT32",
    "INT64": "INT64",
    "INT8": "INT8",
    "INT4": "INT4",
    "UINT8": "UINT8",
    "BOOL": "BOOL",
}
# "`axes` must be an initializer", "`K` input must be an initializer", "`min` and `max` clip values must be
# initializers", "`depth` must be a build-time constant", "`axes` must be resolvable to a constant."
CONST_SENTENCE = re.compile(
    r"([^.]*?)must be (?:an? )?(initializers?|build-time constant|constant tensor|resolvable to a constant)"
)
ROW = re.compile(r"^\|\s*([A-Za-z][A-Za-z0-9_]*)\s*\|\s*([YN])\b[^|]*\|?([^|]*)\|?([^|]*)")


def data_types(text: str) -> list[str]:
    """The ONNX data types a table says TensorRT takes, its 'limited support' notes included (cast down)."""
    m = re.search(r"supports the following ONNX data types: ([^\n]*)", text)
    names = re.findall(r"[A-Z][A-Z0-9]+", m.group(1)) if m else []
    limited = re.search(r"limited support for ([^.]*) types?", text)
    names += re.findall(r"[A-Z][A-Z0-9]+", limited.group(1)) if limited else []
    return sorted({DTYPES[n] for n in names if n in DTYPES})


def const_inputs(restrictions: str) -> list[dict]:
    """Inputs a row's restrictions say must be initializers / build-time constants, with the row's words."""
    out = []
    for m in CONST_SENTENCE.finditer(restrictions):
        kind = "initializer" if m.group(2).startswith("initializer") else "build-time constant"
        for name in re.findall(r"`(\w+)`", m.group(1)):
            out.append({"input": name, "kind": kind, "text": m.group(0).strip()})
    return out


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
            restrictions = r.group(4).strip().replace("<br />", " ")
            ops[r.group(1)] = {
                "supported": r.group(2) == "Y",
                "types": r.group(3).strip(),
                "restrictions": restrictions,
                "const_inputs": const_inputs(restrictions),
            }
    return ops, opsets


def upstream_ref(path: Path) -> str:
    """The provenance line the upstream copy carries (URL and ref)."""
    first = path.read_text().splitlines()[0]
    return first.removeprefix("<!-- onnx-surgery: ").removesuffix(" -->").strip()


def main() -> None:
    data = {
        "_about": "Operator tables of the TensorRT ONNX parser by version, each distinct table once. Regenerate "
        "with scripts/build_trt_support.py from surgery/backends/tensorrt/data/upstream/; every entry names its "
        "source.",
        "tables": {},
        "versions": {},
    }
    for version, (tag, source, note) in VERSIONS.items():
        path = UPSTREAM_DIR / f"operators-{tag}.md"
        if tag not in data["tables"]:
            ops, (lo, hi) = parse_table(path)
            data["tables"][tag] = {
                "upstream": upstream_ref(path),
                "data_types": data_types(path.read_text()),
                "min_opset": lo,
                "max_opset": hi,
                "ops": ops,
            }
        added = {
            op: {"supported": True, "types": "", "restrictions": "", "const_inputs": [], "source": why}
            for op, why in ADDED.get(version, {}).items()
        }
        data["versions"][version] = {
            "table": tag,
            "source": source,
            "note": note,
            "added_ops": added,
            **OVERRIDES.get(version, {}),
        }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}: {len(data['versions'])} versions, {len(data['tables'])} distinct tables")


if __name__ == "__main__":
    main()
