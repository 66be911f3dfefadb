"""Each job's grace from its comment, the admin's cap and the site default."""

import pytest

from slurm_gavel.backends.slurm.grace import job_grace
from slurm_gavel.domain.comment_grammar import read_comment


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
    g = job_grace(read_comment(comment), default_s=30.0, cap_s=cap)
    assert (g.seconds, g.asked, g.capped) == (seconds, asked, capped)


def test_the_between_rounds_check_tries_slurm_once_and_looks_at_a_job_once():
    """enforce_grace while slurmctld is away: one try, no retries (the next round finds
    the outage and reports it), the commands' retries restored, and the job not looked
    at again (the next act does), so the daemon's loop cannot spin on it."""
    from slurm_gavel.backends.slurm.cli.commands import SlurmCommands
    from slurm_gavel.backends.slurm.cli.transport import cli_backend
    from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable

    b = cli_backend(commands=SlurmCommands(retries=4, sleep=lambda s: None), clock=lambda: 100.0)
    b.preemption.signalled = {"7": 90.0, "8": 130.0}  # 7's grace ended 10 s ago, 8's in 30 s
    assert b.grace_due_in() == -10.0
    tries: list[int] = []

    def unreachable(ids):
        tries.append(b.transport.commands.retries)
        raise SlurmUnreachable("squeue: slurmctld not answering")

    b.transport.states = unreachable  # type: ignore[method-assign]
    with pytest.raises(SlurmUnreachable):
        b.enforce_grace()
    assert tries == [0] and b.transport.commands.retries == 4
    assert b.grace_due_in() == 30.0  # 7 is left to the next act; 8 not due yet
    assert b.enforce_grace() == ([], {}) and tries == [0]
