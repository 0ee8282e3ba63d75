"""Record what a real TensorRT parser (and builder) says for each check's fixture, so the predictor can show the
backend's exact words instead of ours.

    python scripts/record_trt_words.py

Reads surgery/backends/data/tensorrt/checks.yaml, builds every fixture marked `reproduces_on_rtx`, runs it
through the installed TensorRT-RTX (parse; and build for stage-build checks) and writes
surgery/backends/data/tensorrt/recorded-tensorrt-rtx.json: per check id the error's code, function, node name
and text exactly as the parser printed it (only the line TensorRT-RTX appends without a GPU is removed, as the
live backend does). A fixture that the parser accepts is listed under "not_reproduced" rather than recorded.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from surgery.backends.tensorrt_static import CHECKS_PATH, RECORDED_PATH, fixture_model, load_checks  # noqa: E402
from surgery.backends.tensorrt_worker import clean_words  # noqa: E402


def _parse(trt, logger, model):
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse(model.SerializeToString())
    errors = []  # read while the parser lives: its error objects point into it
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        errors.append(
            {
                "node": e.node(),
                "node_name": e.node_name(),
                "code": str(e.code()).split(".")[-1],
                "func": e.func(),
                "text": clean_words(e.desc()),
            }
        )
    return ok, errors


def _build_error(trt, model) -> str | None:
    """The builder's first error on the parsed model, or None when it builds."""
    lines: list[str] = []

    class Collect(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            if severity <= trt.ILogger.Severity.ERROR:
                lines.append(msg)

    logger = Collect()
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    trt.OnnxParser(network, logger).parse(model.SerializeToString())
    engine = builder.build_serialized_network(network, builder.create_builder_config())
    if engine is not None:
        return None
    return clean_words(lines[0]) if lines else "the builder returned no engine"


def main() -> None:
    import tensorrt_rtx as trt

    logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
    recorded, missed = {}, {}
    for check in load_checks():
        if not check.reproduces_on_rtx:
            continue
        model = fixture_model(check)
        ok, errors = _parse(trt, logger, model)
        if check.stage == "build":
            if not ok:
                missed[check.id] = f"the parser refuses the fixture: {errors[0]['text']}"
                continue
            text = _build_error(trt, model)
            if text is None:
                missed[check.id] = "the builder builds the fixture"
                continue
            recorded[check.id] = {
                "stage": "build",
                "code": "",
                "func": "buildSerializedNetwork",
                "text": text,
            }
            continue
        if ok:
            missed[check.id] = "the parser accepts the fixture"
            continue
        mine = [e for e in errors if e["node_name"] == "n"] or [e for e in errors if e["node"] < 0] or errors
        recorded[check.id] = {"stage": "parse", **mine[0]}
    out = {
        "_about": "Exact error texts of a real TensorRT parser/builder on each check's fixture (checks.yaml), "
        "written by scripts/record_trt_words.py. Only the line TensorRT-RTX appends without a GPU is removed.",
        "recorded_with": f"TensorRT-RTX {trt.__version__}",
        "installed_from": "pip tensorrt-rtx-cu12, on a machine without a GPU",
        "recorded_on": datetime.date.today().isoformat(),
        "checks_file": str(CHECKS_PATH.relative_to(ROOT)),
        "words": recorded,
        "not_reproduced": missed,
    }
    RECORDED_PATH.write_text(json.dumps(out, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {RECORDED_PATH.relative_to(ROOT)}: {len(recorded)} recorded, {len(missed)} not reproduced")
    for k, why in missed.items():
        print(f"  not reproduced: {k}: {why}")


if __name__ == "__main__":
    main()
