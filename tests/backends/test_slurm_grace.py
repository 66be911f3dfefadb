"""Each job's grace from its comment, the admin's cap and the site default."""

import pytest

from slurm_gavel.backends.slurm_grace import job_grace


@pytest.mark.parametrize(
    ("comment", "cap", "seconds", "asked", "capped"),
    [
        ("gavel:type=A3C", 300, 30, None, False),  # asks nothing: the site's grace
        ("gavel:type=A3C,grace=5", 300, 5, 5, False),  # a shorter grace is honoured
        ("gavel:type=A3C,grace=120", 300, 120, 120, False),
        ("gavel:type=A3C,grace=300", 300, 300, 300, False),
        ("gavel:type=A3C,grace=86400", 300, 300, 86400, True),  # capped
        ("gavel:type=A3C,grace=120", None, 30, 120, True),  # no cap set: the site's grace
        ("gavel:type=A3C,grace=1e3", 300, 30, None, False),  # unreadable: the default
        ("gavel:type=A3C,grace=inf", 300, 30, None, False),
        ("my notes", 300, 30, None, False),
    ],
)
def test_job_grace(comment, cap, seconds, asked, capped):
    g = job_grace(comment, default_s=30.0, cap_s=cap)
    assert (g.seconds, g.asked, g.capped) == (seconds, asked, capped)
