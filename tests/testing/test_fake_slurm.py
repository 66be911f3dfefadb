"""The fake Slurm's own rules (slurm_gavel.testing), beyond what the contract scenarios
pin against real Slurm (test_contract_on_slurm.py): the Lua's refusals, time limits,
holds by an operator and by the owner, failed dependencies, MinJobAge, and commands
naming jobs that are not Slurm's."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.slurm.slurm_errors import SlurmActionTimedOut
from slurm_gavel.testing import (
    FakeSlurm,
    FakeTransport,
    OnSignal,
    OwnerError,
    Refused,
    Script,
)


@pytest.fixture
def slurm():
    return FakeSlurm()


def test_the_default_cluster_is_the_local_test_clusters(slurm):
    assert sorted(slurm.nodes) == ["k80-1", "k80-2", "p100-1", "p100-2", "v100-1", "v100-2"]
    assert slurm.partitions["gpu"] == list(slurm.nodes) and slurm.partitions["k80"] == [
        "k80-1",
        "k80-2",
    ]
    node = slurm.nodes["v100-1"]
    assert (node.gpu_type, node.gpus, node.features) == ("v100", 4, frozenset({"v100"}))


@pytest.mark.parametrize(
    "comment", ["gavel:scale=0", "GAVEL:type=A3C", "gavel:weight=5", "gavel:type=A,type=B"]
)
def test_the_lua_refuses_a_comment_the_grammar_refuses(slurm, comment):
    with pytest.raises(Refused):
        slurm.submit(comment)
    assert slurm.jobs == []


def test_the_lua_holds_a_managed_job_and_leaves_a_plain_one(slurm):
    managed = slurm.submit("gavel:", gpus="2")
    plain = slurm.submit("a plain comment", gres="gpu:1")
    slurm.advance(1)
    assert slurm.job(managed).comment == "gavel:scale=2" and slurm.job(managed).held
    assert slurm.job(plain).state == "RUNNING"
    assert slurm.job(plain).priority > 0
    without = FakeSlurm(lua=False)
    job = without.submit("gavel:type=A3C")
    without.advance(1)
    assert without.job(job).state == "RUNNING"  # no Lua: nothing holds it


def test_a_run_past_its_time_limit_times_out(slurm):
    job = slurm.submit(gres="gpu:1", time_limit_s=60, script=Script(runs_s=600))
    slurm.advance(59)
    assert slurm.job(job).state == "RUNNING"
    slurm.advance(2)
    ended = slurm.job(job)
    assert ended.state == "TIMEOUT" and ended.end_time == ended.start_time + 60


def test_an_operators_hold_and_the_owners(slurm):
    job = slurm.submit("gavel:type=A3C")
    slurm.release([job])
    assert slurm.hold([job]) == {}
    assert slurm.job(job).reason == "JobHeldAdmin"
    slurm.owner.hold(job)
    assert slurm.job(job).comment == "gavel:type=A3C,hold=user"
    errors = slurm.release([job])  # the Lua refuses the daemon's release
    assert "held by its owner" in errors[job] and slurm.job(job).held
    slurm.owner.release(job)
    assert slurm.job(job).comment == "gavel:type=A3C" and slurm.job(job).held
    with pytest.raises(OwnerError, match="managed by the gavel scheduler"):
        slurm.owner.release(job)


def test_the_owners_hold_of_a_bare_managed_job_and_its_release(slurm):
    job = slurm.submit("gavel:")
    slurm.owner.hold(job)
    assert slurm.job(job).comment == "gavel:hold=user"
    slurm.owner.release(job)
    assert slurm.job(job).comment == "gavel:" and slurm.job(job).held


def test_a_dependency_on_a_failed_job_can_never_be_satisfied(slurm):
    first = slurm.submit(gres="gpu:1", script=Script(runs_s=5, exit_code=2))
    then = slurm.submit(gres="gpu:1", dependency=f"afterok:{first}")
    slurm.advance(1)
    assert slurm.job(then).reason == "Dependency"
    slurm.advance(10)
    job = slurm.job(then)
    assert job.dependency == [("afterok", first, "failed")]
    assert job.reason == "DependencyNeverSatisfied" and job.state == "PENDING"
    assert slurm.job(first).state == "FAILED" and slurm.job(first).exit_code == 2


def test_ended_jobs_are_forgotten_after_min_job_age(slurm):
    job = slurm.submit(gres="gpu:1", script=Script(runs_s=1))
    slurm.advance(2)
    assert slurm.job(job).state == "COMPLETED"
    slurm.advance(slurm.min_job_age_s + 1)
    with pytest.raises(KeyError):
        slurm.job(job)


def test_the_signal_to_a_job_not_running_times_out_as_scancel_does(slurm):
    job = slurm.submit("gavel:type=A3C")
    with pytest.raises(SlurmActionTimedOut):
        slurm.signal([job], "USR1")


def test_a_job_that_dies_of_the_signal_fails(slurm):
    job = slurm.submit(gres="gpu:1", script=Script(on_signal=OnSignal.DIE))
    slurm.advance(1)
    assert slurm.signal([job], "USR1") == {}
    assert slurm.job(job).state == "FAILED"


def test_a_checkpoint_takes_its_time(slurm):
    job = slurm.submit(gres="gpu:1", script=Script(checkpoint_s=10))
    slurm.advance(1)
    slurm.signal([job], "USR1")
    slurm.advance(9)
    assert slurm.job(job).state == "RUNNING"
    slurm.advance(1)
    assert slurm.job(job).state == "SPECIAL_EXIT" and slurm.job(job).restarts == 1


def test_a_drained_node_takes_no_new_job(slurm):
    for name in slurm.partitions["gpu"]:
        if name != "k80-2":
            slurm.drain(name)
    job = slurm.submit(gres="gpu:1")
    slurm.advance(1)
    assert slurm.job(job).alloc[0].node == "k80-2"
    records = {n.name: n for n in FakeTransport(slurm).read_nodes()}
    assert records["v100-1"].drained and not records["k80-2"].drained


@pytest.mark.hostile(inputs=6)
@pytest.mark.parametrize("bad", ["", "1;rm -rf /", "-1", "1_", "abc", "1,2"])
def test_a_command_naming_no_job_fails_for_that_id_alone(slurm, bad):
    job = slurm.submit("gavel:type=A3C")
    transport = FakeTransport(slurm)
    failed: dict[str, str] = {}
    transport.release([bad, job], failed)
    transport.requeuehold([bad], failed)
    assert set(failed) == {bad} and "Invalid job id" in failed[bad]
    assert not slurm.job(job).held  # the good id was released all the same
    assert transport.states([bad]) == {}
