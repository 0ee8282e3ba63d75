"""`onnx-surgery app` is the server: stopping the command (SIGTERM, as a service manager or `kill` does) stops
Streamlit and frees its port, instead of leaving an orphaned server behind."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_sigterm_to_the_app_command_stops_the_server(tmp_path):
    port = _free_port()
    env = dict(os.environ, ONNX_SURGERY_USER_RULES=str(tmp_path / "rules"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "surgery", "app", "--port", str(port), "--address", "127.0.0.1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own group: the cleanup below can reach whatever it started
    )
    try:
        deadline = time.monotonic() + 90  # 2 shared cores in CI
        while True:
            try:
                if (
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read()
                    == b"ok"
                ):
                    break
            except OSError:
                assert proc.poll() is None, f"onnx-surgery app exited with {proc.returncode}"
                assert time.monotonic() < deadline, "streamlit did not start"
                time.sleep(0.2)

        proc.send_signal(signal.SIGTERM)  # the command's own pid, not its group
        deadline = time.monotonic() + 10
        while _answers(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _answers(port), "the server still answers 10 s after the command got SIGTERM"
        proc.wait(timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["run", "app.py", "--server.port", "1"],
            ["run", "--runner.postScriptGC=false", "app.py", "--server.port", "1"],
        ),
        (["run", "app.py", "--runner.postScriptGC=true"], ["run", "app.py", "--runner.postScriptGC=true"]),
        (["version"], ["version"]),
    ],
)
def test_the_server_runs_without_a_full_collection_after_each_rerun_unless_told(monkeypatch, args, expected):
    """`python -m surgery.cli.serve run …` turns Streamlit's post-run gc.collect(2) off (a user's own setting wins)."""
    from streamlit.web import cli

    from surgery.cli import serve

    seen = []
    monkeypatch.setattr(serve, "preload", lambda: None)
    monkeypatch.setattr(cli, "main", lambda prog_name: seen.append(list(sys.argv)))
    monkeypatch.setattr(sys, "argv", ["serve.py", *args])
    monkeypatch.setattr("gc.freeze", lambda: None)
    serve.main()
    assert seen == [["streamlit", *expected]]
