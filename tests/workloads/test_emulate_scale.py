"""The GPU count an emulated run paces to (workloads/emulate.run_scale): a rigid job's
scale, a moldable job's (MIN-MAX) GPUs of this run; hostile values refused."""

from __future__ import annotations

import pytest

from workloads import emulate


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, 1),
        ({"GAVEL_SCALE": "2"}, 2),
        ({"SLURM_SPANK_GAVEL_SCALE": "4"}, 4),
        ({"SLURM_SPANK_GAVEL_SCALE": "1-4", "SLURM_GPUS_ON_NODE": "2"}, 2),
        ({"GAVEL_SCALE": "1-8", "SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_NUM_NODES": "2"}, 4),
        ({"GAVEL_SCALE": "2-8"}, 2),  # no GPUs in the environment: the range's minimum
    ],
)
def test_run_scale(env: dict[str, str], want: int) -> None:
    assert emulate.run_scale(env) == want


@pytest.mark.parametrize(
    "env",
    [
        {"GAVEL_SCALE": "1-2", "SLURM_GPUS_ON_NODE": "4"},  # more than the range
        {"GAVEL_SCALE": "1-2;touch /tmp/x"},
        {"GAVEL_SCALE": "two"},
        {"GAVEL_SCALE": "-1"},
        {"GAVEL_SCALE": "0"},
        {"GAVEL_SCALE": "1-2", "SLURM_GPUS_ON_NODE": "1\x1b[2J"},
        {"GAVEL_SCALE": "1-2", "SLURM_GPUS_ON_NODE": "1", "SLURM_JOB_NUM_NODES": "9" * 30},
    ],
)
def test_run_scale_refuses(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"GPU|range"):
        emulate.run_scale(env)


def test_a_run_on_two_gpus_paces_to_that_row_and_says_so() -> None:
    emu = emulate.emulation_for("ResNet-50 (batch size 64)", 2, 1.0, {"SLURMD_NODENAME": "v100-1"},
                                lambda n: None)  # fmt: skip
    one = emulate.emulation_for("ResNet-50 (batch size 64)", 1, 1.0, {"SLURMD_NODENAME": "v100-1"},
                                lambda n: None)  # fmt: skip
    assert emu.gpus == 2 and emu.rate > one.rate
    assert " on 2 GPUs at " in emu.describe("ResNet-50 (batch size 64)", "v100-1", "1")
    assert " on " not in one.describe("ResNet-50 (batch size 64)", "v100-1", "0").split(":")[1][:40]
