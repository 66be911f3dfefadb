"""Recording whether a solve path answered, for the tests of the decompositions.

Imported as a plain module: pytest puts this folder on sys.path (tests/ is not a package).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def spy_answers(
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    real: Callable[..., Any],
    answers: list[bool] | None = None,
) -> list[bool]:
    """Replace `target` (a dotted name) by `real` that also appends to `answers` (a new
    list by default), per call, whether it answered (returned something, not None):
    the list."""
    answers = [] if answers is None else answers

    def spy(*args: Any) -> Any:
        out = real(*args)
        answers.append(out is not None)
        return out

    monkeypatch.setattr(target, spy)
    return answers
