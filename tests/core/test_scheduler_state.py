"""SchedulerState: its JSON form, bad documents, and the memo that is never persisted."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState, copy_state
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"


@pytest.mark.parametrize(
    "doc, needle",
    [
        ({"format": "nope"}, "not a scheduler state"),
        ({"format": "slurm-gavel-scheduler-state/1"}, "malformed"),
    ],
)
def test_bad_state_is_an_input_error(doc, needle):
    with pytest.raises(InputError, match=needle):
        SchedulerState.from_json(doc)


def test_the_round_memo_is_never_written_and_a_copy_starts_without_it():
    jobs = [Job("a", RESNET, 1, total_steps=1e9), Job("b", RESNET, 2, total_steps=1e9)]
    sim = SimulatedCluster(parse_cluster_spec("v100:1x4", TABLE), jobs, TABLE)
    state, _ = run_round(SchedulerState(), sim, SchedulerConfig(table=TABLE))
    assert state.memo is not None
    assert "memo" not in state.to_json()
    assert copy_state(state).memo is None
