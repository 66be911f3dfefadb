"""The managed-job comment: gavel:[type=<job type>,scale=N,weight=W,steps=S,slo=T,grace=G].

The grammar's shared table (every enforcer) is in tests/test_comment_enforcers.py; these
are the Python parser's own promises: what a spec holds, the messages, the cap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_gavel.domain.comment_grammar import (
    MAX_TYPE_CHARS,
    TYPE_CHARS,
    UNTYPED,
    ManagedCommentError,
    ManagedSpec,
    is_managed_comment,
    parse_comment,
)
from slurm_gavel.errors import InputError


def test_not_managed_comments_give_none():
    for comment in (None, "", "my experiment", "gavel", "gavel type=A3C", "\u00a0gavel:type=x"):
        assert parse_comment(comment) is None
        assert not is_managed_comment(comment)


def test_full_form():
    spec = parse_comment(
        "gavel:type=ResNet-50 (batch size 64),scale=4,weight=0.5,steps=120000,slo=3600"
    )
    assert spec == ManagedSpec("ResNet-50 (batch size 64)", 4, 0.5, 120000.0, 3600.0)
    assert parse_comment("gavel:type=A3C").scale_factor is None


def test_no_type_is_a_managed_job_of_no_named_type():
    # the type is a hint; without one the daemon learns the job's row
    assert parse_comment("gavel:") == ManagedSpec(UNTYPED)
    assert parse_comment("gavel:scale=2,weight=0.5") == ManagedSpec(UNTYPED, 2, 0.5)
    for spec in (ManagedSpec(UNTYPED), ManagedSpec(UNTYPED, 2, 0.5)):
        assert parse_comment(spec.to_comment()) == spec
    assert ManagedSpec(UNTYPED).to_comment() == "gavel:"
    assert ManagedSpec(UNTYPED, 4).to_comment() == "gavel:scale=4"


def test_a_scale_range_is_carried_with_its_minimum_as_the_scale():
    # moldable; the daemon places the job at its minimum until it chooses
    spec = parse_comment("gavel:type=A3C,scale=2-8")
    assert spec == ManagedSpec("A3C", 2, scale_range=(2, 8))
    assert parse_comment(spec.to_comment()) == spec
    assert spec.to_comment() == "gavel:type=A3C,scale=2-8"
    assert parse_comment("gavel:scale=4").scale_range is None


@pytest.mark.hostile
@pytest.mark.parametrize("text", ["8-2", "0-4", "1-1025", "01-4", "1--4", "-4", "4-", "1-8 "])
def test_bad_scale_ranges_name_the_form(text):
    with pytest.raises(ManagedCommentError, match=r"or a range MIN-MAX of them with MIN <= MAX"):
        parse_comment(f"gavel:scale={text}", job_id="3")


@pytest.mark.hostile
@pytest.mark.parametrize("comment", [" gavel:type=A3C", "\tgavel:type=A3C", "GAVEL:type=A3C"])
def test_near_misses_are_claimed_and_refused_not_left_plain(comment):
    # the old daemon stripped the space and managed the job, the old Lua never held it
    assert is_managed_comment(comment)
    with pytest.raises(ManagedCommentError, match="must open the comment"):
        parse_comment(comment, job_id="7")


@pytest.mark.parametrize(
    ("comment", "problem"),
    [
        ("gavel:,", "'' is not key=value"),
        ("gavel:type=A3C,", "'' is not key=value"),
        ("gavel:type=", "has no value"),
        ("gavel:type=A3C,scale=0", "scale='0' must be a whole number from 1 to 1024"),
        ("gavel:type=A3C,scale=1.5", "scale='1.5' must be a whole number"),
        ("gavel:type=A3C,weight=-1", "weight='-1' must be a decimal number > 0"),
        ("gavel:type=A3C,steps=inf", "steps='inf' must be a whole number"),
        ("gavel:type=A3C,gpus=2", "unknown key 'gpus'"),
        ("gavel:type=A3C,type=LM", "key 'type' appears twice"),
        ("gavel:type=A3C,scale", "'scale' is not key=value"),
        ("gavel:type=A3C,weight=2", "above the cap 1 set by the admin"),
        ("gavel:type=A\x1b[31m", "has characters outside"),
    ],
)
def test_errors_name_job_problem_and_form(comment, problem):
    with pytest.raises(ManagedCommentError) as e:
        parse_comment(comment, job_id="42")
    msg = str(e.value)
    assert msg.startswith("job 42: gavel comment: ")
    assert problem in msg
    assert "gavel:[key=value,...] with keys type=<job type> (optional)" in msg  # the fix
    assert isinstance(e.value, InputError)


@pytest.mark.hostile
def test_messages_escape_control_characters_and_stay_short():
    # the message goes to the daemon's log and an admin's terminal
    with pytest.raises(ManagedCommentError) as e:
        parse_comment("gavel:type=A3C,\x1b]0;pwned\x07" + "x" * 200 + "=1", job_id="1")
    msg = str(e.value)
    assert "\x1b" not in msg and "\x07" not in msg and len(msg) < 300


def test_weight_cap_is_the_callers():
    assert parse_comment("gavel:type=A3C,weight=2.5", max_weight=4).priority_weight == 2.5
    # the daemon reads with no cap and clamps to its own (a job from before the cap)
    assert parse_comment("gavel:type=A3C,weight=1000", max_weight=None).priority_weight == 1000
    with pytest.raises(ManagedCommentError, match=r"above the cap 0\.5"):
        parse_comment("gavel:type=A3C,weight=0.75", max_weight=0.5)


@given(
    job_type=st.text(st.sampled_from(sorted(TYPE_CHARS)), min_size=1, max_size=MAX_TYPE_CHARS)
    .map(str.strip)
    .filter(bool),
    scale=st.none() | st.integers(1, 1024),
    weight=st.integers(1, 10**6).map(lambda m: m / 10**6),
    steps=st.none() | st.integers(1, 10**12).map(float),
    slo=st.none() | st.integers(1, 10**15).map(lambda m: m / 10**6),
)
def test_round_trip(job_type, scale, weight, steps, slo):
    spec = ManagedSpec(job_type, scale, weight, steps, slo)
    assert parse_comment(spec.to_comment()) == spec
