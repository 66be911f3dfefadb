"""The state file's JSON text, built from parts the round already encoded.

A round writes state.json twice (before the act, with the inflight record, and after
it) and copies the scheduler's state at its start, and most of what these hold is the
same from one save to the next: at 20,000 jobs each save is ~20 MB of JSON, most of
it the learned rows, accounts and status records of jobs that waited through the
round unchanged (benchmarks/README.md, "20,000 jobs"). Two ways not to encode it again:

- ``Encoded``: a value's text, encoded once and written as it is wherever the same
  value is saved again (the pre-round state in the pre-act save, the last published
  jobs view in the next pre-act save).
- ``Fragments``: a mapping's text (job id -> record) whose records keep their text
  between saves while they are equal (``==``) to the record it was made from.

The text is what ``json.dumps(doc, separators=(",", ":"))`` gives for the same
document, byte for byte, except that a record equal to the one before keeps that
one's text: equal numbers of another type (1, 1.0) are written as the daemon wrote
the same field of the same job in the save before, which the loader read then.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_gavel.core.learned_rows.job_rows_doc import NAME as ROWS

_encode = json.JSONEncoder(separators=(",", ":")).encode  # the store's compact form


@dataclass(frozen=True)
class Encoded:
    """A value's JSON text, written as it is. Not JSON itself: json.dumps refuses it,
    so a document holding one can only be written through encode_document."""

    text: str

    @staticmethod
    def of(value: Any) -> Encoded:
        return Encoded(_encode(value))


class Fragments:
    """The JSON text of a mapping of records, each record's text kept from the last
    call while the record is equal to the one it was made from.

    Records are compared with the last call's, never with themselves: a record given
    again as the same object (which may have been changed in place since) is encoded
    again. The records given must not be changed after the call (the daemon's are
    built afresh for each save). Keeps the last call's records only."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[Any, str]] = {}
        self.reused = 0  # records whose text the last call kept (tests, benchmarks)

    def encode(self, records: Mapping[str, Any]) -> str:
        return "{" + self._parts(records.items(), keyed=True) + "}"

    def encode_list(self, records: Sequence[Any], key: str = "id") -> str:
        """The JSON text of a list of records (the status view's jobs), each known by
        its ``key`` field; a record that is no mapping with a string there is
        encoded every time."""
        items = ((r.get(key) if isinstance(r, Mapping) else None, r) for r in records)
        return "[" + self._parts(items, keyed=False) + "]"

    def _parts(self, items: Iterable[tuple[Any, Any]], keyed: bool) -> str:
        last = self._last
        kept: dict[str, tuple[Any, str]] = {}
        parts = []
        reused = 0
        for key, value in items:
            if not keyed and not isinstance(key, str):
                parts.append(_encode(value))
                continue
            hit = last.get(key)
            if hit is not None and hit[0] is not value and hit[0] == value:
                part = hit[1]  # '"key":text', or the record's text in a list
                reused += 1
            else:
                text = _encode(value)
                part = f"{_key(key)}:{text}" if keyed else text
            kept[key] = (value, part)
            parts.append(part)
        self._last = kept
        self.reused = reused
        return ",".join(parts)


# where in a document a mapping (or a list) of records is encoded through Fragments:
# its path
Plan = Mapping[tuple[str, ...], Fragments]


def encode_document(doc: Any, plan: Plan | None = None) -> str:
    """The compact JSON text of ``doc``: ``Encoded`` values written as they are, the
    mappings at the plan's paths through its Fragments, the rest by json.dumps."""
    return _encode_at(doc, (), plan or {})


def _encode_at(value: Any, path: tuple[str, ...], plan: Plan) -> str:
    if isinstance(value, Encoded):
        return value.text
    if isinstance(value, dict):
        fragments = plan.get(path)
        if fragments is not None:
            return fragments.encode(value)
        if _holds_parts(value, path, plan):
            items = (f"{_key(k)}:{_encode_at(v, (*path, k), plan)}" for k, v in value.items())
            return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        fragments = plan.get(path)
        if fragments is not None:
            return fragments.encode_list(value)
    return _encode(value)


def _key(key: Any) -> str:
    # json.dumps would write a number's or None's text as the key; the daemon's keys
    # are strings (job ids, field names), so anything else is a bug to see at once
    if not isinstance(key, str):
        raise TypeError(f"state document key {key!r}: not a string")
    return _encode(key)


def _holds_parts(value: dict[str, Any], path: tuple[str, ...], plan: Plan) -> bool:
    """Whether a dict must be encoded key by key: it holds an Encoded value, or a
    plan's path goes through it."""
    n = len(path)
    if any(len(p) > n and p[:n] == path for p in plan):
        return True
    return n == 0 and any(isinstance(v, Encoded) for v in value.values())


@dataclass(frozen=True)
class PreRound:
    """The scheduler's state as a round began (SchedulerState.to_json), as JSON text:
    the pre-act save writes it without the learned rows (the inflight record carries
    the round's own), and a round that fails is rolled back to it, parsed then only.
    The text is also the deep copy a round needs (to_json shares live dicts the
    round mutates), without parsing it back in a round that succeeds."""

    state: Encoded  # without the learned rows' slot
    rows: Encoded | None  # the slot, None when the state had none

    @staticmethod
    def of(state_json: dict[str, Any], plan: Plan | None = None) -> PreRound:
        """``plan``: the texts to reuse, by path in the scheduler's state
        (StateWriter.state_plan); the rows' at ("plugins", ROWS, "jobs")."""
        plan = plan or {}
        slots = state_json.get("plugins")
        if not isinstance(slots, dict) or ROWS not in slots:
            return PreRound(Encoded(encode_document(state_json, plan)), None)
        rest = {k: v for k, v in slots.items() if k != ROWS}
        rows = {p[2:]: f for p, f in plan.items() if p[:2] == ("plugins", ROWS)}
        return PreRound(
            Encoded(encode_document({**state_json, "plugins": rest}, plan)),
            Encoded(encode_document(slots[ROWS], rows)),
        )

    def restore(self) -> dict[str, Any]:
        """The state as to_json gave it, parsed from the text (a deep copy)."""
        doc: dict[str, Any] = json.loads(self.state.text)
        if self.rows is not None:
            doc["plugins"][ROWS] = json.loads(self.rows.text)
        return doc
