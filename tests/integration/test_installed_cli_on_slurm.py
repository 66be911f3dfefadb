"""`slurm-gavel run --dry-run --once` against the local cluster, as an admin's first run:
the plan on stdout, no solver output in it.

It runs this interpreter's slurm-gavel and, when tools/test sets
SLURM_GAVEL_INSTALLED_CLI (tools/check-install: a fresh `pip install ./jobpkg .` with
the newest releases pyproject.toml allows, no lock), that one too.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.commands.test_allocate_stdout import clis

pytestmark = [pytest.mark.slurm]


@pytest.mark.parametrize("cli", list(clis()))
def test_dry_run_once_prints_the_plan_and_nothing_else(scenario, cli):
    cfg = scenario.daemon.config
    # A policy that solves through highspy.Highs (max_min_fairness's usual path does not).
    text = cfg.read_text()
    cfg.write_text(text.replace("policy: max_min_fairness", "policy: max_sum_throughput"))
    ids = [scenario.submit("A3C", steps=30) for _ in range(2)]
    res = subprocess.run(
        [*clis()[cli], "run", "--config", str(cfg), "--dry-run", "--once"],
        cwd=scenario.dir,
        capture_output=True,
        text=True,
        env={**os.environ, **scenario.slurm.env},
        timeout=120,
    )
    shown = f"{cli}: run --dry-run --once"
    assert res.returncode == 0, f"{shown}: exit {res.returncode}\n{res.stderr[-2000:]}"
    assert "HiGHS" not in res.stdout, f"{shown}: solver output on stdout:\n{res.stdout[:600]}"
    assert res.stdout.count("  start    ") == len(ids), f"{shown}: the plan?\n{res.stdout}"
    assert not scenario.state_file.exists()  # a dry run changes nothing
    assert set(scenario.states(ids).values()) == {"PENDING"}
