"""Where the files that ship with the package are: the built-in rules, the teaching models and the Streamlit app.

In the repository they stay at the top (rules/, sample_models/, app/). The wheel carries them inside the package,
as surgery/_rules, surgery/_samples and surgery/_app (pyproject's package-dir maps them there), so an installed
package reads its own copy; a source checkout (an editable install, or the tree on PYTHONPATH) reads the folders
at the top. Everything that locates them asks here."""

from __future__ import annotations

import site
from importlib.resources import files
from pathlib import Path

PACKAGE_DIR = Path(str(files("surgery"))).resolve()  # a wheel installs plain files: a real folder
IMPORT_ROOT = PACKAGE_DIR.parent  # the folder `surgery` is imported from (a checkout, or site-packages)


def _find(packed: str, source: str) -> Path:
    inside = PACKAGE_DIR / packed
    return inside if inside.is_dir() else IMPORT_ROOT / source


RULES_DIR = _find("_rules", "rules")  # the built-in rules (*.yaml)
SAMPLES_DIR = _find("_samples", "sample_models")  # the teaching models (*.onnx)
APP_DIR = _find("_app", "app")  # the Streamlit app: main.py, pages/, static/
APP_MAIN = APP_DIR / "main.py"


def installed_in_site_packages() -> bool:
    """Whether `surgery` is imported from a site-packages folder (a child process finds it there by itself)."""
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    return any(Path(s).resolve() == IMPORT_ROOT for s in sites if s)


def package_version() -> str:
    """The installed distribution's version ("dev" in a checkout that was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("onnx-surgery")
    except PackageNotFoundError:
        return "dev"
