"""The status view's job records: no figure that moves every round (priority and
deficit are computed by the readers with the mechanism's formula), so a job that
waits unchanged keeps its record's text from one save to the next; old views (with
the figures written) read as before; hostile figures in a view read back."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.cli import main
from slurm_gavel.core import mechanism
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.status_d import view_path
from slurm_gavel.daemon.status_private import user_views
from slurm_gavel.daemon.status_view import job_figures, with_figures
from slurm_gavel.domain.cluster_model import ClusterSnapshot
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TYPES = ["ResNet-50 (batch size 64)", "A3C", "LM (batch size 5)"]
ME = os.getuid()


class Cluster(SimulatedCluster):
    """Every job owned by this test's uid (a private view is then this user's file)."""

    def observe(self) -> ClusterSnapshot:
        snap = super().observe()
        return replace(snap, jobs=tuple(replace(o, user_id=ME) for o in snap.jobs))


def _daemon(state_dir: Path, privacy: str = "public", jobs: int = 12) -> tuple[Daemon, Cluster]:
    """A daemon on 4 GPUs with more jobs than GPUs: most wait through each round."""
    table = load_table()
    job_list = [Job(str(i), TYPES[i % 3], 1, total_steps=1e9, user="me") for i in range(jobs)]
    sim = Cluster(parse_cluster_spec("v100:1x2,k80:1x2"), job_list, table)
    cfg = parse_config({"partitions": ["gpu"], "round_seconds": 60, "state_dir": str(state_dir),
                        "checkpoint": {"grace_seconds": 5}, "status_privacy": privacy})  # fmt: skip
    d = Daemon(cfg, sim, table=table, metrics=DaemonMetrics())
    d.start()
    return d, sim


def _round(d: Daemon, sim: Cluster) -> None:
    d.round()
    sim.advance(sim.clock + 60)


def _records(text: str) -> dict[str, str]:
    """Each job's record in a view's text, as the text written for it."""
    doc = json.loads(text)
    return {j["id"]: json.dumps(j, separators=(",", ":")) for j in doc["jobs"]}


def test_a_job_that_waits_unchanged_keeps_its_records_text(tmp_path):
    d, sim = _daemon(tmp_path)
    try:
        for _ in range(2):
            _round(d, sim)
        pub = d.publisher
        seen = []
        for _ in range(4):
            before = _records((tmp_path / "status.json").read_text())
            _round(d, sim)
            text = (tmp_path / "status.json").read_text()
            # the text reused is the text of the view built this round, byte for byte
            assert text == json.dumps(pub.view, separators=(",", ":"))
            after = _records(text)
            same = {j for j in after if before.get(j) == after[j]}
            assert pub.view_texts.reused == len(same)
            seen.append(same)
            # jobs that waited through the round with an allocation, whose deficit grew
            # (the figure the view wrote before, so no record could be kept)
            owed = [
                j for j in same if any(x > 0 for x in json.loads(after[j])["allocation"].values())
            ]
            assert owed, "some allocated job waited unchanged and kept its text"
        assert all(s for s in seen)
    finally:
        d.store.release()


def test_each_users_view_keeps_its_records_text(tmp_path):
    tmp_path.chmod(0o755)
    d, sim = _daemon(tmp_path, privacy="private")
    try:
        for _ in range(3):
            _round(d, sim)
        before = _records(view_path(tmp_path, ME).read_text())
        _round(d, sim)
        text = view_path(tmp_path, ME).read_text()
        assert text == json.dumps(user_views(d.publisher.view)[ME], separators=(",", ":"))
        after = _records(text)
        same = [j for j in after if before.get(j) == after[j]]
        assert same and d.publisher.user_texts[ME].reused == len(same)
        assert json.loads((tmp_path / "status.json").read_text())["jobs"] == []
    finally:
        d.store.release()


def _old_figures(job: dict, elapsed: float) -> tuple[dict, dict]:
    """What status.json held per job before its format 2 (the daemon wrote them):
    priority None for infinity."""
    prio, deficit = {}, {}
    for t, x in job["allocation"].items():
        got = job["epoch_received_s"].get(t, 0.0)
        if x <= 0.0:
            prio[t] = 0.0
        elif got <= 0.0 or elapsed <= 0.0:
            prio[t] = None
        else:
            prio[t] = x / (got / elapsed)
        deficit[t] = x * elapsed - got
    return prio, deficit


def test_readers_show_the_figures_the_daemon_ranked_by(tmp_path, capsys):
    """`status --json` and `explain` on a daemon's view give each job the priority and
    deficit the old view wrote, and the mechanism's own for the daemon's state; a view
    written the old way (figures in it, format 1) reads the same."""
    d, sim = _daemon(tmp_path)
    for _ in range(4):
        _round(d, sim)
    d.store.release()
    state = d.state
    raw = json.loads((tmp_path / "status.json").read_text())
    assert raw["format"] == "slurm-gavel-status/2"
    assert all("priority" not in j and "deficit_s" not in j for j in raw["jobs"])

    assert main(["status", "--state-dir", str(tmp_path), "--json"]) == 0
    new = {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}
    checked = 0
    for job_id, job in new.items():
        prio, deficit = _old_figures(job, state.epoch_elapsed)
        assert job["priority"] == pytest.approx(prio) and job["deficit_s"] == pytest.approx(deficit)
        got = state.epoch_received.get(job_id, {})
        for t, x in state.allocation.fractions.get(job_id, {}).items():
            want = mechanism.priority(x, got.get(t, 0.0), state.epoch_elapsed)
            assert job["priority"][t] == (None if math.isinf(want) else want)
            assert job["deficit_s"][t] == x * state.epoch_elapsed - got.get(t, 0.0)
            checked += 1
    assert checked and any(p is None for j in new.values() for p in j["priority"].values())
    assert any(v not in (None, 0.0) for j in new.values() for v in j["priority"].values())

    # the same view written the old way: the figures in each record, format 1
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    old = json.loads(json.dumps(raw))
    old["format"] = "slurm-gavel-status/1"
    for job in old["jobs"]:
        job["priority"], job["deficit_s"] = _old_figures(job, old["allocation_age_s"])
    (old_dir / "status.json").write_text(json.dumps(old))
    assert main(["status", "--state-dir", str(old_dir), "--json"]) == 0
    from_old = {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}
    assert from_old == new
    for job_id in new:
        assert main(["explain", job_id, "--state-dir", str(tmp_path)]) == 0
        text = capsys.readouterr().out
        assert main(["explain", job_id, "--state-dir", str(old_dir)]) == 0
        assert capsys.readouterr().out == text
        assert main(["explain", job_id, "--state-dir", str(tmp_path), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["job"] == new[job_id]


HOSTILE = [None, True, "1", "nan", [], {}, {"a": 1}, -1, 1e308, -1e308,
           float("nan"), float("inf"), float("-inf"), 2**80, 5e-324]  # fmt: skip


@pytest.mark.parametrize("bad", HOSTILE)
def test_hostile_figures_give_finite_figures_or_none(bad):
    for job, age in [
        ({"allocation": {"v100": bad}, "epoch_received_s": {"v100": 1.0}}, 60.0),
        ({"allocation": {"v100": 0.5}, "epoch_received_s": {"v100": bad}}, 60.0),
        ({"allocation": {"v100": 0.5}, "epoch_received_s": bad}, 60.0),
        ({"allocation": bad, "epoch_received_s": {}}, 60.0),
        ({"allocation": {"v100": 0.5}, "epoch_received_s": {"v100": 1.0}}, bad),
        ({"allocation": {"v100": 1e308}, "epoch_received_s": {"v100": bad}}, 1e308),
    ]:
        prio, deficit = job_figures(job, age)
        alloc = job["allocation"]
        assert set(prio) == set(deficit) <= (set(alloc) if isinstance(alloc, dict) else set())
        for p in prio.values():
            assert p is None or (isinstance(p, float) and math.isfinite(p))
        assert all(isinstance(v, float) and math.isfinite(v) for v in deficit.values())
        json.dumps([prio, deficit], allow_nan=False)  # what --json writes must be JSON


def test_a_hostile_view_is_read_without_a_crash_and_gives_json(tmp_path, capsys):
    """A view read back may be anyone's file: numbers JSON allows (1e308, NaN and
    Infinity, which Python's parser takes) and wrong types in the fields the figures
    come from."""
    jobs = []
    for i, bad in enumerate(HOSTILE):
        jobs.append({"id": str(i), "state": "waiting", "allocation": {"v100": bad, "k80": 0.5},
                     "paired_allocation": {}, "received_s": {}, "epoch_received_s":
                     {"v100": bad, "k80": bad}, "why": "w"})  # fmt: skip
    view = {"format": "slurm-gavel-status/2", "daemon": {}, "round": 1, "jobs": jobs,
            "allocation_age_s": 1e308, "capacity": {"v100": 1, "k80": 1}}  # fmt: skip
    (tmp_path / "status.json").write_text(json.dumps(view))
    assert main(["status", "--state-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["jobs"]) == len(HOSTILE)
    for job in out["jobs"]:  # the figures the reader computed: finite, or None (inf)
        json.dumps([job["priority"], job["deficit_s"]], allow_nan=False)
    # a time received of -1 counts as none (priority inf); None is no figure at all
    minus = out["jobs"][HOSTILE.index(-1)]
    assert minus["priority"] == {"k80": None, "v100": 0.0}  # -1 allocated: not allocated
    assert minus["deficit_s"] == {"k80": 0.5 * 1e308 + 1, "v100": -1e308 + 1}
    assert out["jobs"][0]["priority"] == out["jobs"][0]["deficit_s"] == {}
    for i in range(len(HOSTILE)):
        assert main(["explain", str(i), "--state-dir", str(tmp_path)]) == 0
        assert "priority" in capsys.readouterr().out
    # a view with no jobs list at all, or records that are not objects
    assert with_figures({"jobs": "x"}) == {"jobs": "x"}
    assert with_figures({"jobs": [1, None]}) == {"jobs": [1, None]}
