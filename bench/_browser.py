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
from surgery.cli.app_cmd import build_command  # noqa: E402  (what `onnx-surgery app` runs)

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
    upload_limit: str = "2GiB",
) -> tuple[subprocess.Popen, str]:
    """The server `onnx-surgery app [model] --upload-limit SIZE` runs, on 127.0.0.1 (`port`, else a free one),
    headless, in a process group of its own. Returns the process and the URL once the server says it is
    healthy; RuntimeError when it does not within 30 s."""
    from argparse import Namespace

    port = port or free_port()
    args = Namespace(
        model=str(model) if model is not None else None,
        port=port,
        address="127.0.0.1",
        models_dir=None,
        upload_limit=upload_limit,
        upload_limit_mb=None,
        lesson=None,
    )
    cmd, env = build_command(args)
    env.update(env_extra or {})
    return serve(cmd, env, port)


def serve(cmd: list[str], env: dict, port: int) -> tuple[subprocess.Popen, str]:
    """A Streamlit server started by `cmd` on 127.0.0.1:`port`, in a process group of its own: the process and
    the URL once it says it is healthy; RuntimeError when it does not within 30 s."""
    proc = subprocess.Popen(
        cmd,
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
