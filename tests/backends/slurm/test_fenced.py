"""backends/slurm/fenced.py and the backend's signal memory: what active/standby daemons
need of the backend. Every action asks the gate first (a refusing gate: nothing reaches
Slurm), reads do not; the signals one daemon sent are handed to the next, which neither
sends them again nor requeue-holds a run that began after them. On the fake Slurm."""

from __future__ import annotations

import inspect
from unittest import mock

import pytest

from slurm_gavel.backends.slurm.fenced import FencedTransport
from slurm_gavel.backends.slurm.transport import SlurmTransport
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, NodeSlice, RoundPlacement
from slurm_gavel.testing import FakeSlurm, OnSignal, Script, fake_backend

IGNORES = Script(on_signal=OnSignal.IGNORE)


class Refused(Exception):
    pass


def refuse(kind: str, ids: object) -> None:
    raise Refused(kind)


def act_primitives() -> list[str]:
    """SlurmTransport's methods that change jobs: those reporting per-job failures."""
    return sorted(
        name
        for name, f in vars(SlurmTransport).items()
        if inspect.isfunction(f) and "failed" in inspect.signature(f).parameters
    )


def test_the_act_primitives_are_the_seven_the_fence_knows():
    assert act_primitives() == [
        "admin_comment", "hold", "place", "relabel", "release", "requeuehold", "send_signal",
    ]  # fmt: skip


@pytest.mark.parametrize("name", act_primitives())
def test_every_action_asks_the_gate_and_a_refusal_sends_nothing(name):
    inner = mock.Mock()
    fenced = FencedTransport(inner, refuse)
    args = [
        mock.MagicMock()
        for _ in list(inspect.signature(getattr(SlurmTransport, name)).parameters)[1:]
    ]
    with pytest.raises(Refused):
        getattr(fenced, name)(*args)
    assert inner.method_calls == []
    asked: list[str] = []
    fenced = FencedTransport(inner, lambda kind, ids: asked.append(kind))
    getattr(fenced, name)(*args)
    assert [c[0] for c in inner.method_calls] == [name] and len(asked) == 1


def test_reads_pass_through_without_the_gate():
    inner = mock.Mock()
    fenced = FencedTransport(inner, refuse)
    fenced.read_nodes()
    fenced.read_reservations()
    fenced.read_jobs([], first=True, watched={})
    fenced.read_ended(["1"])
    fenced.states(["1"])
    fenced.steps_answer(["1"])
    fenced.private_data()
    fenced.kill_wait_s()
    fenced.between_rounds()
    assert len(inner.method_calls) == 9


def placement(i: int, jobs: dict[str, tuple[str, str]]) -> RoundPlacement:
    return RoundPlacement(
        i, 0.0, {j: JobPlacement(j, t, (NodeSlice(n, 1),)) for j, (t, n) in jobs.items()}
    )


def test_a_backend_behind_a_refusing_gate_issues_no_action_at_all():
    slurm = FakeSlurm()
    a = slurm.submit("gavel:type=A3C,scale=1")
    b = slurm.submit("gavel:type=A3C,scale=1")
    allowed = [True]

    def gate(kind: str, ids: object) -> None:
        if not allowed[0]:
            raise Refused(kind)

    backend = fake_backend(slurm, grace_s=30, gate=gate)
    backend.observe()
    backend.act(placement(0, {a: ("v100", "v100-1")}))
    slurm.advance(6)
    backend.observe()
    n = len(backend.transport.acts())
    allowed[0] = False  # deposed: the next act (a preemption and a start) sends nothing
    with pytest.raises(Refused):
        backend.act(placement(1, {b: ("v100", "v100-1")}))
    with pytest.raises(Refused):
        backend.set_admin_comments({a: "x"})
    assert backend.transport.acts()[n:] == []
    assert slurm.job(a).state == "RUNNING" and slurm.job(b).held


def old_leader(slurm: FakeSlurm, a: str):
    """The old leader's backend, with ``a`` placed in round 0 and running 6 s later."""
    old = fake_backend(slurm, grace_s=20)
    old.observe()
    old.act(placement(0, {a: ("v100", "v100-1")}))
    slurm.advance(6)
    old.observe()
    return old


def test_a_signal_handed_over_is_not_sent_again_and_its_grace_is_enforced():
    slurm = FakeSlurm()
    a = slurm.submit("gavel:type=A3C", script=IGNORES)
    old = old_leader(slurm, a)
    assert old.act(placement(1, {})).preempted == (a,)
    handed = old.signals()
    assert list(handed) == [a]
    slurm.advance(3)  # the old leader dies mid-grace; a new one takes over
    new = fake_backend(slurm, grace_s=20)
    new.restore_signals(handed)
    new.observe()
    res = new.act(placement(2, {}))  # the new round wants `a` off too
    assert "signal" not in [k for k, _ in new.transport.acts()]
    assert res.preempted == (a,)  # still preempted: by the signal it was told
    slurm.advance(18)  # past the grace of the old signal
    new.observe()
    new.act(placement(3, {}))
    assert ("requeuehold", (a,)) in new.transport.acts()
    assert "signal" not in [k for k, _ in new.transport.acts()]
    assert slurm.job(a).state != "RUNNING"


def test_without_the_hand_over_the_new_daemon_would_signal_the_same_run_again():
    """What the hand-over prevents (a single daemon's restart still does this)."""
    slurm = FakeSlurm()
    a = slurm.submit("gavel:type=A3C", script=IGNORES)
    old = old_leader(slurm, a)
    old.act(placement(1, {}))
    slurm.advance(3)
    new = fake_backend(slurm, grace_s=20)
    new.observe()
    new.act(placement(2, {}))
    assert ("signal", (a,)) in new.transport.acts()


def test_a_handed_over_signal_is_forgotten_once_its_job_runs_again():
    """The old leader signalled `a`, saw nothing more; `a` checkpointed and a later
    run started (the old leader moved it) before the new one took over: the new run
    never got that signal and must not be requeue-held at its grace end."""
    slurm = FakeSlurm()
    a = slurm.submit("gavel:type=A3C")
    old = old_leader(slurm, a)
    old.act(placement(1, {a: ("k80", "k80-1")}))  # a move: signal, exit, start elsewhere
    slurm.advance(2)
    stale = {a: slurm.clock() - 8.0}  # a signal saved before the move's new run began
    new = fake_backend(slurm, grace_s=20)
    new.restore_signals(stale)
    assert new.signals() == stale
    assert {o.job.id: o.state for o in new.observe().jobs} == {a: JobState.RUNNING}
    assert new.signals() == {}
    slurm.advance(30)
    new.observe()
    new.act(placement(2, {a: ("k80", "k80-1")}))
    assert "requeuehold" not in [k for k, _ in new.transport.acts()]
    assert slurm.job(a).state == "RUNNING"
