#!/usr/bin/env bash
# The package as a user gets it: build the wheel from a copy of the tree, check it holds every file the package
# reads, install it (not editable) into a fresh venv, and from a folder outside the source tree run `targets`,
# `fix` on a built-in sample, the app's first page (AppTest) and `onnx-surgery app` until Streamlit's health
# endpoint answers; then stop it with SIGTERM. scripts/test.sh runs it; it also runs alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# the venv is ~600 MB in ~19k files: on tmpfs where there is room (deleting it from a disk mounted with
# `discard` took 46 s on the 2-core CI machine; on tmpfs, none)
BASE=${TMPDIR:-/tmp}
if [ -z "${TMPDIR:-}" ] && [ -w /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt 3000000 ]; then
  BASE=/dev/shm
fi
TMP=$(mktemp -d "$BASE/onnx-surgery-wheel.XXXXXX")
APP_PID=""
cleanup() {
  if [ -n "$APP_PID" ]; then kill -TERM "$APP_PID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
t0=$SECONDS

# a copy of the tracked and new files: the build leaves nothing in the tree, and no stale build/ gets in
mkdir "$TMP/src"
git ls-files -z --cached --others --exclude-standard |
  tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$TMP/src"
pip_quiet() { # pip's output only when it fails
  "$@" -q --disable-pip-version-check >"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log" >&2; return 1; }
}
pip_quiet "$PY" -m pip wheel --no-deps -w "$TMP/dist" "$TMP/src"
WHEEL=$(ls "$TMP"/dist/onnx_surgery-*.whl)
echo "== built $(basename "$WHEEL") ($((SECONDS - t0)) s)"

# every file the package reads at run time is in the wheel (a subpackage missing from pyproject's list fails here)
"$PY" - "$WHEEL" <<'EOF'
import subprocess, sys, zipfile

names = set(zipfile.ZipFile(sys.argv[1]).namelist())
home = {"surgery/": "surgery/", "rules/": "surgery/_rules/", "sample_models/": "surgery/_samples/",
        "app/": "surgery/_app/"}
tracked = subprocess.run(["git", "ls-files", *home], capture_output=True, text=True, check=True).stdout.split()
wanted = [p for p in tracked if p.endswith((".py", ".yaml", ".json", ".js", ".onnx"))]
missing = [p for p in wanted if next(h + p[len(s):] for s, h in home.items() if p.startswith(s)) not in names]
if missing:
    sys.exit("the wheel leaves out: " + ", ".join(missing) + "\n(a new subpackage goes in pyproject's packages)")
print(f"   the wheel holds all {len(wanted)} files the package reads")
EOF

t1=$SECONDS
"$PY" -m venv "$TMP/venv"
VPY="$TMP/venv/bin/python"
# the dependencies as a user gets them (from pip's cache where it has them); .pyc only for what runs
pip_quiet "$VPY" -m pip install --no-compile "$WHEEL"
echo "== installed into a fresh venv ($((SECONDS - t1)) s)"
BIN="$TMP/venv/bin"

mkdir "$TMP/work"
cd "$TMP/work" # nothing of the source tree is importable from here
unset PYTHONPATH
export PATH="$BIN:$PATH"
"$VPY" - "$TMP/venv" <<'EOF'
import sys
from pathlib import Path

import surgery
from surgery import resources

venv = Path(sys.argv[1]).resolve()
for p in (Path(surgery.__file__), resources.RULES_DIR, resources.SAMPLES_DIR, resources.APP_MAIN):
    assert p.resolve().is_relative_to(venv), f"{p} is not the installed copy (venv {venv})"
assert resources.APP_MAIN.is_file() and any(resources.RULES_DIR.glob("*.yaml"))
print("   surgery, its rules, samples and app come from the venv")
EOF
onnx-surgery --version
onnx-surgery targets
SAMPLE=$("$VPY" -c "from surgery.samples import sample_path; print(sample_path('resize_scales_chain'))")
onnx-surgery fix "$SAMPLE" -t tensorrt-static@8.2 -o fixed.onnx
"$VPY" -c "import onnx; onnx.checker.check_model('fixed.onnx')"

# the app's first page runs from the installed copy (pages, adapter, the graph's JS from pyvis's folder)
"$VPY" - <<'EOF'
from streamlit.testing.v1 import AppTest

from surgery.resources import APP_MAIN

at = AppTest.from_file(str(APP_MAIN), default_timeout=120)
at.run()
assert not at.exception, at.exception
assert at.session_state["model_name"] == "healthy_cnn.onnx"
print("   the app's workbench page runs (AppTest)")
EOF

# the server: up, healthy, and gone when the command gets SIGTERM
PORT=$("$VPY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
onnx-surgery app --port "$PORT" --address 127.0.0.1 >app.log 2>&1 &
APP_PID=$!
"$VPY" - "$PORT" <<'EOF' || { cat app.log; exit 1; }
import sys, time, urllib.request

url = f"http://127.0.0.1:{sys.argv[1]}/_stcore/health"
deadline = time.monotonic() + 90
while True:
    try:
        if urllib.request.urlopen(url, timeout=2).read() == b"ok":
            break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("onnx-surgery app: no answer from " + url)
        time.sleep(0.3)
print("   onnx-surgery app: " + url + " says ok")
EOF
kill -TERM "$APP_PID"
"$VPY" - "$PORT" <<'EOF' || { cat app.log; exit 1; }
import socket, sys, time

deadline = time.monotonic() + 10
while socket.socket().connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0:
    if time.monotonic() > deadline:
        sys.exit("onnx-surgery app: the server still answers 10 s after SIGTERM")
    time.sleep(0.2)
print("   SIGTERM stopped the server")
EOF
wait "$APP_PID" || true
APP_PID=""
echo "== wheel check passed ($((SECONDS - t0)) s)"
