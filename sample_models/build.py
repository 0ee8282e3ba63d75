"""Build the teaching models and their lesson page into this folder: `python sample_models/build.py`.

Deterministic: running it again writes the same bytes (a test checks that the committed files match)."""

from pathlib import Path

import onnx

from surgery.samples import SAMPLES, build, lessons
from surgery.usecases.lesson import failure as lesson_failure
from surgery.verdict import where_said

HERE = Path(__file__).resolve().parent


def lessons_markdown() -> str:
    out = [
        "# Sample models and their lessons",
        "",
        "Built by `python sample_models/build.py` (onnx.helper, deterministic). One model per failure class;",
        "open one in the app (Lessons page) or run `onnx-surgery check` / `onnx-surgery fix` on it.",
        "",
    ]
    for lesson in lessons():
        failure = lesson_failure(lesson)
        said = []
        if failure is not None and failure.words:
            where = f" ({where_said(failure.words_from)})" if where_said(failure.words_from) else ""
            said = [f"- **{failure.stage.value.capitalize()} stage, in its words**{where}:", "", "  ```"]
            said += [f"  {line}" for line in failure.words.splitlines()] + ["  ```"]
        elif failure is not None:
            said = [f"- **Refused at the {failure.stage.value} stage** (no recorded words for this version)"]
        out += [
            f"## `{lesson.name}.onnx` — {lesson.title}",
            "",
            f"- **{'Fails in' if lesson.rule else 'Accepted by'}:** `{lesson.backend}`"
            + (f", node `{lesson.node}`" if lesson.node else "")
            + (f" (`check --depth {lesson.depth}`)" if lesson.depth != "parse" else ""),
            *said,
            f"- **Why:** {lesson.why}",
            f"- **Fix:** {lesson.fix}" + (f" (rule `{lesson.rule}`)" if lesson.rule else ""),
            "",
        ]
    return "\n".join(out)


def main() -> None:
    for name in SAMPLES:
        path = HERE / f"{name}.onnx"
        onnx.save(build(name), str(path))
        print(f"wrote {path.relative_to(HERE.parent)}")
    (HERE / "README.md").write_text(lessons_markdown())
    print("wrote sample_models/README.md")


if __name__ == "__main__":
    main()
