"""The CLI end to end: check (text/json/sarif, exit codes), targets, fix (writes a new file and a recipe)."""

import json
import os

import onnx
import pytest

from surgery.cli import main


def test_check_exit_codes_and_reasons(sample_dir, capsys):
    assert (
        main(
            ["check", str(sample_dir / "healthy_cnn.onnx"), "-t", "tensorrt-static@8.2", "-t", "onnxruntime"]
        )
        == 0
    )
    assert "summary: 2 of 2 target(s) accept" in capsys.readouterr().out
    assert main(["check", str(sample_dir / "resize_scales_chain.onnx"), "-t", "tensorrt-static@8.2"]) == 1
    out = capsys.readouterr().out
    assert (
        "Resize scales must be an initializer!" in out
        and "'/up/Resize'" in out
        and "fold-resize-scales" in out
    )
    assert "partitions:" in out


def test_check_json_and_sarif(sample_dir, capsys):
    main(["check", str(sample_dir / "unique_op.onnx"), "-t", "tensorrt-static@10.15", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    (report,) = data["reports"]
    assert [v["node"] for v in report["verdicts"] if v["status"] == "rejected"] == ["/post/Unique"]
    main(["check", str(sample_dir / "unique_op.onnx"), "-t", "tensorrt-static@10.15", "--format", "sarif"])
    sarif = json.loads(capsys.readouterr().out)
    (result,) = sarif["runs"][0]["results"]
    assert (
        sarif["version"] == "2.1.0"
        and result["locations"][0]["logicalLocations"][0]["name"] == "/post/Unique"
    )


def test_check_bad_input_and_unknown_target(tmp_path, sample_dir, capsys):
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"")
    assert main(["check", str(bad)]) == 2
    assert main(["check", str(sample_dir / "healthy_cnn.onnx"), "-t", "tensorrt-static@7.5"]) == 2
    assert "no support data for TensorRT 7.5" in capsys.readouterr().err


def test_targets_lists_versions(capsys):
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime" in out and "8.2" in out and "10.15" in out


def test_fix_writes_new_model_and_recipe_and_never_the_input(sample_dir, tmp_path, capsys):
    src = sample_dir / "resize_scales_chain.onnx"
    before = src.read_bytes()
    out, recipe = tmp_path / "fixed.onnx", tmp_path / "fixed.recipe.json"
    code = main(["fix", str(src), "-t", "tensorrt-static@8.2", "-o", str(out), "--recipe", str(recipe)])
    text = capsys.readouterr().out
    assert code == 0 and "applied fold-resize-scales" in text and "mean rel 0" in text
    assert src.read_bytes() == before
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    assert json.loads(recipe.read_text())["steps"][0]["rule"] == "fold-resize-scales"
    assert main(["fix", str(src), "-t", "tensorrt-static@8.2", "-o", str(src)]) == 2


def test_fix_exit_1_when_something_cannot_be_fixed(sample_dir, tmp_path, capsys):
    code = main(
        [
            "fix",
            str(sample_dir / "int64_out_of_range.onnx"),
            "-t",
            "tensorrt-static@8.6",
            "-o",
            str(tmp_path / "o.onnx"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1 and "'offset' = [5000000000]" in out and "applied int64-slice-bounds" in out


def test_fix_with_a_broken_rules_folder(sample_dir, tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("id: x\n")
    assert main(["fix", str(sample_dir / "healthy_cnn.onnx"), "--rules", str(tmp_path), "--dry-run"]) == 2
    assert "bad.yaml:1: field 'title': missing" in capsys.readouterr().err


def test_app_refuses_a_bad_model_before_starting_the_server(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage")
    assert main(["app", str(bad)]) == 2
    assert "not an ONNX model" in capsys.readouterr().err


def test_app_command_passes_the_model_and_limits_to_streamlit(sample_dir):
    import argparse

    from surgery.cli.app_cmd import build_command

    args = argparse.Namespace(
        model=str(sample_dir / "ml_scaler.onnx"),
        port=9999,
        address="127.0.0.1",
        models_dir=str(sample_dir),
        upload_limit="64MiB",
    )
    cmd, env = build_command(args)
    assert env["ONNX_SURGERY_START_MODEL"].endswith("ml_scaler.onnx")
    assert env["ONNX_SURGERY_MODELS_DIR"] == str(sample_dir.resolve())
    # 64 MiB is 67.1 MB: Streamlit's decimal browser check is given 68 MB, the app holds the exact bytes
    assert (
        cmd[cmd.index("--server.maxUploadSize") + 1] == "68" and cmd[cmd.index("--server.port") + 1] == "9999"
    )
    assert env["ONNX_SURGERY_UPLOAD_LIMIT"] == str(64 << 20)
    assert (
        "ONNX_SURGERY_TARGETS" not in env or env["ONNX_SURGERY_TARGETS"] == os.environ["ONNX_SURGERY_TARGETS"]
    )


def test_app_command_checks_its_targets_before_the_server_starts():
    import argparse

    from surgery.cli.app_cmd import build_command

    args = argparse.Namespace(model=None, port=1, address="x", models_dir=None, upload_limit="1MiB")
    args.target = ["tensorrt-static@8.6", "openvino"]
    _, env = build_command(args)
    assert env["ONNX_SURGERY_TARGETS"] == "tensorrt-static@8.6,openvino"
    args.target = ["tensorrt-static@8.6", "tensorrt-stattic@10.15"]
    with pytest.raises(ValueError, match="unknown target 'tensorrt-stattic@10.15'"):
        build_command(args)


def test_the_house_has_no_circle_and_every_arrow_points_down():
    """scripts/imports.py (the README's import graph): read with ast, no module of surgery/ imports one that
    imports it back, however far round; a new circle fails here, naming its modules."""
    import importlib.util

    from surgery.resources import IMPORT_ROOT

    spec = importlib.util.spec_from_file_location("imports", IMPORT_ROOT / "scripts" / "imports.py")
    imports = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(imports)
    g = imports.graph(IMPORT_ROOT)
    assert "surgery.isolate" in g["surgery.graph"]  # imports inside functions count too
    assert imports.circles(g) == []
    level = imports.floors(g)
    assert all(level[t] < level[m] for m, ts in g.items() for t in ts)
    assert imports.circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


def test_check_imports_only_what_it_runs(sample_dir):
    """Start-up is part of a check's cost: the parser declares only the command asked for, and rules are read
    only when something is refused (a healthy model on the predictor needs neither precision, fix nor rules)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom surgery.cli import main\n"
        f"rc = main(['check', {str(sample_dir / 'healthy_cnn.onnx')!r}, '-t', 'tensorrt-static@10.15'])\n"
        "print(rc, sorted(m for m in sys.modules if m.startswith(('surgery.usecases', 'surgery.rulebook'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "0 []", out


def test_a_finished_command_leaves_without_teardown_yet_loses_nothing(tmp_path):
    """`leave` ends the process without the interpreter's teardown, after the exit handlers (which stop workers
    and remove private folders) and with all of stdout written; a thread that is not a daemon is waited for."""
    import subprocess
    import sys

    def run(body: str) -> subprocess.CompletedProcess:
        code = (
            "import atexit, sys, threading, time, weakref\nfrom surgery.cli import leave\n"
            f"P = {str(tmp_path)!r}\n" + body
        )
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    done = run(
        "atexit.register(lambda: open(P + '/handler', 'w').write('ran'))\n"
        "class Held: pass\n"
        "held = Held(); weakref.finalize(held, lambda: open(P + '/finalizer', 'w').write('ran'))\n"
        "sys.stdout.write('x' * 200_000)\nleave(3)\nprint('after leave')"
    )
    assert done.returncode == 3 and done.stdout == "x" * 200_000, done.stderr
    assert (tmp_path / "handler").read_text() == "ran" and (tmp_path / "finalizer").read_text() == "ran"
    waited = run(
        "def late():\n    time.sleep(0.5); open(P + '/thread', 'w').write('ran')\n"
        "threading.Thread(target=late).start()\nleave(0)"
    )
    assert waited.returncode == 0 and (tmp_path / "thread").read_text() == "ran", waited.stderr
    profiled = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(tmp_path / "prof"), "-m", "surgery", "targets"],
        capture_output=True,
        timeout=60,
    )
    assert profiled.returncode == 0 and (tmp_path / "prof").stat().st_size > 0  # written after the command


def test_the_console_script_and_python_m_leave_with_the_command_s_exit_code(sample_dir):
    import subprocess
    import sys

    for module in ("surgery", "surgery.cli"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                module,
                "check",
                str(sample_dir / "deform_conv_custom.onnx"),
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1 and json.loads(done.stdout)["reports"][0]["summary"]["rejected"] == 1
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "onnx-surgery"]
    assert script.value == "surgery.cli:entry"


def test_versions_read_from_the_installed_folders_agree_with_importlib_metadata(capsys):
    from importlib.metadata import version

    from surgery.resources import installed_version

    for dist in ("onnx", "onnxruntime", "numpy", "onnx-surgery", "protobuf"):
        assert installed_version(dist) == version(dist)
    assert installed_version("no-such-distribution-here") is None
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"onnx-surgery {version('onnx-surgery')}\n"
