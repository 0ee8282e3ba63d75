"""How fast is `onnx-surgery survey`? A sample of the corpus (bench/corpus/build.py) surveyed with 1 and 2 local
workers and on a local Ray runtime, each with an empty cache, then an incremental re-run with nothing changed
(every cell from the cache). Prints the times and the ratios, and checks the engines agree.

    python bench/survey_speed.py [--limit 12] [--targets onnxruntime tensorrt-static@10.15] [--fix]
                                 [--families ...] [--max-mb 30] [--timeout 300]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPUS = Path(os.environ.get("ONNX_SURGERY_CORPUS", "~/.cache/onnx-surgery/corpus")).expanduser()


def sample(limit: int, families: list[str] | None, max_mb: float) -> list[Path]:
    """`limit` corpus models spread over the families (round robin, in the manifest's order), each at most
    `max_mb` MB."""
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    records = manifest["models"] if isinstance(manifest, dict) else manifest
    by_family: dict[str, list] = {}
    for r in records:
        if (families is None or r["family"] in families) and r.get("bytes", 0) <= max_mb * 1e6:
            by_family.setdefault(r["family"], []).append(r)
    chosen, k = [], 0
    while len(chosen) < limit and any(k < len(v) for v in by_family.values()):
        for v in by_family.values():
            if k < len(v) and len(chosen) < limit:
                chosen.append(CORPUS / v[k]["path"])
        k += 1
    return chosen


def run(label: str, request, rows: list) -> dict:
    from surgery.isolate import shutdown
    from surgery.usecases.survey import survey

    shutdown()  # every run starts its children afresh (their imports are part of the cost)
    t0 = time.perf_counter()
    result = survey(request)
    seconds = time.perf_counter() - t0
    rows.append((label, seconds, result.computed, result.cached, result.errors))
    print(
        f"  {label}: {seconds:.1f} s ({result.computed} computed, {result.cached} cached, {result.errors} errors)",
        flush=True,
    )
    return result.report


def main() -> None:
    from surgery.usecases.survey import comparable
    from surgery.usecases.survey.request import SurveyRequest

    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=12)
    ap.add_argument("--targets", nargs="*", default=["onnxruntime", "tensorrt-static@10.15"])
    ap.add_argument("--families", nargs="*", default=None)
    ap.add_argument("--max-mb", type=float, default=30)
    ap.add_argument("--fix", action="store_true", help="survey --fix (what the repair-rate bench measures)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument(
        "--probe-cache",
        action="store_true",
        help="let the backends read the probe verdicts ~/.cache/onnx-surgery keeps (default: asked afresh)",
    )
    args = ap.parse_args()
    models = sample(args.limit, args.families, args.max_mb)
    size = sum(p.stat().st_size for p in models) / 1e6
    print(
        f"{len(models)} corpus models ({size:.0f} MB) × {len(args.targets)} targets; fix={args.fix}; {os.cpu_count()} CPUs"
    )
    rows: list = []
    with tempfile.TemporaryDirectory(prefix="survey-speed-") as tmp:

        def request(name: str, **kw) -> SurveyRequest:
            return SurveyRequest(
                [str(p) for p in models],
                list(args.targets),
                fix=args.fix,
                timeout=args.timeout,
                cache_dir=str(Path(tmp) / name),
                probe_cache=args.probe_cache,  # off: every backend asked afresh, as on a new machine
                **kw,
            )

        one = run("local, 1 worker", request("one", workers=1), rows)
        two = run("local, 2 workers", request("two", workers=2), rows)
        ray = None
        if not args.no_ray:
            try:
                import ray as _  # noqa: F401

                ray = run("Ray (local runtime, 2 CPUs)", request("ray", workers=2, engine="ray"), rows)
            except ImportError:
                print("  Ray: not installed (pip install 'onnx-surgery[ray]')")
        again = run("re-run, nothing changed (1 worker)", request("one", workers=1), rows)
    base = rows[0][1]
    print("\n| run | seconds | cells computed | from the cache | errors | vs 1 worker |")
    print("|---|---|---|---|---|---|")
    for label, seconds, computed, cached, errors in rows:
        print(f"| {label} | {seconds:.1f} | {computed} | {cached} | {errors} | {base / seconds:.1f}× |")
    same = comparable(one) == comparable(two) and (ray is None or comparable(one) == comparable(ray))
    print(f"\nengines agree (comparable reports equal): {same}")
    print(f"re-run equals the first run: {comparable(again) == comparable(one)}")


if __name__ == "__main__":
    main()
