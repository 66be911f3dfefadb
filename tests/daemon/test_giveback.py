"""The daemon's side of giving held jobs back to Slurm (daemon_tap.give_back), on the
simulated backend with a recording give_back (the Slurm side: test_giveback_on_slurm.py)."""

from __future__ import annotations

import logging

import pytest
from daemon_records import daemon_records

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table


class GivingBack:
    """A simulated cluster that records give_back calls, as SlurmBackend would act."""

    def __init__(self, inner: SimulatedCluster, refused: dict[str, str]) -> None:
        self.inner, self.refused_held, self.calls = inner, refused, []

    def observe(self):  # type: ignore[no-untyped-def]
        return self.inner.observe()

    def act(self, placement):  # type: ignore[no-untyped-def]
        return self.inner.act(placement)

    def give_back(self, reasons):  # type: ignore[no-untyped-def]
        self.calls.append(dict(reasons))
        return {}


def run(tmp_path, *, dry_run: bool, rounds: int = 3):  # type: ignore[no-untyped-def]
    table = load_table()
    jobs = [Job("1", "A3C", 1, total_steps=1e9), Job("2", "VGG-16", 1, total_steps=1e9)]
    sim = SimulatedCluster(parse_cluster_spec("v100:1x4"), jobs, table)
    backend = GivingBack(sim, {"99": "job 99: gavel comment: scale='0x10' must be ..."})
    cfg = parse_config(
        {
            "partitions": ["gpu"],
            "round_seconds": 60,
            "checkpoint": {"grace_seconds": 5},
            "state_dir": str(tmp_path / "s"),
            # a type the table lacks is given back under table knowledge only (with
            # learned knowledge, the default, it runs on an estimate)
            "learning": {"knowledge": "table"},
        }
    )
    d = Daemon(cfg, backend, table=table, metrics=DaemonMetrics(), dry_run=dry_run)
    try:
        with daemon_records(logging.WARNING) as records:
            d.start()
            for _ in range(rounds):
                d.round()
                sim.advance(sim.clock + 60)
    finally:
        d.store.release()
    given = [r.fields for r in records if getattr(r, "event", None) == "job_given_back"]
    return backend.calls, given


@pytest.mark.hostile(guards="stranded")
def test_unknown_types_and_refused_comments_are_given_back(tmp_path):
    calls, given = run(tmp_path, dry_run=False, rounds=1)
    assert len(calls) == 1 and set(calls[0]) == {"2", "99"}
    assert "unknown job type 'VGG-16'" in calls[0]["2"]
    assert {g["job"] for g in given} == {"2", "99"}


def test_a_dry_run_gives_nothing_back_and_says_so_once(tmp_path):
    calls, given = run(tmp_path, dry_run=True, rounds=3)
    assert calls == []
    assert sorted(g["job"] for g in given) == ["2", "99"]  # not once per round
    assert all(g["dry_run"] for g in given)
