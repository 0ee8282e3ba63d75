"""What a survey is asked for and its pieces of work: the request (paths, targets, fix options, cache, engine),
one job per (model, target), the outcomes a cell can have, and the one-line error a request that cannot run
gets (exit 2)."""

from __future__ import annotations

from dataclasses import dataclass

from surgery.usecases.survey.cells import CELL

OUTCOMES = ("accepts", "rejects", "cannot confirm", "unavailable", "error")
ENGINES = ("local", "ray")


class SurveyInputError(ValueError):
    """What was asked cannot be surveyed (no such path, no model found, an unknown target, a broken rule file,
    Ray not installed): one line, nothing run."""


@dataclass
class SurveyRequest:
    paths: list[str]  # folders (searched recursively for .onnx), .onnx files, or text files listing models
    targets: list[str]
    fix: bool = False  # run the fix use case on every cell a target rejects
    rules_dirs: list[str] | None = (
        None  # as `fix --rules` (None: $ONNX_SURGERY_RULES, else the built-in rules)
    )
    depth: str | None = None  # parse | build (None: each backend's default, as `check`)
    workers: int = 1
    timeout: float = 300.0  # seconds per cell (one model, one target, fix included)
    engine: str = "local"  # local | ray
    ray_address: str | None = None  # None with engine "ray": start a local Ray runtime
    cache_dir: str | None = None  # None: $ONNX_SURGERY_SURVEY_CACHE, else ~/.cache/onnx-surgery/survey
    use_cache: bool = True  # False: compute every cell, read and write no cache (probe verdicts included)
    probe_cache: bool = (
        True  # the backends' probe verdicts under ~/.cache/onnx-surgery, as `check` keeps them
    )
    max_steps: int = 100
    answers: bool = False  # answer a rule's question with the model's test data (test_data_set_0 beside it)
    cell: str = CELL


@dataclass
class Job:
    """One cell to compute: a model file and a target."""

    model: int  # index in the survey's model list
    path: str
    target: str
    key: str  # the cache key
