"""'Split for deployment' in a real browser (Debian's Chromium driven by Playwright against a real `streamlit run`
server, the fixtures of test_browser.py): open the Scaler sample TensorRT 10.15 rejects, go to the Overview,
split, see the two parts drawn with their backends and the verification line, download the zip."""

import io
import json
import zipfile

from test_browser import page, pytestmark, server, settle  # noqa: F401 (fixtures, and the browser mark)


def test_split_for_deployment_shows_the_parts_and_the_verification(page, tmp_path):  # noqa: F811
    settle(page)
    page.locator(".st-key-side-lesson-ml_scaler button").click()
    settle(page)
    page.get_by_role("link", name="Overview").first.click()
    split = page.get_by_role("button", name="Split for deployment").first
    split.scroll_into_view_if_needed()
    split.click()
    chart = page.locator('[data-testid="stGraphVizChart"] svg')
    chart.wait_for()
    boxes = chart.locator("g.node text").evaluate_all(
        "els => els.map(e => e.textContent)"
    )  # SVG: no innerText
    assert "part 0: onnxruntime" in boxes and "part 1: tensorrt-static@10.15" in boxes, boxes
    assert boxes.count("accepts alone") == 2, boxes
    page.locator('[data-testid="stAlert"]', has_text="Deployable").wait_for()
    line = page.get_by_text("reproduces (seed 0): output: max abs 0, mean rel 0").first
    line.scroll_into_view_if_needed()
    assert line.is_visible()
    page.screenshot(path=str(tmp_path / "split.png"))
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download parts and plan (zip)").click()
    assert dl.value.suggested_filename == "ml_scaler.split-tensorrt-static-10.15.zip"
    path = tmp_path / "plan.zip"
    dl.value.save_as(str(path))
    archive = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
    plan = json.loads(archive.read("plan.json"))
    assert [p["backend"] for p in plan["parts"]] == ["onnxruntime", "tensorrt-static@10.15"]
    assert set(archive.namelist()) == {"plan.json", *(p["file"] for p in plan["parts"])}
    assert "Traceback" not in page.inner_text("body")
