"""What ended each managed job's run, told from Slurm's records and what the daemon
itself did (backends/slurm/ended_runs.py). Real Slurm: tests/daemon/test_run_watch_on_slurm.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_gavel.backends.slurm.ended_runs import RunEnds, signal_number
from slurm_gavel.backends.slurm.fields import exit_signal
from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.core.run_ends import RunEnd, RunEndKind

HELD = SlurmJob(
    job_id="7", state="PENDING", reason="JobHeldUser", comment="gavel:type=A3C",
    partitions=("gpu",), nodes=(), gpu_request=("v100", 1), gpu_slices=(), node_count=1,
    priority=0, restarts=0, submit_time=0, start_time=0, end_time=0, exit_code=None,
    account="", user="u",
)  # fmt: skip
RUN = replace(HELD, state="RUNNING", reason="None", priority=100, start_time=1000)
EXIT99 = replace(HELD, state="SPECIAL_EXIT", restarts=1, exit_code=99)
KILLED = replace(RUN, state="FAILED", reason="JobLaunchFailure", exit_code=None, exit_signal=10)


def ends(before, now, at=2000.0, *, signalled=(), requeue_held=(), owners=(), watch=None):  # type: ignore[no-untyped-def]
    w = watch or RunEnds("USR1")
    return w.ended({"7": before}, {"7": now}, at, signalled=set(signalled),
                   requeue_held=set(requeue_held), owners=set(owners))  # fmt: skip


def test_an_exit_99_nobody_asked_for_is_unsignalled_and_never_seen_running():
    # released, ran and exited 99 between two observes: the restart count tells
    assert ends(HELD, EXIT99) == [
        RunEnd("7", RunEndKind.UNSIGNALLED, "SPECIAL_EXIT, exit code 99", ran_s=None)
    ]
    launch = replace(HELD, state="PENDING", reason="launch_failed_requeued_held", restarts=1)
    [e] = ends(HELD, launch)
    assert e.kind is RunEndKind.UNSIGNALLED and e.ran_s is None


def test_a_run_seen_running_carries_how_long_it_was_seen():
    w = RunEnds("USR1")
    assert ends(HELD, RUN, at=1100.0, watch=w) == []  # started at 1000, seen at 1100
    assert ends(RUN, RUN, at=1700.0, watch=w) == []
    [e] = ends(RUN, EXIT99, at=1750.0, watch=w)
    assert e.kind is RunEndKind.UNSIGNALLED and e.ran_s == 700.0
    assert w.ran_for == {}  # the next run starts from nothing


def test_the_daemons_signal_and_requeuehold_and_the_owners_hold():
    assert ends(RUN, EXIT99, signalled={"7"}) == [RunEnd("7", RunEndKind.CHECKPOINTED)]
    held = replace(EXIT99, state="PENDING", reason="JobHeldAdmin")
    assert ends(RUN, held, signalled={"7"}, requeue_held={"7"}) == [
        RunEnd("7", RunEndKind.IGNORED_SIGNAL)
    ]
    assert ends(RUN, replace(EXIT99, state="PENDING"), owners={"7"}) == []
    assert ends(RUN, RUN) == [] and ends(EXIT99, EXIT99) == []  # nothing ended


def test_a_job_the_signal_killed_and_one_that_finished():
    assert ends(RUN, KILLED, signalled={"7"}) == [
        RunEnd("7", RunEndKind.KILLED_BY_SIGNAL, "FAILED 0:10 after SIGUSR1")
    ]
    assert ends(RUN, KILLED) == []  # not the daemon's signal: not ours to explain
    assert ends(KILLED, KILLED, signalled={"7"}) == []  # seen finished already
    done = replace(RUN, state="COMPLETED", exit_code=0)
    assert ends(RUN, done, signalled={"7"}) == []  # finished as it was told to stop
    term = replace(KILLED, exit_signal=15)
    assert ends(RUN, term, signalled={"7"}) == []  # another signal: not the checkpoint's
    w = RunEnds("TERM")
    assert ends(RUN, term, signalled={"7"}, watch=w)[0].kind is RunEndKind.KILLED_BY_SIGNAL


def test_a_job_first_seen_now_has_no_ended_run():
    w = RunEnds("USR1")
    assert w.ended({}, {"7": EXIT99}, 10.0, signalled=set(), requeue_held=set(), owners=set()) == []


def test_exit_signal_in_every_release_shape():
    assert exit_signal(10) == 10  # 22.05: a raw wait status, killed by SIGUSR1
    assert exit_signal(99 << 8) is None and exit_signal(None) is None and exit_signal(0) is None
    usr1 = {
        "return_code": {"set": True, "number": 0},
        "signal": {"id": {"set": True, "number": 10}, "name": "USR1"},
        "status": ["SIGNALED"],
    }
    assert exit_signal(usr1) == 10
    unset = {
        "return_code": {"set": True, "number": 99},
        "signal": {"id": {"set": False, "number": 0}, "name": ""},
        "status": ["ERROR"],
    }
    assert exit_signal(unset) is None
    assert exit_signal({"return_code": 0, "signal": {"id": 9, "name": "KILL"}}) == 9  # +complex
    assert signal_number("USR1") == 10 and signal_number("SIGTERM") == 15


@pytest.mark.hostile
@pytest.mark.parametrize(
    "raw",
    [{"signal": "USR1"}, {"signal": {"id": "ten"}}, {"signal": {"id": 4096}}, {"signal": None},
     {"signal": {"id": -1}}, {"signal": {"id": {"infinite": True}}}, "garbage", [10]],
)  # fmt: skip
def test_exit_signal_of_malformed_records_is_none_or_a_small_number(raw):
    try:
        got = exit_signal(raw)
    except (TypeError, ValueError):
        return  # from_json turns a malformed record into a refused one
    assert got is None or 0 < got < 128
