"""Use cases: one function per thing a user does (fix a model, ...), returning a structured outcome or raising a
typed error. The CLI, the app, bench/ and the lessons call these and only render what they return."""

from surgery.usecases.fix import FixOutcome, FixRequest, fix

__all__ = ["FixOutcome", "FixRequest", "fix"]
