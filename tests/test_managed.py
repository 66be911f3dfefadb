"""The managed-job comment: gavel:type=<job type>[,scale=N][,weight=W][,steps=S][,slo=T]."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_gavel.errors import InputError
from slurm_gavel.managed import (
    ManagedCommentError,
    ManagedSpec,
    is_managed_comment,
    parse_comment,
)


def test_not_managed_comments_give_none():
    for comment in (None, "", "my experiment", "gavel", "Gavel:type=x", " type=A3C"):
        assert parse_comment(comment) is None
        assert not is_managed_comment(comment)


def test_full_form():
    spec = parse_comment(
        "gavel:type=ResNet-50 (batch size 64),scale=4,weight=2.5,steps=120000,slo=3600"
    )
    assert spec == ManagedSpec("ResNet-50 (batch size 64)", 4, 2.5, 120000.0, 3600.0)


def test_type_only_and_spaces():
    spec = parse_comment("  gavel: type = LM (batch size 5) , scale = 2 ")
    assert spec == ManagedSpec("LM (batch size 5)", 2)
    assert parse_comment("gavel:type=A3C").scale_factor is None


@pytest.mark.parametrize(
    ("comment", "problem"),
    [
        ("gavel:", "is not key=value"),
        ("gavel:scale=2", "no job type"),
        ("gavel:type=", "has no value"),
        ("gavel:type=A3C,scale=0", "scale='0' must be a whole number"),
        ("gavel:type=A3C,scale=1.5", "scale='1.5' must be a whole number"),
        ("gavel:type=A3C,weight=-1", "weight='-1' must be a positive number"),
        ("gavel:type=A3C,steps=inf", "steps='inf' must be a positive number"),
        ("gavel:type=A3C,gpus=2", "unknown key 'gpus'"),
        ("gavel:type=A3C,type=LM", "key 'type' appears twice"),
        ("gavel:type=A3C,scale", "'scale' is not key=value"),
    ],
)
def test_errors_name_job_problem_and_form(comment, problem):
    with pytest.raises(ManagedCommentError) as e:
        parse_comment(comment, job_id="42")
    msg = str(e.value)
    assert msg.startswith("job 42: gavel comment: ")
    assert problem in msg
    assert "gavel:type=<job type>" in msg  # the fix
    assert isinstance(e.value, InputError)


@given(
    job_type=st.text(
        st.characters(blacklist_characters=",=", blacklist_categories=["Cc", "Zs"]),
        min_size=1,
        max_size=30,
    ),
    scale=st.none() | st.integers(1, 64),
    weight=st.floats(0.01, 100),
    steps=st.none() | st.integers(1, 10**9).map(float),
)
def test_round_trip(job_type, scale, weight, steps):
    spec = ManagedSpec(job_type, scale, float(f"{weight:g}"), steps)
    assert parse_comment(spec.to_comment()) == spec
