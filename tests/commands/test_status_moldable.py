"""`status` and `explain` for moldable jobs: the GPU range, the count the run
got (or the next start will get) and why, in text and --json, from a daemon that ran
rounds on a simulated cluster (v100:1x2,k80:1x2: no GPU type has more than 2 GPUs).
And hostile: the view shows only whole numbers and fixed codes of the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from daemon_rounds import run_daemon

from slurm_gavel.cli import main
from slurm_gavel.commands.mold_text import explain_lines
from slurm_gavel.commands.status import format_status
from slurm_gavel.core.cluster_rows import rows_for
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.daemon.mold_view import mold_view
from slurm_gavel.daemon.status_view import moldable_record, status_view
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState, Node, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

R18 = "ResNet-18 (batch size 16)"


def _view(d: Path, capsys) -> dict:
    assert main(["status", "--state-dir", str(d), "--json"]) == 0
    return {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}


def _text(d: Path, capsys, *args: str) -> list[str]:
    assert main([*args, "--state-dir", str(d)]) == 0
    return capsys.readouterr().out.splitlines()


def test_alone_it_grows_to_the_largest_type_and_says_so(tmp_path, capsys):
    run_daemon(tmp_path, [Job("1", R18, 1, total_steps=1e7, scale_range=(1, 4))], rounds=1)
    m = _view(tmp_path, capsys)["1"]["moldable"]
    assert (m["range"], m["count"], m["run"]) == ([1, 4], 2, "this")
    assert (m["chosen"], m["limit"], m["largest_type_gpus"]) == ("grown", "capacity", 2)
    assert [(c["gpus"], c["backed_by"]) for c in m["counts"]] == [(1, "prior"), (2, "prior")]
    assert m["counts"][1]["steps_per_s"] > m["counts"][0]["steps_per_s"] > 0
    out = _text(tmp_path, capsys, "status")
    row = next(ln for ln in out if ln.startswith("1 "))
    assert " 2 (1-4) " in row
    assert (
        "  1: range 1-4 GPUs; this run has 2: grown from 1 into GPUs no other job was given "
        "(the largest gain per GPU); not more: no GPU type has more than 2 GPUs "
        "(its row at 2: prior)"
    ) in out
    ex = _text(tmp_path, capsys, "explain", "1")
    assert ex[0].endswith(f"{R18} on 2 (1-4) GPU(s), state starting")
    assert any(ln.startswith("moldable, range 1-4 GPUs; this run has 2: grown from 1") for ln in ex)
    rows = next(ln for ln in ex if "its rows per count" in ln)
    assert rows.endswith("/s prior") and " 1: " in rows and ", 2: " in rows


def test_a_running_job_keeps_its_count_and_its_row_there_becomes_measured(tmp_path, capsys):
    run_daemon(tmp_path, [Job("1", R18, 1, total_steps=1e7, scale_range=(1, 4))], rounds=3)
    m = _view(tmp_path, capsys)["1"]["moldable"]
    # not more: no GPU type has more than 2 (not "a restart that pays": none could)
    assert (m["count"], m["run"], m["chosen"], m["limit"]) == (2, "this", "running", "capacity")
    # its reports at 2 GPUs replace the prior's cells there (the simulator's job
    # reports on the one type it ran on: v100 and k80 both have rows)
    backed = {c["gpus"]: c["backed_by"] for c in m["counts"]}
    assert backed[1] == "prior" and backed[2] in ("measured", "partly measured")
    out = _text(tmp_path, capsys, "status")
    assert any(
        ln.startswith("  1: range 1-4 GPUs; this run has 2: the count of this run")
        and ln.endswith(f"(its row at 2: {backed[2]})")
        for ln in out
    ), out


def test_under_contention_each_starts_at_its_least_count(tmp_path, capsys):
    jobs = [Job(str(i), R18, 1, total_steps=1e7, scale_range=(1, 4)) for i in range(1, 7)]
    run_daemon(tmp_path, jobs, rounds=1)
    view = _view(tmp_path, capsys)
    running = [j for j in view.values() if j["state"] == "starting"]
    waiting = [j for j in view.values() if j["state"] == "pending"]
    assert len(running) == 4 and len(waiting) == 2, view
    for j in running:
        assert j["moldable"]["count"] == 1 and j["moldable"]["run"] == "this"
        assert (j["moldable"]["chosen"], j["moldable"]["limit"]) == ("least", "share")
    for j in waiting:  # the count its next start would get, chosen this round
        m = j["moldable"]
        assert (m["count"], m["run"], m["chosen"], m["last_count"]) == (1, "next", "least", None)
    out = _text(tmp_path, capsys, "status")
    wid = waiting[0]["id"]
    assert any(
        ln.startswith(f"  {wid}: range 1-4 GPUs; its next start at 1: the least count of its range")
        and "not more: a larger count would take GPUs the round gave other jobs" in ln
        for ln in out
    ), out


def test_preempted_at_two_it_comes_back_at_one_and_status_says_both(tmp_path, capsys):
    """Alone it grows to 2 GPUs; five LM jobs arrive, it is preempted (its run's count
    still shown) and comes back at the least count, the view naming its last run's."""
    lm = "LM (batch size 5)"
    later = [Job(str(i), lm, 1, total_steps=1e7, arrival_time=60) for i in range(2, 7)]
    jobs = [Job("1", R18, 1, total_steps=1e7, scale_range=(1, 4)), *later]
    seen = []
    for rounds in (1, 2, 3):
        d = tmp_path / str(rounds)
        run_daemon(d, jobs, rounds=rounds)
        j = _view(d, capsys)["1"]
        m = j["moldable"]
        seen.append((j["state"], m["count"], m["run"], m["last_count"], m["chosen"]))
    assert seen == [
        ("starting", 2, "this", None, "grown"),
        ("preempted", 2, "this", None, "running"),
        ("starting", 1, "this", 2, "least"),
    ]
    out = _text(tmp_path / "3", capsys, "status")
    assert any(ln.startswith("  1: range 1-4 GPUs; this run has 1 (its last run had 2): the least")
               for ln in out), out  # fmt: skip


def test_the_joint_lp_is_named_as_the_chooser(tmp_path, capsys):
    run_daemon(
        tmp_path, [Job("1", R18, 1, total_steps=1e7, scale_range=(1, 4))], rounds=1,
        moldable_lp=True,
    )  # fmt: skip
    m = _view(tmp_path, capsys)["1"]["moldable"]
    assert m["chosen"] == "joint" and m["count"] == 2
    ex = _text(tmp_path, capsys, "explain", "1")
    assert any("chosen by the joint LP over GPU type and count (moldable_lp)" in ln for ln in ex)


def test_a_rigid_job_has_no_moldable_record(tmp_path, capsys):
    run_daemon(tmp_path, [Job("1", R18, 2, total_steps=1e7)], rounds=1)
    job = _view(tmp_path, capsys)["1"]
    assert job["moldable"] is None
    out = _text(tmp_path, capsys, "status")
    assert not any(ln.startswith("moldable jobs") for ln in out)
    assert " 2 (" not in next(ln for ln in out if ln.startswith("1 "))


def test_explain_json_carries_the_record(tmp_path, capsys):
    run_daemon(tmp_path, [Job("1", R18, 1, total_steps=1e7, scale_range=(1, 4))], rounds=1)
    assert main(["explain", "1", "--state-dir", str(tmp_path), "--json"]) == 0
    job = json.loads(capsys.readouterr().out)["job"]
    assert job["moldable"]["count"] == 2 and job["moldable"]["range"] == [1, 4]


ESC = "\x1b[2J"
HOSTILE = [
    {"range": ["1" + ESC, 8], "count": 2},
    {"range": [1, 8, 9]},
    {"range": [True, 8]},
    {"range": "1-8" + ESC},
    {"range": [0, 8]},
    {"range": [1.5, 8]},
    {"range": [8, 1]},
    "scale=1-8" + ESC,
]


@pytest.mark.parametrize("raw", HOSTILE, ids=range(len(HOSTILE)))
def test_a_record_that_is_not_numbers_is_dropped(raw):
    view = status_view(_doc(raw))
    assert view["jobs"][0]["moldable"] is None
    assert ESC not in format_status(view)


def test_fields_that_are_not_the_codes_or_numbers_are_dropped():
    raw = {
        "range": [1, 8],
        "count": "4" + ESC,
        "run": "this" + ESC,
        "last_count": -3,
        "chosen": "least\n  2: forged line",
        "limit": ESC,
        "largest_type_gpus": float("nan"),
        "counts": [
            {"gpus": 1, "steps_per_s": 3.0, "backed_by": ESC},
            {"gpus": "2", "steps_per_s": 5.0, "backed_by": "prior"},
            {"gpus": 4, "steps_per_s": float("inf"), "backed_by": "prior"},
            ESC,
        ],
    }
    m = status_view(_doc(raw))["jobs"][0]["moldable"]
    assert m == {
        "range": [1, 8], "count": None, "run": "next", "last_count": None, "chosen": None,
        "limit": None, "largest_type_gpus": None,
        "counts": [{"gpus": 1, "steps_per_s": 3.0, "backed_by": None}],
    }  # fmt: skip
    text = format_status(status_view(_doc(raw)))
    assert ESC not in text and "forged" not in text
    assert "  7: range 1-8 GPUs" in text.splitlines()  # the numbers, nothing else


def _doc(moldable: object) -> dict:
    """A state document with one waiting job whose moldable record is ``moldable``."""
    return {
        "daemon": {"policy": "max_min_fairness"},
        "scheduler": {"round_index": 1},
        "cluster": {"capacity": {"v100": 2}, "nodes": []},
        "jobs": {
            "7": {"job_type": R18, "scale_factor": 1, "state": "waiting", "nodes": [],
                  "moldable": moldable},
        },
    }  # fmt: skip


def test_every_code_the_view_keeps_has_a_sentence_and_no_sentence_is_unreachable() -> None:
    """The view's code lists (status_view) and the text's sentences (mold_text) are two
    lists of the same codes: a code added to one only would print nothing or never
    print."""
    from slurm_gavel.commands import mold_text
    from slurm_gavel.daemon import status_view as sv

    assert set(mold_text.CHOSEN) == set(sv.CHOSEN)
    assert set(mold_text.LIMIT) == set(sv.LIMITS) | {"share-joint"}  # derived in the text


def _a3c_record(state, gpus: int, shown: str, steps_done=None, count: int | None = None) -> dict:
    """The view's record (mold_view, then status_view's check) of an A3C job with range
    1-4 on 8 v100 GPUs under learned rows: the table has A3C at 1 GPU only."""
    table = load_table()
    sched = SchedulerState()
    sched.caches.cluster_rows = rows_for(None, table, {"v100": 8})
    job = Job("7", "A3C", 1, total_steps=1e6, scale_range=(1, 4))
    nodes = (NodeSlice("v100-0", gpus),) if gpus else ()
    o = ObservedJob(job, state, "v100" if gpus else None, nodes, steps_done=steps_done)
    if count is not None:
        sched.plugins.moldable_counts.jobs["7"] = (job, count, job)
    config = SchedulerConfig(table=table, settings=DAEMON_DEFAULTS, knowledge=Knowledge.LEARNED)
    view = mold_view(sched, config, ClusterSnapshot(0.0, (Node("v100-0", "v100", 8),), (o,)))
    assert view is not None
    return {"moldable": moldable_record(view(o, shown, nodes))}


def test_explain_says_why_a_moldable_job_has_its_count():
    """The count a moldable job got and why, for each rule that can hold it below its
    range's maximum: the text `explain` prints from the view's codes."""
    # waiting, past its rows into idle GPUs (the round chose 3: a job took the rest)
    line = explain_lines(_a3c_record(JobState.HELD, 0, "held", count=3))[0]
    assert line.startswith("moldable, range 1-4 GPUs; its next start at 3: grown past 1 ")
    assert "no known gain took: tried, so that its progress reports measure it" in line
    assert line.endswith("not more: a larger count would take GPUs the round gave other "
                         "jobs, or gains nothing on its rows")  # fmt: skip
    # running at 1, no row above: no restart is spent on a guess
    line = explain_lines(_a3c_record(JobState.RUNNING, 1, "running", steps_done=5.0))[0]
    assert line == (
        "moldable, range 1-4 GPUs; this run has 1: the count of this run; a count changes "
        "only at a (re)start; not more while it runs: no throughput row or report says more "
        "than 1 GPU is faster, so no restart is spent on a larger count; one is tried at its "
        "next start if GPUs are idle then"
    )
