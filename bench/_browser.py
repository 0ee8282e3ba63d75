"""Debian's headless Chromium (never downloaded) and a real `streamlit run` server of the app: what the browser
tests (tests/test_browser*.py) and the benchmarks that open the app (view_shots, app_open, graph_draw) share."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from surgery.cli.app_cmd import SERVER_FLAGS  # noqa: E402  (what `onnx-surgery app` runs with)

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    model: Path | None = None,
    env_extra: dict | None = None,
    *,
    port: int | None = None,
    max_upload_mb: int | None = None,
) -> tuple[subprocess.Popen, str]:
    """`streamlit run app/main.py` on 127.0.0.1 (`port`, else a free one), headless, in a process group of its
    own; `model` is the model it opens first. Returns the process and the URL once the server says it is
    healthy; RuntimeError when it does not within 30 s."""
    port = port or free_port()
    env = dict(os.environ, **(env_extra or {}))
    if model is not None:
        env["ONNX_SURGERY_START_MODEL"] = str(Path(model).resolve())
    upload = ["--server.maxUploadSize", str(max_upload_mb)] if max_upload_mb else []
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "surgery.cli.serve",  # what `onnx-surgery app` runs: `streamlit run`, the first page's imports done
            "run",
            str(ROOT / "app" / "main.py"),
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            *upload,
            *SERVER_FLAGS,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError("streamlit did not start")


def stop_server(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Send `sig` to the server's process group (unless it is gone already) and wait for it."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    proc.wait(timeout=20)
