"""Replay a saved recipe on a model, headless (CI): the steps a session or `fix --recipe` recorded, applied in
order to the original, giving the same model bit for bit. A recipe made for another model is refused with both
fingerprints unless forced; a recipe that cannot be read is refused in one line (surgery.workspace.read_recipe)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from surgery.model import Model
from surgery.workspace import RecipeError, Workspace, read_recipe


@dataclass
class ReplayOutcome:
    steps: int
    fingerprint: str  # of the replayed model
    expected: str | None  # the recipe's result_fingerprint, where it recorded one
    made_for: str | None  # the fingerprint of the model the recipe was made for
    original: str  # this model's

    @property
    def same_model(self) -> bool:
        return self.made_for is None or self.made_for == self.original

    @property
    def bit_for_bit(self) -> bool | None:
        """Whether the result is the recipe's own result (None: the recipe recorded none)."""
        return None if self.expected is None else self.expected == self.fingerprint

    def to_dict(self) -> dict:
        return {
            "steps": self.steps,
            "fingerprint": self.fingerprint,
            "expected": self.expected,
            "made_for": self.made_for,
            "original": self.original,
            "bit_for_bit": self.bit_for_bit,
        }


def apply_steps(ws: Workspace, steps) -> tuple[int, str] | None:
    """Apply `steps` in order; at the first that does not apply to this model, its number (from 1) and why in one
    line, the steps before it kept."""
    from surgery.fixes import FixError

    for k, step in enumerate(steps, 1):
        try:
            ws.apply(step)
        except (FixError, ValueError, TypeError, KeyError) as exc:
            return k, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def replay(
    model: Model, recipe: str | os.PathLike, *, force: bool = False
) -> tuple[Workspace, ReplayOutcome]:
    """The workspace with the recipe's steps applied, and what came of it. Raises RecipeError for a recipe that
    cannot be read, one made for another model (unless `force`), or a step that fails on this model."""

    steps, data = read_recipe(recipe)
    original = data.get("original") if isinstance(data.get("original"), dict) else {}
    made_for = original.get("fingerprint") if isinstance(original.get("fingerprint"), str) else None
    ws = Workspace(model, kept_states=0)  # headless: no history to look back at
    mine = model.fingerprint()
    if made_for and made_for != mine and not force:
        raise RecipeError(
            f"{recipe}: made for a model with fingerprint {made_for}; this one is {mine}. Note: --force replays "
            "it anyway"
        )
    failed = apply_steps(ws, steps)
    if failed is not None:
        k, line = failed
        raise RecipeError(f"{recipe}: step {k} ({steps[k - 1].fix}) does not apply to this model: {line}")
    expected = data.get("result_fingerprint") if isinstance(data.get("result_fingerprint"), str) else None
    return ws, ReplayOutcome(len(steps), ws.fingerprint(), expected, made_for, mine)
