"""Every reference workload trains on CPU (tiny config) and resumes bit-identically."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from running import python_module, run_ok

torch = pytest.importorskip("torch")

from slurm_gavel.domain.throughputs import load_table  # noqa: E402
from slurm_gavel.job import GavelJob  # noqa: E402
from workloads import runner  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ONE_PER_FAMILY = [
    "ResNet-18 (batch size 32)",
    "ResNet-50 (batch size 16)",
    "Transformer (batch size 64)",
    "LM (batch size 20)",
    "Recommendation (batch size 1024)",
    "CycleGAN",
    "A3C",
]
TOTAL, STOP = 4, 2


def test_every_job_type_of_the_table_has_a_workload() -> None:
    known = {t for f in runner.families().values() for t in f.job_types()}
    assert set(load_table().job_types) == known
    for jt in known:
        fam, bs = runner.resolve(jt)
        assert jt in fam.job_types() and bs in fam.batch_sizes


def _train(job_type: str, env: dict[str, str], stop_after: int | None) -> runner.Trainer:
    trainer = runner.build(job_type, tiny=True, device=torch.device("cpu"))
    job = GavelJob(env=env, **trainer.state)
    try:
        for step in job.steps(TOTAL):
            loss = trainer.step()
            assert loss == loss, f"{job_type}: loss is NaN at step {step}"
            if stop_after is not None and step + 1 == stop_after:
                job.request_checkpoint()
    finally:
        job.close()
    return trainer


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("job_type", ONE_PER_FAMILY)
def test_checkpoint_then_resume_is_bit_identical(job_type: str, tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "1", "GAVEL_CHECKPOINT_DIR": str(tmp_path)}
    straight = _train(job_type, env | {"GAVEL_CHECKPOINT_DIR": str(tmp_path / "other")}, None)

    with pytest.raises(SystemExit) as stopped:
        _train(job_type, env, STOP)
    assert stopped.value.code == 99
    resumed = _train(job_type, env | {"SLURM_RESTART_COUNT": "1"}, None)

    a, b = straight.parameters_vector(), resumed.parameters_vector()
    assert torch.equal(a, b), f"{job_type}: max diff {(a - b).abs().max().item()}"
    # the run really moved: parameters differ from a fresh initialisation
    fresh = runner.build(job_type, tiny=True, device=torch.device("cpu"))
    assert not torch.equal(fresh.parameters_vector(), b)
    for name, obj in straight.state.items():
        if isinstance(obj, torch.optim.Optimizer):
            sa, sb = obj.state_dict()["state"], resumed.state[name].state_dict()["state"]
            assert sa.keys() == sb.keys()
            for k in sa:
                for key, value in sa[k].items():
                    if torch.is_tensor(value):
                        assert torch.equal(value, sb[k][key]), f"{name} state {k}.{key}"


def _cli(*args: str, extra_env: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra_env or {})
    res = run_ok(python_module(*args), env=env, cwd=REPO, timeout=120)
    return json.loads(res.stdout.strip().splitlines()[-1])


# Slow (full tier only: tools/test --help): trains workloads on CPU, 17 s.
@pytest.mark.slow
@pytest.mark.torch
def test_single_entry_point_by_job_type() -> None:
    out = _cli(
        "workloads",
        "--job-type",
        "Recommendation (batch size 4096)",
        "--steps",
        "3",
        "--tiny",
        "--device",
        "cpu",
    )
    assert out["job_type"] == "Recommendation (batch size 4096)" and out["steps"] == 3


# Slow (full tier only: tools/test --help): trains workloads on CPU, 16 s.
@pytest.mark.slow
@pytest.mark.torch
def test_family_module_entry_point() -> None:
    out = _cli("workloads.lm", "--batch-size", "10", "--steps", "2", "--tiny")
    assert out["job_type"] == "LM (batch size 10)" and out["steps"] == 2


def test_unknown_job_type_names_the_known_ones() -> None:
    with pytest.raises(SystemExit, match="known: ResNet-18"):
        runner.resolve("VGG-16 (batch size 8)")


@pytest.mark.torch
def test_min_step_seconds_paces_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    out = runner.run(
        "Recommendation (batch size 512)", 3, tiny=True, device="cpu", min_step_seconds=0.2
    )
    assert out["steps"] == 3 and out["wall_s"] >= 0.6
