"""A survey's cell cache on disk: one file per cell, keyed by (model sha256, target, depth, fix options, the content of
the rules that apply to the target, the tool's version, the backend's version), written as soon as the cell is
done, so a re-run with nothing changed reads every cell and an interrupted survey resumes."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path

from surgery.usecases.survey.request import OUTCOMES, SurveyRequest

CACHE_ENV = "ONNX_SURGERY_SURVEY_CACHE"
DEFAULT_CACHE = "~/.cache/onnx-surgery/survey"
CELL_FORMAT = 1  # bump when a cell's content changes shape: every cached cell is then computed again


def cache_dir(request: SurveyRequest) -> Path:
    return Path(request.cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


class Hashes:
    """sha256 of model files, remembered by (size, mtime, inode) in the cache folder: a re-run does not read
    gigabytes of unchanged models again."""

    def __init__(self, folder: Path | None):
        self.path = folder / "hashes.json" if folder else None
        self.known: dict[str, list] = {}
        if self.path and self.path.is_file():
            with contextlib.suppress(OSError, ValueError):
                self.known = json.loads(self.path.read_text())
        self.changed = False

    def sha256(self, path: Path) -> tuple[str, int]:
        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        seen = self.known.get(str(path))
        if seen and seen[:3] == stamp:
            return seen[3], st.st_size
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        self.known[str(path)] = [*stamp, h.hexdigest()]
        self.changed = True
        return h.hexdigest(), st.st_size

    def save(self) -> None:
        if self.path and self.changed:
            from surgery.outputs import write_atomic

            write_atomic(self.path, json.dumps(self.known))


@functools.cache
def tool_version() -> str:
    """The package's version and a hash of its source: a changed checkout computes every cell again."""
    from surgery.resources import package_version

    root = Path(__file__).resolve().parents[2]  # surgery/
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return f"{package_version()}+{h.hexdigest()[:12]}"


def rules_hash(rules: list, target: str) -> str:
    """The content of the rule files that apply to `target`: a changed rule re-runs the cells it can touch."""
    from surgery.rulebook.engine import applies_to

    h = hashlib.sha256()
    for rule in sorted((r for r in rules if applies_to(r, [target])), key=lambda r: r.id):
        h.update(rule.id.encode())
        try:
            h.update(Path(rule.path).read_bytes())
        except (OSError, TypeError):
            h.update(repr(rule).encode())
    return h.hexdigest()[:16]


def backend_version(target: str) -> str:
    """The backend's version and whether it runs here ("unavailable" cells re-run once it is installed)."""
    from surgery.backends import get_backend

    b = get_backend(target)
    return f"{b.version}|{'on' if b.availability().ok else 'off'}"


def cell_key(request: SurveyRequest, sha: str, target: str, rules_id: str, backend: str) -> str:
    parts = [
        CELL_FORMAT,
        request.cell,
        sha,
        target,
        request.depth,
        request.fix,
        request.max_steps if request.fix else None,
        request.answers if request.fix else None,
        rules_id,
        tool_version(),
        backend,
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _cell_path(folder: Path, key: str) -> Path:
    return folder / "cells" / key[:2] / f"{key}.json"


def read_cell(folder: Path, key: str, request: SurveyRequest) -> dict | None:
    try:
        out = json.loads(_cell_path(folder, key).read_text())
    except (OSError, ValueError):
        return None
    cell = out.get("cell") if isinstance(out, dict) else None
    if not isinstance(cell, dict) or cell.get("outcome") not in OUTCOMES:
        return None
    if cell.get("timed_out") and (cell.get("timeout") or 0) < request.timeout:
        return None  # it ran out of time: given more now, it runs again
    return out


def write_cell(folder: Path, key: str, out: dict) -> None:
    from surgery.model import dumps
    from surgery.outputs import OutputError, write_atomic

    with contextlib.suppress(OutputError, OSError):  # a cache that cannot be written costs time, not results
        write_atomic(_cell_path(folder, key), dumps(out))
