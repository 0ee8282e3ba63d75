"""`onnx-surgery app [MODEL]`: start the Streamlit workbench (on the built-in healthy sample by default)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from surgery.cli.options import add_targets
from surgery.resources import APP_MAIN as APP  # app/main.py in a checkout, the package's copy when installed

# How the server runs, for users and for the browser tests and benchmarks alike (bench/_browser.py): the look
# (verdict colours carry meaning, so the widgets' accent is blue, not Streamlit's red; no Deploy button), no
# browser of its own, no usage statistics, and no watching of the app's source files (a dev server's feature:
# nobody edits the installed app while it runs, and the watcher registers every imported module on each rerun), and
# no "magic" (the pages write every element by a call: rewriting each page's syntax tree for it cost ~0.3 s of the
# first page of every server, bench/app_open.py).
SERVER_FLAGS = [
    "--server.headless",
    "true",
    "--server.fileWatcherType",
    "none",
    "--browser.gatherUsageStats",
    "false",
    "--theme.primaryColor",
    "#1f5fbf",
    "--client.toolbarMode",
    "minimal",
    "--runner.magicEnabled",
    "false",
]


def add_parser(sub):
    p = sub.add_parser("app", help="start the workbench in the browser")
    p.add_argument("model", nargs="?", help="model to open (default: the healthy sample)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--address", default="localhost")
    p.add_argument("--models-dir", help="allow opening server paths under this folder")
    add_targets(p, default="the live parser where it runs, tensorrt-static@10.15 and onnxruntime")
    p.add_argument(
        "--lesson",
        metavar="NAME",
        help="open on a teaching case instead (its model, its target, its node): e.g. resize_scales_chain",
    )
    p.add_argument(
        "--upload-limit",
        default="2GiB",
        metavar="SIZE",
        help="largest upload accepted: 2GiB (the default: protobuf's own limit), 500MB, 300MiB; MB and GB are "
        "decimal, MiB and GiB binary, a bare number is MiB",
    )
    p.add_argument("--upload-limit-mb", type=int, help=argparse.SUPPRESS)  # before 2026-11: MiB
    return p


def upload_limit(args) -> int:
    """The upload limit in bytes (ValueError, one line, for a size that is not one)."""
    from surgery.specs import parse_size

    if getattr(args, "upload_limit_mb", None) is not None:
        return parse_size(f"{args.upload_limit_mb}MiB", "--upload-limit-mb")
    return parse_size(args.upload_limit)


def build_command(args) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    if args.model:
        from surgery.model import load_model

        load_model(args.model)  # a bad file fails here, with its one-line message (exit 2)
        env["ONNX_SURGERY_START_MODEL"] = str(Path(args.model).resolve())
    if args.models_dir:
        env["ONNX_SURGERY_MODELS_DIR"] = str(Path(args.models_dir).resolve())
    if getattr(args, "lesson", None):
        from surgery.samples import lessons

        names = [x.name for x in lessons() if x.rule]
        if args.lesson not in names:
            raise ValueError(f"--lesson '{args.lesson}': no such lesson. Note: lessons: {', '.join(names)}")
        env["ONNX_SURGERY_START_LESSON"] = args.lesson
    if getattr(args, "target", None):
        from surgery.backends import get_backend

        for target in args.target:
            get_backend(target)  # an unknown target fails here, with its one-line message (exit 2)
        env["ONNX_SURGERY_TARGETS"] = ",".join(args.target)
    limit = upload_limit(args)
    env["ONNX_SURGERY_UPLOAD_LIMIT"] = str(limit)
    cmd = [
        sys.executable,
        "-m",
        "surgery.cli.serve",  # `streamlit run`, after importing what every first page needs
        "run",
        str(APP),
        "--server.port",
        str(args.port),
        "--server.address",
        args.address,
        # Streamlit's limit is in MB, counted as 10**6 bytes by the browser (1024**2 on Windows) and 1024**2 by
        # the server: rounded up so that both let the limit's bytes through; the app holds the exact limit
        "--server.maxUploadSize",
        str(-(-limit // 10**6)),
        *SERVER_FLAGS,
    ]
    return cmd, env


def run(args) -> int:
    if not APP.exists():
        print(f"error: the app's files are missing ({APP}); reinstall onnx-surgery", file=sys.stderr)
        return 2
    try:
        cmd, env = build_command(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"ONNX Surgery: http://{args.address}:{args.port}", flush=True)
    if os.name == "posix":
        # the command becomes the server (same pid): stopping it (SIGTERM, Ctrl-C) stops the server, and no
        # parent is left waiting on a child that outlives it
        sys.stderr.flush()
        os.execve(cmd[0], cmd, env)
    return subprocess.call(cmd, env=env)
