"""The daemon checks its backend's optional hooks once, when it is built
(core/backend_hooks.py), and calls them through that record only. How each hook is
used is tested beside its feature (test_daemon.py: resume, between_rounds, the grace
hooks, warnings; test_giveback.py; test_daemon_publish.py; test_status_private.py)."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.commands.run import build_backend
from slurm_gavel.core.backend_hooks import BackendHookError, BackendHooks
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table


@pytest.fixture(scope="module")
def table():
    return load_table()


def config(tmp_path, **over):
    doc = {"partitions": ["gpu"], "round_seconds": 60, "checkpoint": {"grace_seconds": 5},
           "state_dir": str(tmp_path / "state"), **over}  # fmt: skip
    return parse_config(doc)


def simulator(table) -> SimulatedCluster:
    jobs = [Job(str(i), "A3C", 1, total_steps=1e9) for i in range(3)]
    return SimulatedCluster(parse_cluster_spec("v100:1x2"), jobs, table)


class Wrapped:
    """The simulator behind observe and act only, plus what a test adds."""

    def __init__(self, inner: SimulatedCluster) -> None:
        self.inner = inner

    def observe(self):  # type: ignore[no-untyped-def]
        return self.inner.observe()

    def act(self, placement):  # type: ignore[no-untyped-def]
        return self.inner.act(placement)


class OldGrace(Wrapped):
    """A backend written against another daemon: enforce_grace takes the job ids."""

    def grace_due_in(self):  # type: ignore[no-untyped-def]
        return None

    def enforce_grace(self, job_ids):  # type: ignore[no-untyped-def]
        return [], {}


def test_a_backend_with_a_hook_in_the_wrong_shape_is_refused_when_the_daemon_is_built(
    tmp_path, table
):
    with pytest.raises(BackendHookError) as e:
        Daemon(config(tmp_path), OldGrace(simulator(table)), table=table, metrics=DaemonMetrics())
    assert str(e.value) == (
        "backend OldGrace: optional hooks in the wrong shape (CONTRIBUTING.md, A backend): "
        "enforce_grace cannot be called with 0 arguments (GraceEnforcement: "
        "enforce_grace() -> tuple[list[JobId], dict[JobId, str]])"
    )
    # refused before it took the state lock: a daemon with a sound backend starts
    d = Daemon(config(tmp_path), simulator(table), table=table, metrics=DaemonMetrics())
    d.start()
    d.store.release()


def test_the_hooks_are_read_once_at_start_not_probed_each_round(tmp_path, table):
    sim = simulator(table)
    backend = Wrapped(sim)
    d = Daemon(config(tmp_path), backend, table=table, metrics=DaemonMetrics())
    assert d.hooks == BackendHooks()
    calls: list[str] = []
    backend.between_rounds = lambda: calls.append("between_rounds")  # type: ignore[attr-defined]
    d.start()
    try:
        d.round()
        d.loop.between_rounds()
    finally:
        d.store.release()
    assert calls == []  # not offered when the daemon was built


def test_the_simulator_offers_private_data_to_the_daemon(tmp_path, table):
    sim = simulator(table)
    d = Daemon(config(tmp_path), sim, table=table, metrics=DaemonMetrics())
    assert d.hooks.private_data is sim and d.publisher.private_data is sim
    assert d.hooks.resumable is None and d.hooks.commands_issued() is None


def test_the_slurm_backends_offer_every_hook(tmp_path):
    """As `slurm-gavel run` builds them (nothing is sent to Slurm to build them)."""
    cli = build_backend(config(tmp_path))
    token = tmp_path / "jwt"
    token.write_text("abc.def\n")
    token.chmod(0o600)
    rest = {"rest_url": "https://ctl:6820", "rest_token_file": str(token), "rest_user": "slurm"}
    rest_backend = build_backend(config(tmp_path, backend="rest", slurm=rest))
    for backend in (cli, rest_backend):
        hooks = BackendHooks.of(backend)
        assert all(getattr(hooks, f) is backend for f in vars(hooks)), type(backend)
