"""The state file's text from parts encoded before (daemon/state_encode.py): the same
bytes json.dumps writes, a record's text kept only while the record is unchanged."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_gavel.daemon.state_encode import Encoded, Fragments, PreRound, encode_document

HOSTILE = ["", '"', "\\", "\u0000", "\n\t", "é", "\u2028", "\ud800", "💥", "}{", '":"', "1,2"]


def dumps(doc):
    return json.dumps(doc, separators=(",", ":"))


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
records = st.recursive(scalars, lambda c: st.lists(c) | st.dictionaries(st.text(), c),
                       max_leaves=8)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), records), st.dictionaries(st.text(), records))
def test_a_document_from_parts_is_the_bytes_json_dumps_writes(top, rows):
    """Encoded parts, a planned mapping and plain values together: byte for byte
    json.dumps of the same document (hostile keys and values from hypothesis)."""
    doc = {**top, "scheduler": {"plugins": {"learned_rows": {"jobs": rows}}}, "jobs": rows}
    fragments = Fragments()
    parts = {**doc, "jobs": Encoded.of(rows)}
    plan = {("scheduler", "plugins", "learned_rows", "jobs"): fragments}
    assert encode_document(parts, plan) == dumps(doc)
    assert encode_document(parts, plan) == dumps(doc)  # again, from the kept texts
    assert json.loads(encode_document(parts, plan)) == json.loads(dumps(doc))


def test_hostile_job_ids_and_texts_are_escaped_as_json_dumps_does():
    rows = {k: {"user": v, k: [v, 1.5]} for k in HOSTILE for v in HOSTILE[:3]}
    f = Fragments()
    assert f.encode(rows) == dumps(rows)
    assert f.encode({k: dict(v) for k, v in rows.items()}) == dumps(rows)
    assert f.reused == len(rows)


def test_a_changed_record_is_written_anew_and_an_equal_one_keeps_its_text():
    f = Fragments()
    a = {"1": {"measured": {"v100": [1.0, 60.0]}}, "2": {"measured": {"k80": [0.5, 60.0]}}}
    f.encode(a)
    b = {"1": {"measured": {"v100": [2.0, 120.0]}}, "2": {"measured": {"k80": [0.5, 60.0]}},
         "3": {"measured": {}}}  # fmt: skip
    assert json.loads(f.encode(b)) == b  # job 1's new row, job 3 new
    assert f.reused == 1  # job 2 only
    assert json.loads(f.encode({"2": b["2"]})) == {"2": b["2"]}  # jobs gone: gone


def test_a_record_given_again_as_the_same_object_is_encoded_again():
    """The same dict changed in place since: equal to itself, but not to its text."""
    f = Fragments()
    row = {"steps": 1.0}
    f.encode({"1": row})
    row["steps"] = 2.0
    assert json.loads(f.encode({"1": row})) == {"1": {"steps": 2.0}}
    assert f.reused == 0


def test_nan_and_infinity_are_written_as_json_dumps_writes_them():
    f = Fragments()
    rows = {"1": {"x": math.nan}, "2": {"x": math.inf}}
    assert f.encode(rows) == dumps(rows)
    assert f.encode({"1": {"x": math.nan}, "2": {"x": math.inf}}) == dumps(rows)


def test_a_key_that_is_no_string_is_refused_not_written_as_broken_json():
    with pytest.raises(TypeError):
        Fragments().encode({1: {}})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        encode_document({"jobs": Encoded("{}"), 2: 3})
    with pytest.raises(TypeError):
        json.dumps({"jobs": Encoded("{}")})  # an Encoded is not JSON by itself


def test_the_pre_round_copy_restores_to_json_exactly_and_saves_without_rows():
    state = {
        "round_index": 3,
        "plugins": {"restart_aware": {"1": [2.0]}, "learned_rows": {"format": 1, "jobs": {
            "1": {"measured": {"v100": [1.5, 60.0, 0.0, 0.0, 0]}, "untyped": False}}}},
        "jobs": {"1": {"received_s": {"v100": 60.0}}},
    }  # fmt: skip
    before = dumps(state)
    plan = {("plugins", "learned_rows", "jobs"): Fragments(), ("jobs",): Fragments()}
    pre = PreRound.of(state, plan)
    assert dumps(pre.restore()) == before  # the same document, key order too
    assert dumps(PreRound.of(json.loads(before), plan).restore()) == before  # kept texts
    assert all(f.reused == 1 for f in plan.values())
    assert pre.restore() is not pre.restore()  # a fresh copy each time
    without = json.loads(pre.state.text)
    assert without["plugins"] == {"restart_aware": {"1": [2.0]}}
    assert dumps(state) == before  # the state given is left as it was
    state["plugins"]["learned_rows"]["jobs"]["1"]["untyped"] = True  # the round mutates it
    assert pre.restore()["plugins"]["learned_rows"]["jobs"]["1"]["untyped"] is False
    bare = {"round_index": 1, "plugins": {}}
    assert PreRound.of(bare).restore() == bare and PreRound.of(bare).rows is None
