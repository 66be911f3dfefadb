"""The world size across restarts: the batch plan, the checkpoint's world
record read as untrusted input, the RNG rule on another count, the hooks."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from slurm_gavel.job import GavelJob
from slurm_gavel.job.checkpoint import capture_rng, save_checkpoint
from slurm_gavel.job.ranks import RANK_RNG_KEY
from slurm_gavel.job.world import (
    MAX_WORLD_SIZE,
    WORLD_KEY,
    BatchPlanError,
    CheckpointWorldError,
    WorldChange,
    WorldRecord,
    WorldTracker,
    parse_record,
    plan_batch,
    reseed_rank,
)

# ---- the batch plan --------------------------------------------------------------------


@pytest.mark.parametrize(("world", "accum"), [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_the_global_batch_is_kept_by_the_accumulation_steps(world: int, accum: int) -> None:
    plan = plan_batch(64, 8, world)
    assert (plan.global_batch, plan.accumulation_steps) == (64, accum)
    assert plan.loss_scale == 1 / accum


@pytest.mark.parametrize("world", [1, 2, 4])
def test_a_step_covers_the_same_samples_whatever_the_world_size(world: int) -> None:
    plan = plan_batch(16, 2, world)
    for step in (0, 3):
        got = sorted(i for r in range(world) for sl in plan.micro_slices(step, r) for i in sl)
        assert got == list(range(step * 16, step * 16 + 16))
    with pytest.raises(BatchPlanError, match="rank 4 is not in a world of"):
        plan.micro_slices(0, 4 if world <= 4 else 99)


def test_opting_out_keeps_the_accumulation_and_lets_the_global_batch_follow() -> None:
    plan = plan_batch(None, 8, 3, keep_global_batch=False, accumulation_steps=2)
    assert (plan.global_batch, plan.accumulation_steps, plan.keep_global_batch) == (48, 2, False)


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((100, 8, 3), "global_batch=100 is not a multiple of micro_batch=8 x 3 ranks = 24"),
        ((64, 8, 3), "no micro batch fits 3 ranks"),
        ((64, 8, 16), "a micro batch of 4 fits"),
        ((8, 8, 2), "a micro batch of 4 fits"),
        ((0, 8, 1), "global_batch=0 must be between 1 and"),
        ((-64, 8, 1), "global_batch=-64 must be between 1 and"),
        (("64", 8, 1), "global_batch='64' must be a whole number"),
        ((64.0, 8, 1), "global_batch=64.0 must be a whole number"),
        ((True, 1, 1), "global_batch=True must be a whole number"),
        ((64, 0, 1), "micro_batch=0 must be between"),
        ((None, 8, 1), "give global_batch"),
        ((64, 8, 1 << 30), "world_size=1073741824 must be between 1 and"),
    ],
)
def test_batch_declarations_that_cannot_hold_are_refused_saying_what_fits(
    args: tuple[Any, Any, Any], said: str
) -> None:
    with pytest.raises(BatchPlanError, match=said.replace("(", r"\(").replace(")", r"\)")):
        plan_batch(*args)


@pytest.mark.hostile
def test_gavel_job_checks_the_declaration_before_it_starts() -> None:
    with pytest.raises(BatchPlanError, match="global_batch needs micro_batch"):
        GavelJob(env={}, global_batch=64)
    with pytest.raises(BatchPlanError, match="accumulation_steps=0 must be between"):
        GavelJob(env={}, micro_batch=4, keep_global_batch=False, accumulation_steps=0)
    with pytest.raises(BatchPlanError, match="micro_batch='4' must be a whole number"):
        GavelJob(env={}, global_batch=64, micro_batch="4")


def test_outside_slurm_the_plan_is_there_for_one_process() -> None:
    with GavelJob(env={}, global_batch=32, micro_batch=8) as job:
        assert (job.world_size, job.previous_world_size, job.accumulation_steps) == (1, None, 4)
    with GavelJob(env={}) as job:
        assert (job.batch, job.accumulation_steps) == (None, 1)


# ---- the checkpoint's record, untrusted ----------------------------------------------


def test_a_record_round_trips_and_an_old_checkpoint_counts_its_rng_states() -> None:
    rec = WorldRecord(4, 64, 8, 2)
    assert parse_record(rec.to_dict(), None, "c") == rec
    assert parse_record(None, [{}, {}, {}], "c") == WorldRecord(3)
    assert parse_record(None, None, "c") == WorldRecord(1)


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ({"world_size": -2}, "world_size=-2 is not a whole number from 1 to"),
        ({"world_size": 0}, "world_size=0 is not a whole number"),
        ({"world_size": 10**30}, "world_size=1000000000000000000000000000000 is not"),
        ({"world_size": MAX_WORLD_SIZE + 1}, f"world_size={MAX_WORLD_SIZE + 1} is not"),
        ({"world_size": "2"}, "world_size='2' is not a whole number"),
        ({"world_size": "x" * 10_000}, "world_size='xxxxxxxx"),
        ({"world_size": True}, "world_size=True is not"),
        ({"world_size": 2.0}, "world_size=2.0 is not"),
        ({"world_size": [2]}, r"world_size=\[2\] is not"),
        ({"world_size": 2, "global_batch": -1}, "global_batch=-1 is not"),
        ({"world_size": 2, "accumulation_steps": "many"}, "accumulation_steps='many' is not"),
        ({}, "has no world_size"),
        ({"world_size": 2, "rm -rf": 1}, r"unknown _gavel_world fields \['rm -rf'\]"),
        ("2", "its _gavel_world is a str, not a record"),
        ([2], "its _gavel_world is a list, not a record"),
    ],
)
def test_hostile_world_records_are_refused_naming_the_field_and_the_fix(
    raw: Any, said: str
) -> None:
    with pytest.raises(CheckpointWorldError, match=said) as e:
        parse_record(raw, None, "/ck/ckpt-1.pt")
    assert "/ck/ckpt-1.pt" in str(e.value)
    assert len(str(e.value)) < 400


@pytest.mark.hostile
def test_a_record_its_rng_states_contradict_is_refused() -> None:
    with pytest.raises(CheckpointWorldError, match="world_size=4 but RNG states of 2 ranks"):
        parse_record({"world_size": 4}, [{}, {}], "c")


def _plant(folder: Path, record: Any, ranks: int | None = None) -> None:
    state: dict[str, Any] = {"w": [1, 2, 3], WORLD_KEY: record}
    if ranks is not None:
        state[RANK_RNG_KEY] = [capture_rng() for _ in range(ranks)]
    save_checkpoint(folder, 5, state)  # verified: the record is all that is wrong


def _job(folder: Path, **kw: Any) -> GavelJob:
    env = {"SLURM_JOB_ID": "1", "SLURM_RESTART_COUNT": "1"}
    return GavelJob(env=env, checkpoint_dir=folder, w=[0], **kw)


@pytest.mark.hostile
@pytest.mark.parametrize("bad", [-1, 1 << 40, "2", [2]])
def test_gavel_job_stops_on_a_checkpoint_with_a_hostile_world_size(
    tmp_path: Path, bad: Any
) -> None:
    folder = tmp_path / "ck"
    _plant(folder, {"world_size": bad})
    with pytest.raises(CheckpointWorldError, match="remove it") as e:
        _job(folder).resume()
    assert "ckpt-000000000005.pt" in str(e.value)


# ---- resume at the same count and at another -----------------------------------------


def test_the_same_count_restores_the_rng_streams(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    random.seed(3)
    job = GavelJob(env={"SLURM_JOB_ID": "1"}, checkpoint_dir=folder, w=[1])
    job.resume()
    job.checkpoint()
    expected = random.random()
    random.seed(99)
    again = _job(folder)
    again.resume()
    assert random.random() == expected
    assert (again.previous_world_size, again.world.change) == (1, None)


def test_another_count_reseeds_per_rank_reproducibly_and_calls_the_hooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ck"
    random.seed(3)
    _plant(folder, {"world_size": 2, "global_batch": 32, "micro_batch": 4}, ranks=2)
    seen: list[WorldChange] = []
    job = _job(folder, global_batch=16, micro_batch=4, on_world_size_change=seen.append)
    assert job.resume() == 5
    assert (job.world_size, job.previous_world_size, job.accumulation_steps) == (1, 2, 4)
    assert seen == [WorldChange(2, 1, 5, job.batch)]
    err = capsys.readouterr().err
    assert "world size changed 2 -> 1 ranks at step 5; global batch 16 kept" in err
    assert "the checkpoint's run had a global batch of 32" in err
    draw = random.random()
    late: list[WorldChange] = []
    job.on_world_size_change(late.append)  # after the resume: called at once
    assert late == seen
    # the same resume again draws the same; rank 1 of the new world would draw another
    random.seed(0)
    _job(folder).resume()
    assert random.random() == draw
    rank0 = {"python": random.getstate()}
    reseed_rank(rank0, 5, 0, 2)
    a = random.random()
    reseed_rank(rank0, 5, 1, 2)
    assert random.random() != a


def test_without_a_declared_batch_the_change_is_still_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ck"
    _plant(folder, {"world_size": 4}, ranks=4)
    _job(folder).resume()
    assert "no global batch declared" in capsys.readouterr().err


def test_the_tracker_records_what_the_checkpoint_needs() -> None:
    t = WorldTracker(64, 8)
    t.start(4)
    assert t.record() == {
        "world_size": 4,
        "global_batch": 64,
        "micro_batch": 8,
        "accumulation_steps": 2,
    }
    bare = WorldTracker()
    bare.start(3)
    assert bare.record() == {"world_size": 3}


@pytest.mark.hostile
@pytest.mark.torch
def test_a_sharded_checkpoint_with_a_hostile_world_size_stops_the_job(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from slurm_gavel.job.sharded import SoloGroup, save_sharded

    folder = tmp_path / "ck"
    model = torch.nn.Linear(2, 2)
    extra = {"step": 3, "rng": [capture_rng()], "values": {}, WORLD_KEY: {"world_size": -5}}
    save_sharded(SoloGroup(), folder, 3, {"model": model}, extra)  # complete and verified
    env = {"SLURM_JOB_ID": "1", "SLURM_RESTART_COUNT": "1"}
    job = GavelJob(torch.nn.Linear(2, 2), env=env, checkpoint_dir=folder, sharded=True)
    with pytest.raises(CheckpointWorldError, match="world_size=-5 is not a whole number") as e:
        job.resume()
    assert "dcp-000000000003" in str(e.value)


@pytest.mark.hostile
@pytest.mark.parametrize(
    "rngs", [[5], ["python"], [{"python": "not a state"}], [{"python": (3, (1, 2), None)}]]
)
def test_rng_states_that_cannot_be_restored_stop_the_job_clearly(
    tmp_path: Path, rngs: list[Any]
) -> None:
    folder = tmp_path / "ck"
    save_checkpoint(folder, 5, {"w": [1], WORLD_KEY: {"world_size": 1}, RANK_RNG_KEY: rngs})
    with pytest.raises(CheckpointWorldError, match="the RNG states of rank 0 cannot be restored"):
        _job(folder).resume()
