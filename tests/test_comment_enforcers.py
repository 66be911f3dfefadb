"""One grammar, three enforcers: the Python parser and the SPANK plugin's C code give
every comment of the shared table its verdict, and agree on random strings.

(The Lua through a real slurmctld: tests/test_comment_enforcers_on_slurm.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from comment_grammar import build_harness, c_verdicts, cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_gavel.domain.comment_grammar import (
    MAX_COMMENT_BYTES,
    ManagedCommentError,
    classify,
    parse_comment,
)

CASES = cases()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_harness(tmp_path_factory.mktemp("grammar"))


def test_the_table_covers_every_verdict_and_hostile_input():
    verdicts = [c.verdict for c in CASES]
    assert min(verdicts.count(v) for v in ("plain", "managed", "refuse")) >= 10
    assert len({c.comment for c in CASES}) == len(CASES)
    joined = "".join(c.comment for c in CASES)
    for hostile in ("\n", "\x1b", "\u202e", "inf", "nan", "1e308", "0x10", "weight=1000"):
        assert hostile in joined


@pytest.mark.hostile  # one input per parametrized case
@pytest.mark.parametrize("case", CASES, ids=lambda c: repr(c.comment)[:40])
def test_python_parser_gives_the_table_verdict(case):
    assert classify(case.comment) == case.verdict, case.why


@pytest.mark.hostile(inputs=len(CASES))
def test_c_grammar_gives_the_table_verdict(harness):
    got = c_verdicts(harness, [c.comment for c in CASES])
    wrong = [
        (c.comment, c.verdict, g) for c, g in zip(CASES, got, strict=True) if g[0] != c.verdict
    ]
    assert not wrong


def test_c_grammar_names_the_problem(harness):
    got = dict(
        zip(
            ["w", "s", "n", "t"],
            c_verdicts(
                harness,
                [
                    "gavel:type=A3C,weight=2",
                    " gavel:type=A3C",
                    "gavel:scale=2",
                    "gavel:type=A3C,scale=1e0",
                ],
            ),
            strict=True,
        )
    )
    assert "above the cap 1 set by the admin" in got["w"][1]
    assert "must open the comment" in got["s"][1]
    assert got["n"] == ("managed", "")  # no type: a managed job
    assert "scale=1e0 must be a whole number from 1 to 1024" in got["t"][1]


def test_c_cap_follows_the_plugstack_argument(harness):
    comments = ["gavel:type=A3C,weight=2.5", "gavel:type=A3C,weight=2.500001"]
    assert [v for v, _ in c_verdicts(harness, comments, "2.5")] == ["managed", "refuse"]
    assert [v for v, _ in c_verdicts(harness, comments, "none")] == ["managed", "managed"]
    assert [classify(c, max_weight=2.5) for c in comments] == ["managed", "refuse"]


# Random strings, biased towards the grammar's own tokens so that most of them come
# near the boundary between accepted and refused.
TOKENS = [
    "gavel:", "GAVEL:", " ", "\t", "\n", ",", "=", ".", "-", "+", "0", "1", "2", "9", "1024",
    "1025", "000001", "0000001", "1e3", "inf", "nan", "0x1", "type", "scale", "weight",
    "steps", "slo", "A3C", "LM (batch size 5)", "x", "(", ")", "_", "/", "\u00e9", "\u202e",
    "\x1b", "\u0661", "\uff11", "1000000000000", "1000000000",
]  # fmt: skip
token_strings = st.lists(st.sampled_from(TOKENS), max_size=20).map("".join)
structured = st.builds(
    lambda keys, values: (
        "gavel:" + ",".join(f"{k}={v}" for k, v in zip(keys, values, strict=False))
    ),
    st.lists(st.sampled_from(["type", "scale", "weight", "steps", "slo", "Type", ""]), max_size=6),
    st.lists(token_strings, max_size=6),
)
no_nul = st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"])
comments = st.one_of(
    token_strings,
    structured,
    st.text(no_nul, max_size=40),
    st.builds(lambda s: "gavel:" + s, st.text(no_nul, max_size=300)),
)


# Slow (full tier only: tools/test --help): 300 batches through C, 24 s.
@pytest.mark.slow
@pytest.mark.hostile
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(comments, min_size=1, max_size=50))
def test_python_and_c_agree_on_random_comments(harness, batch):
    c = [v for v, _ in c_verdicts(harness, batch)]
    py = [classify(s).value for s in batch]
    assert py == c, [(s, p, v) for s, p, v in zip(batch, py, c, strict=True) if p != v]


@pytest.mark.hostile
@given(comment=comments)
def test_python_parser_never_raises_anything_else(comment):
    try:
        parse_comment(comment, job_id="1")
    except ManagedCommentError as e:
        assert "\x1b" not in str(e) and len(str(e)) < 600
    assert classify(comment) in ("plain", "managed", "refuse")


@pytest.mark.hostile
def test_huge_comment_is_refused_quickly():
    assert classify("gavel:type=A3C," + "scale=1," * 100_000) == "refuse"
    assert classify("gavel:" + "x" * (MAX_COMMENT_BYTES + 1)) == "refuse"
    with pytest.raises(ManagedCommentError, match="bytes, more than 256"):
        parse_comment("gavel:type=" + "\u00e9" * 200)


@pytest.mark.hostile
def test_nul_in_a_python_string_is_refused():
    # no C string can hold one, but the REST backend's JSON could
    assert classify("gavel:type=A3C\x00,weight=9") == "refuse"
