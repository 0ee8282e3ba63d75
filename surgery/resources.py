"""Where the files that ship with the package are: the built-in rules, the teaching models and the Streamlit app.

In the repository they stay at the top (rules/, sample_models/, app/). The wheel carries them inside the package,
as surgery/_rules, surgery/_samples and surgery/_app (pyproject's package-dir maps them there), so an installed
package reads its own copy; a source checkout (an editable install, or the tree on PYTHONPATH) reads the folders
at the top. Everything that locates them asks here."""

from __future__ import annotations

import os
import re
import site
import sys
from pathlib import Path

# A wheel installs plain files, so the package is a real folder (importlib.resources.files would say the same,
# after importing importlib.resources: ~15 ms of every CLI call)
PACKAGE_DIR = Path(__file__).resolve().parent
IMPORT_ROOT = PACKAGE_DIR.parent  # the folder `surgery` is imported from (a checkout, or site-packages)


def _find(packed: str, source: str) -> Path:
    inside = PACKAGE_DIR / packed
    return inside if inside.is_dir() else IMPORT_ROOT / source


RULES_DIR = _find("_rules", "rules")  # the built-in rules (*.yaml)
SAMPLES_DIR = _find("_samples", "sample_models")  # the teaching models (*.onnx)
APP_DIR = _find("_app", "app")  # the Streamlit app: main.py, views/ (its pages), static/
APP_MAIN = APP_DIR / "main.py"


def installed_in_site_packages() -> bool:
    """Whether `surgery` is imported from a site-packages folder (a child process finds it there by itself)."""
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    return any(Path(s).resolve() == IMPORT_ROOT for s in sites if s)


def package_version() -> str:
    """The installed distribution's version ("dev" in a checkout that was never installed)."""
    return installed_version("onnx-surgery") or "dev"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def installed_version(dist: str) -> str | None:
    """The version of the installed distribution `dist`, or None. Read from the name of its `.dist-info` folder,
    `{name}-{version}.dist-info` (the packaging specification, "Recording installed projects"), in the first
    folder on sys.path that has one, as importlib.metadata finds it (a listing per folder: ~1 ms, where
    importlib.metadata's import and first lookup are ~30 ms); importlib.metadata itself is asked only when no
    such folder is found (an egg, a zip)."""
    want = _normal(dist)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # not a folder (a zip), or gone
            continue
        for name in names:
            if name.endswith(".dist-info") and "-" in name:
                project, version = name[: -len(".dist-info")].split("-", 1)
                if _normal(project) == want:
                    return version
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
