"""A paced job that shares its GPU (workloads/emulate_pairs.py), without a cluster: who
shares is read from squeue JSON captured on each release (two shard jobs on GPU 0 of
v100-1, tests/backends/data/<release>/shards/), with comments set as a managed job's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.from_json import SlurmJsonError, parse_jobs
from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.domain.throughputs import load_table
from tests.backends.slurm.test_shard_pairs import CAPTURES, load, scenario
from workloads import emulate, emulate_pairs

R50 = "ResNet-50 (batch size 64)"
A3C = "A3C"
TABLE = load_table()


def jobs(release: str, comments: dict[str, str]) -> tuple[dict[str, str], list[SlurmJob]]:
    """The capture's jobs, with the comments given by scenario name (a, b, ...)."""
    ids = scenario(release)
    doc = load(release, 0)
    for raw in doc["jobs"]:
        for name, text in comments.items():
            if str(raw["job_id"]) == ids[name]:
                raw["comment"] = text
    return ids, parse_jobs(json.loads(json.dumps(doc)), allow_newer=True)[1]


def sharing(release: str, partner_comment: str, me: str = "a"):
    ids, js = jobs(release, {"a": f"gavel:type={R50}", "b": partner_comment})
    solo = TABLE.row(R50, 1)["v100"] * 0.5
    return ids, emulate_pairs.sharing_of(ids[me], js, R50, 1, "v100", TABLE, 0.5, solo)


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_a_job_sharing_a_gpu_with_a_managed_job_runs_at_its_pair_cell(release):
    ids, s = sharing(release, f"gavel:type={A3C}")
    mine, theirs = TABLE.pair(R50, A3C, 1, "v100")
    assert mine < TABLE.row(R50, 1)["v100"]  # the cell is a slowdown
    assert s.partner == ids["b"] and s.partner_type == A3C and s.at_pair_cell
    assert s.rate == pytest.approx(mine * 0.5)
    assert f"paired with job {ids['b']} (A3C) on v100" in s.line(ids["a"])
    # The partner sees the other side of the same cell.
    _, js = jobs(release, {"a": f"gavel:type={R50}", "b": f"gavel:type={A3C}"})
    other = emulate_pairs.sharing_of(ids["b"], js, A3C, 1, "v100", TABLE, 0.5, 1.0)
    assert other.partner == ids["a"] and other.rate == pytest.approx(theirs * 0.5)


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_a_job_alone_on_its_gpu_or_on_a_whole_gpu_keeps_its_own_rate(release):
    ids, js = jobs(release, {})
    # c holds GPU 1 whole; m holds shards of k80-1's GPU 0 with no one beside it.
    for name in ("c", "m"):
        s = emulate_pairs.sharing_of(ids[name], js, R50, 1, "v100", TABLE, 1.0, 4.0)
        assert s.partner is None and s.rate == 4.0 and not s.at_pair_cell


@pytest.mark.parametrize(
    "comment",
    [
        "",  # a user's own shard job, no comment
        "gavel:type=",  # malformed
        "gavel:type=No Such Job",  # a type without a pair cell
        "gavel:type=A3C,weight=1e309",
        "gavel:type=" + "x" * 5000,  # longer than a comment may be
        "gavel:type=A3C\n; rm -rf /",
        "GAVEL:TYPE=\x00",
    ],
)
def test_a_partner_whose_comment_gives_no_pair_cell_leaves_the_job_at_its_own_rate(comment):
    ids, s = sharing("24.11", comment)
    assert s.partner == ids["b"]
    assert s.rate == pytest.approx(TABLE.row(R50, 1)["v100"] * 0.5)
    assert not s.at_pair_cell and "paced alone" in s.why


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_watch_looks_every_interval_and_reports_changes_once():
    ids, paired = jobs("22.05", {"a": f"gavel:type={R50}", "b": f"gavel:type={A3C}"})
    alone = [j for j in paired if j.job_id != ids["b"]]  # the partner ended
    seen: list[list[SlurmJob] | Exception] = [alone, paired, paired, alone, SlurmJsonError("x")]
    lines: list[str] = []
    clock = Clock()

    def fetch() -> list[SlurmJob]:
        got = seen.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    w = emulate_pairs.PairWatch(
        ids["a"], R50, 1, "v100", TABLE, 1.0, 4.39, fetch, 2.0, clock, lines.append
    )
    assert w.poll() == 4.39 and not lines  # alone from the start: no line
    clock.now = 1.0
    assert w.poll() is None and len(seen) == 4  # before the interval: Slurm not asked
    clock.now = 2.0
    assert w.poll() == pytest.approx(TABLE.pair(R50, A3C, 1, "v100")[0])
    assert "paired with job" in lines[-1]
    clock.now = 4.0
    assert w.poll() is None and len(lines) == 1  # unchanged: no line, no new rate
    clock.now = 7.0
    assert w.poll() == 4.39 and "alone on its GPU" in lines[-1]
    assert w.paired_s == pytest.approx(5.0)
    clock.now = 9.0
    assert w.poll() is None and "cannot read Slurm" in lines[-1]  # rate kept


def test_follow_names_slurms_partner_in_the_progress_report():
    """The partner the report names is the one Slurm shows (the daemon checks it)."""
    from slurm_gavel.job.progress import ProgressReporter

    ids, paired = jobs("22.05", {"a": f"gavel:type={R50}", "b": f"gavel:type={A3C}"})
    alone = [j for j in paired if j.job_id != ids["b"]]
    seen = [paired, alone]
    clock = Clock()
    w = emulate_pairs.PairWatch(
        ids["a"], R50, 1, "v100", TABLE, 1.0, 4.39, lambda: seen.pop(0), 2.0, clock, print
    )
    pacer = emulate.Pacer(4.39)
    progress = ProgressReporter(ids["a"], R50, None)
    emulate_pairs.follow(w, pacer, progress)
    assert progress.partner == ids["b"] and progress.report("running")["partner"] == ids["b"]
    clock.now = 2.0
    emulate_pairs.follow(w, pacer, progress)
    assert progress.partner is None


def test_pacer_set_rate_keeps_the_deadlines_met_and_paces_the_rest_at_the_new_rate():
    now = [0.0]
    p = emulate.Pacer(2.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    p.begin()
    for _ in range(4):
        p.step_done()
    assert now[0] == pytest.approx(2.0)
    p.set_rate(1.0)  # paired: half the speed
    for _ in range(2):
        p.step_done()
    assert now[0] == pytest.approx(4.0)
    p.set_rate(4.0)
    p.step_done()
    assert now[0] == pytest.approx(4.25) and p.behind_s == 0.0


@pytest.mark.parametrize("text", ["x", "-1", "nan", "inf"])
def test_bad_interval_is_refused_with_the_variable_named(text):
    with pytest.raises(ValueError, match=emulate_pairs.ENV_PAIR_INTERVAL):
        emulate_pairs.interval_from({emulate_pairs.ENV_PAIR_INTERVAL: text})
    assert emulate_pairs.interval_from({}) == 2.0
    assert emulate_pairs.interval_from({emulate_pairs.ENV_PAIR_INTERVAL: "0"}) == 0.0


def test_fetch_runs_squeue_with_the_releases_json_flag(tmp_path: Path):
    class Commands:
        def __init__(self) -> None:
            self.argv: list[list[str]] = []

        def run(self, kind, argv, *, retry_timeouts=False):
            from slurm_gavel.backends.slurm.cli.commands import CommandResult

            self.argv.append(list(argv))
            if argv[:2] == ["sinfo", "-V"]:
                return CommandResult(tuple(argv), 0, "slurm 22.05.8\n", "")
            doc = load("22.05", 0)
            return CommandResult(tuple(argv), 0, json.dumps(doc), "")

    cmds = Commands()
    fetch = emulate_pairs.slurm_jobs(cmds)  # type: ignore[arg-type]
    assert {j.job_id for j in fetch()} >= set(scenario("22.05").values())
    assert cmds.argv[-1] == ["squeue", "--json", "-t", "RUNNING"]
