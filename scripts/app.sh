#!/usr/bin/env bash
# Install onnx-surgery with every backend this machine can run, and open the app on the built-in sample.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[all]"
exec onnx-surgery app "$@"
