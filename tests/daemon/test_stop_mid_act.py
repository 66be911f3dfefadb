"""A SIGTERM while a round acts never leaves the acted round unlogged: the
daemon's stop() ends the act's waits through the backend's InterruptibleWaits hook,
so the round ends, is logged and saved, and run() returns, instead of the round
waiting out a preempted job's grace until the service manager kills it unlogged."""

from __future__ import annotations

import threading
import time

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

GRACE_S = 30.0  # what the act would wait without the hook


class WaitingAct:
    """The simulator, whose act waits for a preempted job's grace (as the Slurm
    backend's does for a move) unless told to stop waiting."""

    def __init__(self, inner: SimulatedCluster) -> None:
        self.inner = inner
        self.acting = threading.Event()
        self.stopping = threading.Event()
        self.waited = 0.0

    def observe(self):  # type: ignore[no-untyped-def]
        return self.inner.observe()

    def act(self, placement):  # type: ignore[no-untyped-def]
        result = self.inner.act(placement)
        self.acting.set()
        t0 = time.monotonic()
        self.stopping.wait(GRACE_S)
        self.waited = time.monotonic() - t0
        return result

    def stop_waiting(self) -> None:
        self.stopping.set()


@pytest.fixture
def daemon(tmp_path):  # type: ignore[no-untyped-def]
    table = load_table()
    jobs = [Job(str(i), "A3C", 1, total_steps=1e9) for i in range(2)]
    backend = WaitingAct(SimulatedCluster(parse_cluster_spec("v100:1x2"), jobs, table))
    doc = {"partitions": ["gpu"], "round_seconds": 60, "checkpoint": {"grace_seconds": 5},
           "state_dir": str(tmp_path / "state")}  # fmt: skip
    return Daemon(parse_config(doc), backend, table=table, metrics=DaemonMetrics())


def test_a_stop_during_the_act_ends_its_wait_and_the_round_is_logged(daemon, daemon_log):
    backend = daemon.backend

    def sigterm_mid_act() -> None:
        backend.acting.wait(30)
        daemon.stop()  # what the SIGTERM handler calls

    t = threading.Thread(target=sigterm_mid_act)
    t.start()
    t0 = time.monotonic()
    try:
        assert daemon.run() == 0
    finally:
        t.join(30)
    took = time.monotonic() - t0
    assert backend.waited < 5 and took < 10, (backend.waited, took)  # not the grace
    names = [getattr(r, "event", None) for r in daemon_log]
    rounds = [r for r in daemon_log if getattr(r, "event", None) == "round"]
    assert len(rounds) == 1 and rounds[0].fields["started"] == 2, names  # the acted round
    assert names.index("round") < names.index("stopping")
    assert daemon.state.round_index == 1
