#!/usr/bin/env bash
# Install everything the tests need on a fresh machine (Debian's chromium for the browser tests, the package
# with every backend extra) and run lint + the whole suite. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
  echo "== installing Debian's chromium (browser tests drive it headless; no browser is downloaded)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi

echo "== installing onnx-surgery with all backends and test tools"
python3 -m pip install -q --disable-pip-version-check -e ".[all,test]"

echo "== ruff"
python3 -m ruff format --check .
python3 -m ruff check .

echo "== pytest"
exec python3 -m pytest -n 2 --dist loadfile "$@"
