"""The AdminComment orders: safe text, one command per distinct text, bounded argv."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.slurm.admin_comment import (
    JOBS_PER_COMMAND,
    MAX_CHARS,
    PREFIX,
    admin_comment,
    comment_orders,
)

HOSTILE = [
    "a'b", 'quote " here', "semi; scancel -u root", "new\nline", "cr\rreturn",
    "\x1b[2J\x1b[Hclear", "back\\slash", "tick `id`", "\x00nul", "bidi\u202etxt",
    "sep\u2028arator", "x" * 5000, "$(reboot)",
]  # fmt: skip


@pytest.mark.hostile
@pytest.mark.parametrize("text", HOSTILE)
def test_any_text_becomes_one_safe_printable_line(text):
    out = admin_comment(text)
    assert out.startswith(PREFIX) and len(out) <= MAX_CHARS
    assert all(" " <= c <= "~" for c in out), repr(out)
    assert not set(out) & set("\"'\\`"), repr(out)
    assert "\n" not in out and "\r" not in out


def test_a_command_in_backticks_reads_as_the_command():
    # was "held by you: ?scontrol release 5? hands it back ..." in squeue
    text = "not scheduled: held by you: `scontrol release 5` hands it back to the scheduler"
    assert admin_comment(text) == (
        PREFIX + "not scheduled: held by you: scontrol release 5 hands it back to the scheduler"
    )


def test_jobs_with_the_same_text_share_one_command():
    texts = {"12": "waiting: a", "3": "waiting: a", "40": "running on v100 (v100-1)"}
    orders = comment_orders(texts)
    assert [(o.job_ids, o.text) for o in orders] == [
        (("3", "12"), PREFIX + "waiting: a"),
        (("40",), PREFIX + "running on v100 (v100-1)"),
    ]
    assert orders[0].argv() == [
        "scontrol",
        "update",
        "JobId=3,12",
        f"AdminComment={PREFIX}waiting: a",
    ]


def test_many_jobs_are_split_and_non_numeric_ids_left_out():
    texts = {str(i): "same" for i in range(1, 2 * JOBS_PER_COMMAND + 2)}
    texts.update({"1;2": "same", "JobId=5": "same", "١٢": "same"})  # not Slurm job ids
    orders = comment_orders(texts)
    assert [len(o.job_ids) for o in orders] == [JOBS_PER_COMMAND, JOBS_PER_COMMAND, 1]
    ids = [j for o in orders for j in o.job_ids]
    assert ids == [str(i) for i in range(1, 2 * JOBS_PER_COMMAND + 2)]


def test_each_distinct_text_is_made_safe_once(monkeypatch):
    """The first round after a start writes every job's reason, a handful of distinct
    texts over thousands of jobs: each text is made safe once, with the same orders."""
    import slurm_gavel.backends.slurm.admin_comment as mod

    texts = {str(i): HOSTILE[i % 3] for i in range(1, 500)}
    expected = comment_orders(texts)
    calls = []
    real = mod.admin_comment
    monkeypatch.setattr(mod, "admin_comment", lambda t: calls.append(t) or real(t))
    assert comment_orders(texts) == expected
    assert sorted(calls) == sorted(HOSTILE[:3])
