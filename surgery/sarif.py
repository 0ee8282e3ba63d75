"""The SARIF 2.1.0 log every command writes for CI (check, fix, survey): one run of the onnx-surgery driver."""

from __future__ import annotations

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def sarif_log(
    rules: list[dict], results: list[dict], artifacts: list[str], version: str | None = None
) -> dict:
    """A SARIF log: `rules` (reportingDescriptor objects), `results`, the files they are about (`artifacts`)."""
    driver = {"name": "onnx-surgery"}
    if version:
        driver["version"] = version
    driver |= {"informationUri": "https://github.com/onnx/onnx", "rules": rules}
    return {
        "version": "2.1.0",
        "$schema": SCHEMA,
        "runs": [
            {
                "tool": {"driver": driver},
                "artifacts": [{"location": {"uri": uri}} for uri in artifacts],
                "results": results,
            }
        ],
    }
