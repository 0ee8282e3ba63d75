"""The workspace: the untouched original, an ordered recipe of steps, and the current model.

Undo/redo move a cursor over the recipe; every state is a replay of the recipe's first steps on the original,
so a saved recipe re-applied to the same original gives the same model bit for bit (same fingerprint).
Snapshots of replayed states are cached so undo/redo are instant on models of ordinary size: the original,
the current model and the one before it always, and a few others, least recently used first out (each state
is a whole model: a fix of ten steps on a model with its weights in the file held eleven copies of them).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from onnx import ModelProto

from surgery.fixes import get_fix
from surgery.graph import forget_version
from surgery.model import Model, copy_message, fingerprint, load_model, save_model

RECIPE_FORMAT = "onnx-surgery-recipe/1"


class RecipeError(ValueError):
    """A recipe file that cannot be used; the message names the file and the step."""


@dataclass(frozen=True)
class Step:
    """One replayable edit: a fix primitive and its parameters, plus where it came from."""

    fix: str
    params: dict[str, Any] = field(default_factory=dict)
    rule: str | None = None  # the rule that proposed it, if any
    note: str = ""
    # the node key it was applied to (a rule's proposal: the first node of a batch); where it came from, not
    # part of the edit, so two steps that make the same edit are equal
    node: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: v for k, v in d.items() if v not in (None, "", {})} | {"fix": self.fix}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        if not isinstance(d, dict) or "fix" not in d:
            raise ValueError(f"a recipe step needs a 'fix' field, got {d!r}")
        node = d.get("node")
        return cls(
            d["fix"],
            dict(d.get("params") or {}),
            d.get("rule"),
            d.get("note", ""),
            node if isinstance(node, str) else None,
        )

    def describe(self) -> str:
        """One line: the primitive and its parameters, long lists shortened, a batch as its first entry."""
        who = f" [rule {self.rule}]" if self.rule else ""
        each = self.params.get("each") if set(self.params) == {"each"} else None
        if each is not None:
            first = _args(each[0]) if each else ""
            more = f" and {len(each) - 1} more" if len(each) > 1 else ""
            return f"{self.fix}({first}){more}{who}"
        return f"{self.fix}({_args(self.params)}){who}"


def _args(params: dict[str, Any]) -> str:
    def short(v: Any) -> str:
        if isinstance(v, list) and len(v) > 4:
            return f"[{', '.join(map(repr, v[:3]))}, ... {len(v)} in all]"
        return repr(v)

    return ", ".join(f"{k}={short(v)}" for k, v in params.items())


def apply_step(proto: ModelProto, step: Step, base_dir: Path | None = None) -> ModelProto:
    """Apply one step to a copy of `proto`. Primitives are pure; this never mutates `proto`. A step whose params
    are {"each": [params, ...]} applies its primitive once per entry, in order (a rule applied to every node it
    matched: one recipe entry, one verification)."""
    fix = get_fix(step.fix)
    batch = step.params.get("each") if set(step.params) == {"each"} else None
    out = proto
    for one in batch if batch is not None else [step.params]:
        params = dict(one)
        if "base_dir" in fix.params and base_dir is not None:
            params.setdefault("base_dir", str(base_dir))
        out = fix(out, **params)
    if out is proto:
        out = copy_message(proto)
    return out


class Workspace:
    """Original + recipe + cursor. `current` is the model after the first `cursor` steps. Besides the original,
    the current model and the one before it (an undo), `kept_states` other states stay cached (the app's
    history and diffs ask for them; a headless fix keeps none); the rest are replayed when asked for."""

    KEPT_STATES = 4

    def __init__(self, original: Model, *, kept_states: int = KEPT_STATES):
        self.original = original
        self.steps: list[Step] = []
        self.cursor = 0
        self.kept_states = kept_states
        # the model after i steps, for the i cached; least recently used first
        self._states: dict[int, ModelProto] = {0: original.proto}

    # -- constructors ------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, src: str | os.PathLike | bytes, **kw) -> Workspace:
        return cls(load_model(src, **kw))

    # -- state -----------------------------------------------------------------------------------------------
    @property
    def current(self) -> ModelProto:
        return self._state(self.cursor)

    @property
    def recipe(self) -> list[Step]:
        """The steps in effect (undone steps are kept for redo but are not part of the recipe)."""
        return self.steps[: self.cursor]

    @property
    def can_undo(self) -> bool:
        return self.cursor > 0

    @property
    def can_redo(self) -> bool:
        return self.cursor < len(self.steps)

    def fingerprint(self) -> str:
        return fingerprint(self.current, self.original.own_file)

    def model_at(self, steps: int) -> ModelProto:
        """The model after the first `steps` steps (0 = the original)."""
        return self._state(steps)

    def _state(self, i: int) -> ModelProto:
        model = self._states.pop(i, None)
        if model is None:
            j = max(k for k in self._states if k < i)  # the original is always there
            model = self._states[j]
            for k in range(j + 1, i):  # the states on the way are kept as any other (an undo after a replay)
                model = apply_step(model, self.steps[k - 1], self.original.base_dir)
                self._states[k] = model
                self._trim()
            model = apply_step(model, self.steps[i - 1], self.original.base_dir)
        self._states[i] = model  # the most recently used last
        self._trim()
        return model

    def _trim(self) -> None:
        """Drop the least recently used states beyond `kept_states` (never the original, the current model or
        the one before it), and every state past the steps."""
        pinned = {0, self.cursor, self.cursor - 1}
        for i in [i for i in self._states if i > len(self.steps)]:
            forget_version(self._states.pop(i))
        others = [i for i in self._states if i not in pinned]
        dropped = [self._states.pop(i) for i in others[: max(0, len(others) - self.kept_states)]]
        for model in dropped:  # nor are their facts and fingerprints kept (those hold the model)
            forget_version(model)

    # -- editing ---------------------------------------------------------------------------------------------
    def apply(self, step: Step) -> ModelProto:
        """Apply a step after the cursor. Undone steps beyond the cursor are dropped (like any editor)."""
        new = apply_step(self.current, step, self.original.base_dir)
        del self.steps[self.cursor :]
        self.steps.append(step)
        self.cursor += 1
        self._states.pop(self.cursor, None)
        self._states[self.cursor] = new
        self._trim()
        return new

    def undo(self) -> ModelProto:
        if not self.can_undo:
            raise IndexError("nothing to undo")
        self.cursor -= 1
        return self.current

    def redo(self) -> ModelProto:
        if not self.can_redo:
            raise IndexError("nothing to redo")
        self.cursor += 1
        return self.current

    def discard_undone(self) -> None:
        """Forget the undone steps (no redo), e.g. after a step was rolled back because it failed to verify."""
        del self.steps[self.cursor :]
        self._trim()

    def replay(self, steps: list[Step] | None = None) -> ModelProto:
        """Rebuild from the original by replaying `steps` (default: the recipe). Resets the cache."""
        steps = list(self.recipe if steps is None else steps)
        self.steps, self.cursor = steps, len(steps)
        self._states = {0: self.original.proto}
        return self.current

    # -- recipe files ------------------------------------------------------------------------------------------
    def recipe_dict(self) -> dict[str, Any]:
        return {
            "format": RECIPE_FORMAT,
            "original": {
                "source": Path(self.original.source).name,
                "fingerprint": self.original.fingerprint(),
            },
            "result_fingerprint": self.fingerprint(),
            "steps": [s.to_dict() for s in self.recipe],
        }

    def save_recipe(self, path: str | os.PathLike) -> Path:
        from surgery.outputs import write_atomic

        return write_atomic(path, json.dumps(self.recipe_dict(), indent=2) + "\n")

    def load_recipe(self, path_or_text: str | os.PathLike, *, check_original: bool = True) -> ModelProto:
        steps, data = read_recipe(path_or_text)
        want = (data.get("original") or {}).get("fingerprint")
        if check_original and want and want != self.original.fingerprint():
            raise RecipeError(
                f"recipe was made for a model with fingerprint {want}, this one is {self.original.fingerprint()}. "
                "Note: pass check_original=False (CLI: replay --force) to apply it anyway"
            )
        return self.replay(steps)

    # -- export ------------------------------------------------------------------------------------------------
    def export(self, path: str | os.PathLike, *, external_data: bool | None = None) -> Path:
        """Write the current model to a new file. Refuses to overwrite the original.

        External data is written beside the new file when the original used it, when asked, or when the model
        would exceed protobuf's 2 GiB limit. ModelLoadError when the original's file, which holds weights the
        model refers to, has changed since it was read.
        """
        path = Path(path)
        if self.original.base_dir is not None and path.resolve() == Path(self.original.source).resolve():
            raise ValueError(f"refusing to overwrite the original model {path}; choose another file name")
        if external_data is None and self.original.has_external_data:
            external_data = True
        original = self.original
        original.check_unchanged()  # the weights written are read from the original's file
        return save_model(
            self.current, path, original.base_dir, external=external_data, own_file=original.own_file
        )


RECIPE_MAX_BYTES = 64 * 1024 * 1024  # a recipe is steps and their parameters; the largest pins a few lists
RECIPE_MAX_STEPS = 10_000  # replay cost is bounded before any step runs


def read_recipe(path_or_text: str | os.PathLike) -> tuple[list[Step], dict[str, Any]]:
    """Parse a recipe (a file's path, or its text): JSON, or YAML with the same fields, read as every user file
    is (surgery.inputs: a regular file, size and nesting limits, no YAML aliases). Errors name the file and the
    step, in one line (RecipeError)."""
    import yaml

    from surgery.inputs import InputError, check_structure, load_structured

    text = str(path_or_text)
    where = "<recipe>"
    try:
        if isinstance(path_or_text, os.PathLike) or not text.lstrip().startswith(("{", "format")):
            where = text
            data = load_structured(text, "a recipe", RECIPE_MAX_BYTES)
        else:
            check_structure(text, where, "a recipe")
            try:
                data = json.loads(text)
            except ValueError:
                data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except InputError as exc:
        raise RecipeError(str(exc)) from None
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        raise RecipeError(f"{where}: not a JSON or YAML recipe: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or data.get("format") != RECIPE_FORMAT:
        raise RecipeError(f"{where}: not an onnx-surgery recipe (expected format: {RECIPE_FORMAT})")
    raw_steps = data.get("steps") or []
    if not isinstance(raw_steps, list):
        raise RecipeError(f"{where}: 'steps' must be a list of steps")
    if len(raw_steps) > RECIPE_MAX_STEPS:
        raise RecipeError(f"{where}: {len(raw_steps):,} steps; a recipe holds at most {RECIPE_MAX_STEPS:,}")
    steps = []
    for i, raw in enumerate(raw_steps):
        try:
            step = Step.from_dict(raw)
            if not isinstance(step.fix, str) or not isinstance(raw.get("params", {}), dict):
                raise ValueError("'fix' must name a primitive and 'params' be a mapping")
        except (ValueError, KeyError, TypeError) as exc:
            raise RecipeError(
                f"{where}: step {i + 1}: {str(exc).splitlines()[0] if str(exc) else exc}"
            ) from None
        steps.append(step)
    return steps, data
