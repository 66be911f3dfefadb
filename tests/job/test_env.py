"""The job's settings from Slurm, the SPANK plugin and the admin."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from slurm_gavel.job.env import JobEnvError, read_env


def test_outside_slurm_nothing_is_active() -> None:
    env = read_env({})
    assert not env.in_slurm and not env.resuming and env.checkpoint_dir is None
    assert env.requeue_exit_code == 99 and env.checkpoint_signal == signal.SIGUSR1


def test_plugin_variables_and_job_folder() -> None:
    env = read_env(
        {
            "SLURM_JOB_ID": "42",
            "SLURM_RESTART_COUNT": "2",
            "SLURM_SPANK_GAVEL_JOB_TYPE": "A3C",
            "GAVEL_CHECKPOINT_DIR": "/ck",
            "GAVEL_PRIORITY": "2.5",
            "GAVEL_TOTAL_STEPS": "100",
            "GAVEL_REQUEUE_EXIT_CODE": "98",
            "GAVEL_CHECKPOINT_SIGNAL": "usr2",
        }
    )
    assert env.job_type == "A3C" and env.resuming and env.restart_count == 2
    assert env.checkpoint_dir == Path("/ck/42")
    assert (env.priority, env.total_steps, env.requeue_exit_code) == (2.5, 100, 98)
    assert env.checkpoint_signal == signal.SIGUSR2


def test_gavel_variable_wins_over_the_spank_copy() -> None:
    env = read_env({"GAVEL_JOB_TYPE": "LM (batch size 5)", "SLURM_SPANK_GAVEL_JOB_TYPE": "A3C"})
    assert env.job_type == "LM (batch size 5)"


def test_default_checkpoint_dir_is_under_the_submit_dir() -> None:
    env = read_env({"SLURM_JOB_ID": "7", "SLURM_SUBMIT_DIR": "/home/u"})
    assert env.checkpoint_dir == Path("/home/u/gavel-checkpoints/7")


@pytest.mark.parametrize(
    "var,value",
    [
        ("GAVEL_REQUEUE_EXIT_CODE", "abc"),
        ("GAVEL_REQUEUE_EXIT_CODE", "300"),
        ("GAVEL_CHECKPOINT_SIGNAL", "SIGNOPE"),
    ],
)
def test_bad_values_name_the_variable(var: str, value: str) -> None:
    with pytest.raises(JobEnvError, match=var):
        read_env({var: value})
