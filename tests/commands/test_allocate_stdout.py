"""Solver output never reaches stdout: `allocate --json` and `simulate --json -` print
exactly one JSON document there, for every policy.

highspy 1.16 prints its banner from C++ to file descriptor 1 the first time a
``highspy.Highs`` is made in a process (slurm_gavel/policies/solvers/silent_highs.py), so
these run the command-line tool as a separate process, as an admin does, and read
its stdout whole: an in-process ``capsys`` would not see a descriptor-level print.

``SLURM_GAVEL_INSTALLED_CLI`` (tools/check-install sets it): the ``slurm-gavel`` of a
fresh install without the lock, which these tests run as well, beside this
interpreter's (the locked .venv in CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_gavel.policies import policy_names

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "conf" / "examples" / "problem.json"
INSTALLED = "SLURM_GAVEL_INSTALLED_CLI"
TIMEOUT_S = 300

# min_cost needs prices, which the shipped trace's cluster has none of: allocate covers it.
SIMULATED = [p for p in policy_names() if p != "min_cost"] + ["slurm_fifo"]


def clis() -> dict[str, list[str]]:
    """The command lines of slurm-gavel to check: label -> argv prefix."""
    # -m from a scratch cwd: the installed package, not the repository's source by accident
    out = {"this-python": [sys.executable, "-m", "slurm_gavel"]}
    installed = os.environ.get(INSTALLED)
    if installed:
        out["installed"] = [installed]
    return out


def commands() -> dict[str, list[str]]:
    """label -> arguments of every command that prints JSON on stdout here."""
    out = {
        f"allocate-{p}": ["allocate", "--problem", str(PROBLEM), "--policy", p, "--json"]
        for p in policy_names()
    }
    out["simulate"] = ["simulate", "--json", "-", "--no-progress", "--no-wall-time"]
    for p in SIMULATED:
        out["simulate"] += ["--policy", p]
    return out


CASES = [(c, k) for c in clis() for k in commands()]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[tuple[str, str], subprocess.CompletedProcess[bytes]]:
    """Every (cli, command), started together (each is a process of its own, ~0.5 s of
    imports) and waited for."""
    cwd = tmp_path_factory.mktemp("stdout-json")
    procs = {}
    for cli, prefix in clis().items():
        for label, args in commands().items():
            procs[(cli, label)] = (
                [*prefix, *args],
                subprocess.Popen(
                    [*prefix, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
                ),
            )
    done = {}
    for key, (argv, p) in procs.items():
        try:
            out, err = p.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        done[key] = subprocess.CompletedProcess(argv, p.returncode, out, err)
    return done


@pytest.mark.parametrize(("cli", "command"), CASES, ids=[f"{c}-{k}" for c, k in CASES])
def test_stdout_is_exactly_one_json_document(outputs, cli, command):
    res = outputs[(cli, command)]
    shown = " ".join(res.args)
    assert res.returncode == 0, f"{shown}: exit {res.returncode}\n{res.stderr.decode()[-2000:]}"
    text = res.stdout.decode()
    try:
        doc = json.loads(text)  # one document, nothing before or after it (whitespace aside)
    except json.JSONDecodeError as exc:
        pytest.fail(
            f"{shown}: stdout is not exactly one JSON document ({exc}); a solver or library "
            f"printed on stdout? It begins:\n{text[:400]}"
        )
    assert doc, f"{shown}: empty JSON on stdout"
    assert "HiGHS" not in res.stderr.decode(), f"{shown}: HiGHS's banner or log on stderr"
