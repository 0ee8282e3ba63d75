#!/usr/bin/env bash
# Install everything the tests need on a fresh machine (Debian's chromium for the browser tests, the package
# with every backend extra) and run lint, the wheel check (scripts/check_wheel.sh) and the whole suite. CI runs
# exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's chromium (browser tests drive it headless; no browser is downloaded) and graphviz (the graph view lays
# out with dot where it is installed; without it the builtin layout is used, and its tests still run)
missing=""
[ -x /usr/bin/chromium ] || missing="$missing chromium"
command -v dot >/dev/null || missing="$missing graphviz"
if [ -n "$missing" ]; then
  echo "== installing Debian's$missing"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq $missing >/dev/null
fi

echo "== installing onnx-surgery with all backends and test tools"
python3 -m pip install -q --disable-pip-version-check -e ".[all,test]"

echo "== ruff"
python3 -m ruff format --check .
python3 -m ruff check .

echo "== the wheel, installed in a fresh venv"
bash scripts/check_wheel.sh

echo "== pytest"
exec python3 -m pytest -n 2 --dist loadfile "$@"
