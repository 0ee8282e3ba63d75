"""Remake surgery/backends/tensorrt/data/plugins.json: TensorRT's standard plugin library, version by version.

    python scripts/build_trt_plugins.py /path/to/a/clone/of/NVIDIA/TensorRT

It reads, at each release branch of NVIDIA/TensorRT (https://github.com/NVIDIA/TensorRT), the table of
plugin/README.md (plugin folder, creator name, creator versions) and the folder's sources: a (name, version) is
kept where the folder's sources hold the name and the version as string literals (the `*PLUGIN_NAME` /
`*PLUGIN_VERSION` constants), and its interface is V3 where the class in the header beside the literal derives
from IPluginV3, else V2. Versions whose sources were not read here (no tag in the clone) are listed apart with
what stands for them and why. The output names, for each entry, the folder and the branches it was read at.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "surgery" / "backends" / "tensorrt" / "data" / "plugins.json"
UPSTREAM = "https://github.com/NVIDIA/TensorRT"
# the predictor's versions -> the release branch of NVIDIA/TensorRT read for it
READ = {v: f"release/{v}" for v in ["8.0", "8.2", "8.4", "8.5", "8.6", "9.0", "9.1", "9.2", "9.3"]}
READ |= {f"10.{m}": f"release/10.{m}" for m in range(17)}
READ |= {"11.0": "release/11.0", "11.1": "release/11.1"}
# versions released after the newest branch read: what stands for them and why (from their release pages)
NOT_READ = {
    "11.2": (
        "11.1",
        f"{UPSTREAM}/releases/tag/v11.2 (commit 1dade06, 2026-8-4): removes no plugin; adds FFTPlugin (for the "
        "parser's DFT import; its creator name is not recorded here)",
    ),
    "11.3": ("11.1", f"{UPSTREAM}/releases/tag/v11.3 (commit 98adec8, 2026-9-22): no plugin changes listed"),
    "11.4": (
        "11.1",
        f"{UPSTREAM}/releases/tag/v11.4 (commit 16ed063, 2026-10-9): 'Added various C++20 updates to plugin "
        "source code' (no plugin added or removed)",
    ),
    "11.5": (
        "11.1",
        f"{UPSTREAM}/releases/tag/v11.5 (commit 7fe18f0, 2026-11-18): 'Removed the C++17 fallback for the "
        "PLUGIN_VALIDATE macros' (no plugin added or removed)",
    ),
}
# standard ops whose importer creates a standard plugin (so a TensorRT without that plugin refuses them)
_OT = "onnx/onnx-tensorrt at commit 96e7811 (10.1 GA)"
IMPORTERS = {
    "DeformConv": ("ModulatedDeformConv2d", f"{_OT} importerUtils.cpp:1101 (pluginName)"),
    "InstanceNormalization": ("InstanceNormalization_TRT", f"{_OT} importerUtils.cpp:1226 (pluginName)"),
    "RoiAlign": ("ROIAlign_TRT", f"{_OT} onnxOpImporters.cpp:4925 (pluginName)"),
    "ScatterElements": ("ScatterElements", f"{_OT} onnxOpImporters.cpp:5160 (pluginName; with a reduction)"),
}
ROW = re.compile(r"^\|\s*\[(\w+)\]\(([\w/]+)\)\s*(\[DEPRECATED\])?\s*\|\s*(\w+)\s*\|\s*([\d,\s]+)\|")
V3_CLASS = re.compile(r"public\s+(?:nvinfer1::)?IPluginV3\b")


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=False).stdout


def readme_rows(repo: str, ref: str) -> list[tuple[str, list[str], str, bool]]:
    """(creator name, versions, folder, marked deprecated) per row of plugin/README.md at `ref`."""
    rows = []
    for line in _git(repo, "show", f"{ref}:plugin/README.md").splitlines():
        m = ROW.match(line)
        if m:
            versions = [v.strip() for v in m.group(5).split(",") if v.strip()]
            rows.append((m.group(4), versions, m.group(2).split("/")[0], bool(m.group(3))))
    return rows


def folder_literals(repo: str, ref: str, folder: str) -> list[tuple[str, set[str], set[str]]]:
    """Per source stem of the folder: (interface, name literals, version literals)."""
    files = _git(repo, "ls-tree", "-r", "--name-only", ref, f"plugin/{folder}/").split()
    stems: dict[str, list[str]] = {}
    for f in files:
        if f.endswith((".h", ".cpp", ".cu")):
            stems.setdefault(f.rsplit(".", 1)[0], []).append(f)
    out = []
    for fs in stems.values():
        texts = {f: _git(repo, "show", f"{ref}:{f}") for f in fs}
        header = "".join(t for f, t in texts.items() if f.endswith(".h"))
        text = "".join(texts.values())
        names = set(re.findall(r'(?:NAME|Name)\w*\s*(?:\{|=)\s*"(\w+)"', text))
        versions = set(re.findall(r'(?:VERSION|Version)\w*(?:V\d)?\s*(?:\{|=)\s*"(\d+)"', text))
        if versions:
            out.append(("V3" if V3_CLASS.search(header) else "V2", names, versions))
    return out


def main(repo: str) -> None:
    found: dict[tuple[str, str], dict] = {}
    commits = {}
    for version, ref in READ.items():
        commits[version] = _git(repo, "rev-parse", "--short=7", ref).strip()
        if not commits[version]:
            raise SystemExit(f"{ref} is not in {repo}")
        literals: dict[str, list] = {}
        for name, versions, folder, deprecated in readme_rows(repo, ref):
            stems = literals.setdefault(folder, folder_literals(repo, ref, folder))
            named = [s for s in stems if name in s[1]] or stems  # a name defined in a shared header
            for pv in versions:
                kinds = sorted({kind for kind, _, vs in named if pv in vs})
                if not kinds:
                    continue  # the README lists it, its sources do not: not counted as shipped
                e = found.setdefault(
                    (name, pv),
                    {
                        "name": name,
                        "version": pv,
                        "namespace": "",
                        "interface": kinds[-1] if len(kinds) == 1 else "V2 or V3",
                        "folder": folder,
                        "shipped": [],
                        "deprecated": [],
                    },
                )
                e["shipped"].append(version)
                e["interface"] = kinds[-1] if len(kinds) == 1 else e["interface"]
                if deprecated:
                    e["deprecated"].append(version)
    for version, (same, _) in NOT_READ.items():
        for e in found.values():
            if same in e["shipped"]:
                e["shipped"].append(version)
                if same in e["deprecated"]:
                    e["deprecated"].append(version)
    plugins = []
    for e in sorted(found.values(), key=lambda e: (e["name"].lower(), int(e["version"]))):
        read = [v for v in e["shipped"] if v in READ]
        first, last = READ[read[0]], READ[read[-1]]
        e["source"] = (
            f"NVIDIA/TensorRT plugin/README.md and plugin/{e['folder']}/ (name and version literals) at {first} "
            f"({commits[read[0]]}) through {last} ({commits[read[-1]]})"
        )
        e["deprecated_since"] = e.pop("deprecated")[0] if e.get("deprecated") else None
        plugins.append(e)
    data = {
        "_about": "TensorRT's standard plugin library (libnvinfer_plugin) by version: each creator's name, version, "
        "namespace, interface (V2: IPluginV2*; V3: IPluginV3) and the TensorRT versions that ship it. Made by "
        "scripts/build_trt_plugins.py from a clone of NVIDIA/TensorRT; see 'read' for the branch and commit of "
        "each version and 'not_read' for the versions after them.",
        "upstream": UPSTREAM,
        "read": {v: {"ref": READ[v], "commit": commits[v]} for v in READ},
        "not_read": {v: {"same_as": same, "why": why} for v, (same, why) in NOT_READ.items()},
        "fallback_importer": {
            "plugin_version_default": "1",
            "plugin_namespace_default": "",
            "source": "onnx/onnx-tensorrt onnxOpImporters.cpp DEFINE_BUILTIN_OP_IMPORTER(FallbackPluginImporter) "
            "at commit 96e7811 (10.1 GA): the creator is looked up by the node's op type, its plugin_version "
            'attribute (default "1") and plugin_namespace attribute (default "")',
        },
        "importers": {op: {"plugin": name, "source": src} for op, (name, src) in IMPORTERS.items()},
        "readme_gaps": "the README's table is the list: creators registered in plugin/api/inferPlugin.cpp but "
        "missing from the table (EfficientNMS_Explicit_TF_TRT / EfficientNMS_Implicit_TF_TRT before 11.0, Reorg_TRT "
        "version 1 from 10.0) are not counted",
        "v2_on_11": "V2 plugins still import on 11.x: NVIDIA's 10.x-to-11.x migration guide says the V2 plugin "
        "interfaces are deprecated, not removed (https://docs.nvidia.com/deeplearning/tensorrt/11.4.0/api/"
        "migration/tensorrt-10x-to-11x-python-api-reference.html), and plugin/api/inferPlugin.cpp at v11.0 "
        "(771d8ef) still registers V2 creators (GridAnchorPluginCreator, RegionPluginCreator, ...)",
        "plugins": plugins,
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}: {len(plugins)} creators (name, version), {len(READ)} versions read")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
