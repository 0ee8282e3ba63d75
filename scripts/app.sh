#!/usr/bin/env bash
# Install onnx-surgery with every backend this machine can run, and open the app on the README's teaching case
# (the classic Resize that TensorRT 8.2 refuses); with arguments, as `onnx-surgery app` takes them.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[all]"
if [ "$#" -eq 0 ]; then
  exec onnx-surgery app --lesson resize_scales_chain
fi
exec onnx-surgery app "$@"
