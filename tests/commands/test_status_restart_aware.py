"""`status` and `explain` under restart-aware rounds: a run kept by its protection says
so, with how much longer; a job waiting behind kept runs says that too."""

from __future__ import annotations

import json
import math

import pytest
from daemon_rounds import TYPES, run_daemon

from slurm_gavel.cli import main
from slurm_gavel.core.restart_aware.run_protection import RunProtection
from slurm_gavel.daemon.state_store import StateStore
from slurm_gavel.daemon.status_view import held_types, status_view, why
from slurm_gavel.domain.model import Job

KEPT = "kept where it runs until this run has paid for its restart"
BEHIND = "runs kept until they have paid for their restarts"


def _jobs() -> list[Job]:
    # six jobs on four GPUs (v100:1x2, k80:1x2): two wait every round
    return [Job(str(i), TYPES[i % 3], 1, total_steps=1e9) for i in range(1, 7)]


@pytest.fixture(scope="module")
def aware_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("aware")
    # restart cost 30 s, budget 0.05: a run is kept 600 s, longer than the 3 rounds
    run_daemon(d, _jobs(), restart_aware=True, preemption_overhead_seconds=30, restart_budget=0.05)
    return d


def _view(d) -> dict:
    return json.loads((d / "status.json").read_text())


def test_kept_runs_say_so_and_explain_says_how_much_longer(aware_dir, capsys):
    view = _view(aware_dir)
    running = [j for j in view["jobs"] if j["state"] in ("starting", "running")]
    waiting = [j for j in view["jobs"] if j["state"] not in ("starting", "running")]
    assert len(running) == 4 and len(waiting) == 2
    for j in running:
        assert j["protected_until"] > view["last_round_time"]
        assert KEPT in j["why"]
    for j in waiting:
        assert j["protected_until"] is None
        assert BEHIND in j["why"], j["why"]
    assert main(["explain", running[0]["id"], "--state-dir", str(aware_dir)]) == 0
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if s.startswith("restart-aware:"))
    left = running[0]["protected_until"] - view["last_round_time"]
    assert 0 < left <= 600
    h, m, s = divmod(round(left), 3600)[0], *divmod(round(left) % 3600, 60)
    assert f"for {h:02d}:{m:02d}:{s:02d} more" in line
    assert main(["explain", waiting[0]["id"], "--state-dir", str(aware_dir)]) == 0
    assert "restart-aware:" not in capsys.readouterr().out


def test_without_restart_aware_rounds_nothing_is_said_of_protection(tmp_path, capsys):
    run_daemon(tmp_path, _jobs(), preemption_overhead_seconds=30)
    view = _view(tmp_path)
    assert all(j["protected_until"] is None for j in view["jobs"])
    assert not any(KEPT in j["why"] or BEHIND in j["why"] for j in view["jobs"])
    for j in view["jobs"]:
        assert main(["explain", j["id"], "--state-dir", str(tmp_path)]) == 0
        assert "restart-aware:" not in capsys.readouterr().out


def test_an_expired_protection_is_not_shown_as_kept():
    job = {"state": "running", "gpu_type": "v100", "allocation": {"v100": 0.5},
           "paired_allocation": {}, "protected_until": 100.0}  # fmt: skip
    assert KEPT in why(job, "max_min_fairness", now=99.0)
    assert KEPT not in why(job, "max_min_fairness", now=100.0)
    assert KEPT not in why(job, "max_min_fairness", now=None)
    jobs = {"1": {"state": "running", "gpu_type": "v100"}, "2": {"state": "held"}}
    slot = {"1": RunProtection(protected_until=100.0), "2": RunProtection(protected_until=500.0)}
    assert held_types(jobs, slot, 99.0) == {"v100"}
    assert held_types(jobs, slot, 100.0) == set()  # and a job that holds no GPU never


HOSTILE_TIMES = [
    math.nan,
    math.inf,
    -math.inf,
    -5.0,
    True,
    "\x1b[2J9999999999",
    [1],
    {"a": 1},
    None,
]


@pytest.mark.hostile
@pytest.mark.parametrize("until", HOSTILE_TIMES)
@pytest.mark.parametrize("last", [50.0, *HOSTILE_TIMES[:6]])
@pytest.mark.parametrize("where", ["plugins", "account"])  # today's slot, an older file's
def test_hostile_protection_times_show_nothing_and_break_nothing(
    tmp_path, capsys, until, last, where
):
    account: dict[str, object] = {"restart_cost_s": until}
    sched: dict[str, object] = {"round_index": 3, "last_round_time": last, "jobs": {"7": account}}
    if where == "plugins":
        sched["plugins"] = {"restart_aware": {"7": {"protected_until": until}}}
    else:
        account["protected_until"] = until
    doc = {
        "saved_at": 0.0,
        "daemon": {"policy": "max_min_fairness"},
        "scheduler": sched,
        "jobs": {
            "7": {
                "job_type": "A3C",
                "scale_factor": 1,
                "state": "running",
                "gpu_type": "v100",
                "nodes": [["v100-000", 1]],
            }
        },
        "cluster": {"capacity": {"v100": 2}},
    }
    view = status_view(json.loads(json.dumps(doc)))
    assert view["jobs"][0]["protected_until"] is None
    assert KEPT not in view["jobs"][0]["why"]
    with StateStore(tmp_path) as store:
        store.save(doc)
    assert main(["explain", "7", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "restart-aware:" not in out
    assert all(c.isprintable() for line in out.splitlines() for c in line)


def test_explain_checks_a_view_it_reads_back_again():
    from slurm_gavel.commands.explain import protection_lines

    job = {"protected_until": 200.0, "restart_cost_s": "\x1b[2J"}
    assert protection_lines(job, {"last_round_time": 100.0}) == [
        "restart-aware: this run is kept where it is for 00:01:40 more after the last round "
        "(each run is kept until it has paid for its restart: restart cost / "
        "restart_budget, longer for a job that has run long)"
    ]
    for bad in (math.nan, "100", True, -1.0, None):
        assert protection_lines({"protected_until": 200.0}, {"last_round_time": bad}) == []
        assert protection_lines({"protected_until": bad}, {"last_round_time": 100.0}) == []
    measured = protection_lines(
        {"protected_until": 200.0, "restart_cost_s": 95.0}, {"last_round_time": 100.0}
    )
    assert "its restarts cost 00:01:35 as measured" in measured[0]
