"""Record what a real TensorRT parser (and builder) says for each check's fixture, so the predictor can show the
backend's exact words instead of ours.

    python scripts/record_trt_words.py

Reads surgery/backends/tensorrt/data/checks.yaml, builds every fixture marked `reproduces_on_rtx`, runs it
through the installed TensorRT-RTX (parse; and build for stage-build checks) and writes
surgery/backends/tensorrt/data/recorded-tensorrt-rtx.json: per check id the error's code, function, node name
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

from surgery.backends.tensorrt.records import CHECKS_PATH, RECORDED_PATH, fixture_model, load_checks  # noqa: E402
from surgery.backends.tensorrt.worker import build_error, parse  # noqa: E402


def main() -> None:
    import tensorrt_rtx as trt

    logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
    recorded, missed = {}, {}
    for check in load_checks():
        if not check.reproduces_on_rtx:
            continue
        model = fixture_model(check)
        ok, errors = parse(trt, logger, model.SerializeToString())
        errors = [
            {
                "node": e["node"],
                "node_name": e["name"],
                "code": e["code"],
                "func": e["func"],
                "text": e["desc"],
            }
            for e in errors
        ]
        if check.stage == "build":
            if not ok:
                missed[check.id] = f"the parser refuses the fixture: {errors[0]['text']}"
                continue
            text = build_error(trt, model.SerializeToString())
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
