"""Field checks for the files an admin or a user hands in (config, problem, table).

Each check takes (value, where) and returns the cleaned value, or raises the
caller's InputError subclass with a message that names the field, what is wrong
and the fix: `Checks(ConfigError).number(v, "round_seconds", minimum=1)`. One set of
checks, so a number means the same in every file (finite, not a bool) and every
message reads alike.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_gavel.errors import InputError


def show(value: Any) -> str:
    """A value for an error message: what kind of thing it is, and the thing."""
    kind = {dict: "a mapping", list: "a list", type(None): "nothing (null)"}.get(type(value))
    return kind or f"{type(value).__name__} {value!r}"


class Checks:
    def __init__(self, error: type[InputError]) -> None:
        self.error = error

    def number(
        self, value: Any, where: str, *, minimum: float | None = None, strict: bool = False
    ) -> float:
        """A finite int or float (never a bool), >= minimum (> with strict)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"{where}: expected a number, got {show(value)}")
        f = float(value)
        if not math.isfinite(f):
            raise self.error(f"{where}: {value!r} is not a finite number; give a real value")
        if minimum is not None and (f < minimum or (strict and f == minimum)):
            bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
            raise self.error(f"{where}: {value!r} is out of range; it must be {bound}")
        return f

    def integer(self, value: Any, where: str, *, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"{where}: expected a whole number, got {show(value)}")
        if not lo <= value <= hi:
            raise self.error(f"{where}: {value} is out of range; it must be in {lo}..{hi}")
        return value

    def string(self, value: Any, where: str) -> str:
        """A non-empty string, stripped."""
        if not isinstance(value, str) or not value.strip():
            raise self.error(f"{where}: expected a non-empty string, got {show(value)}")
        return value.strip()

    def choice(self, value: Any, where: str, choices: Sequence[str]) -> str:
        s = self.string(value, where)
        if s not in choices:
            hint = difflib.get_close_matches(s, choices, n=1)
            did = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise self.error(
                f"{where}: unknown value '{s}'{did}; choose one of: {', '.join(choices)}"
            )
        return s

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(f"{where}: expected a mapping of keys, got {show(value)}")
        return value

    def keys(self, doc: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
        """Every key is a string and a known one (a typo gets a did-you-mean)."""
        for key in doc:
            if not isinstance(key, str):
                raise self.error(f"{where}: key {key!r} is not a string")
            if key not in allowed:
                hint = difflib.get_close_matches(key, allowed, n=1)
                did = f"did you mean '{hint[0]}'?" if hint else f"known keys: {', '.join(allowed)}"
                raise self.error(f"{where}: unknown key '{key}'; {did}")
