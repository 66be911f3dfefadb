"""`slurm-gavel status` says which pair cells the sharing jobs run on are estimates
(learned from paired jobs' progress reports, or derived) rather than measured."""

from __future__ import annotations

import json

from slurm_gavel.commands.status import format_status
from slurm_gavel.daemon.pair_cells import PairObservation, update_pairs
from slurm_gavel.daemon.status_records import jobs_view
from slurm_gavel.daemon.status_view import status_view
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable

A3C, LM = "A3C", "LM"
TABLE = ThroughputTable(
    alone={(A3C, 1): {"v100": 10.0}, (LM, 1): {"v100": 4.0}},
    pairs={(A3C, LM, 1): {"v100": (6.0, 3.0)}},
)


def _snap() -> ClusterSnapshot:
    on = (NodeSlice("v100-1", 1),)
    return ClusterSnapshot(
        0.0,
        (),
        (
            ObservedJob(Job("11", A3C), JobState.RUNNING, "v100", on, partner="12"),
            ObservedJob(Job("12", LM), JobState.RUNNING, "v100", on, partner="11"),
            ObservedJob(Job("13", A3C), JobState.RUNNING, "v100", (NodeSlice("v100-2", 1),)),
        ),
    )


def _text(table: ThroughputTable) -> tuple[dict, str]:
    rows = jobs_view(_snap(), None, table)
    doc = json.loads(json.dumps({"jobs": rows, "daemon": {"policy": "max_min_fairness_packed"}}))
    view = status_view(doc)
    return rows, format_status(view, now=0.0)


def test_a_learned_pair_cell_is_shown_as_an_estimate_and_a_measured_one_is_not():
    rows, text = _text(TABLE)
    assert rows["11"]["pair_cell"] == {"partner": "12", "partner_type": LM, "estimate": False}
    assert "pair_cell" not in rows["13"]
    assert "pair cells that are estimates" not in text
    learned = update_pairs(TABLE, [PairObservation(A3C, LM, 1, "v100", 4.0, 2)])
    rows, text = _text(learned)
    assert rows["11"]["pair_cell"]["estimate"] and rows["12"]["pair_cell"]["estimate"]
    assert "pair cells that are estimates" in text
    assert f"  {A3C} + {LM} x1 on v100 (jobs 11, 12)" in text
