"""The owner's `scontrol requeuehold` of a running managed job is told apart from the
daemon's preemption by who stopped the run (user_holds.py): the daemon
signals every run it stops first. Real Slurm: test_user_holds_on_slurm.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.backends.slurm.user_holds import requeued_by_owner

RUN = SlurmJob(
    job_id="7", state="RUNNING", reason="None", comment="gavel:type=A3C", partitions=("gpu",),
    nodes=("v100-1",), gpu_request=("v100", 1), gpu_slices=(), node_count=1, priority=100,
    restarts=0, submit_time=0, start_time=0, end_time=0, exit_code=None, account="", user="u",
)  # fmt: skip
HELD = replace(RUN, state="PENDING", reason="JobHeldUser", priority=0, restarts=1, nodes=())


def test_a_run_held_without_the_daemons_signal_is_marked_the_users():
    orders = requeued_by_owner({"7": RUN}, {"7": HELD}, set())
    assert [(o.job_id, o.comment, o.gres) for o in orders] == [
        ("7", "gavel:type=A3C,hold=user", None)
    ]
    bare = replace(HELD, comment="gavel:")
    assert requeued_by_owner({"7": RUN}, {"7": bare}, set())[0].comment == "gavel:hold=user"


def test_the_daemons_own_stops_and_other_endings_are_not():
    assert requeued_by_owner({"7": RUN}, {"7": HELD}, {"7"}) == []  # the daemon signalled it
    exit99 = replace(HELD, state="SPECIAL_EXIT")  # RequeueExitHold: the library's exit
    assert requeued_by_owner({"7": RUN}, {"7": exit99}, set()) == []
    requeued = replace(HELD, priority=100, reason="BeginTime")  # requeued, not held
    assert requeued_by_owner({"7": RUN}, {"7": requeued}, set()) == []
    admin = replace(HELD, reason="JobHeldAdmin")
    assert requeued_by_owner({"7": RUN}, {"7": admin}, set()) == []
    waiting_before = replace(HELD, restarts=1)
    assert requeued_by_owner({"7": waiting_before}, {"7": HELD}, set()) == []
    assert requeued_by_owner({}, {"7": HELD}, set()) == []  # not seen running (a restart)
    marked = replace(HELD, comment="gavel:type=A3C,hold=user")
    assert requeued_by_owner({"7": RUN}, {"7": marked}, set()) == []  # already the user's
    same_run = replace(HELD, restarts=0)
    assert requeued_by_owner({"7": RUN}, {"7": same_run}, set()) == []


@pytest.mark.hostile
@pytest.mark.parametrize(
    "comment",
    ["plain job", "gavel:type=A3C,hold=admin", "gavel:type=\x01", "GAVEL:type=A3C", ""],
)
def test_a_comment_that_is_not_managed_is_left_alone(comment: str):
    before, now = replace(RUN, comment=comment), replace(HELD, comment=comment)
    assert requeued_by_owner({"7": before}, {"7": now}, set()) == []
