"""The daemon's reasons: built from its own data only, written to Slurm only on change."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.backends.slurm.admin_comment import PREFIX, admin_comment
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.status_view import why
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

A3C, RESNET = "A3C", "ResNet-50 (batch size 64)"


class Recording(SimulatedCluster):
    """The simulator with the Slurm backends' set_admin_comments, recorded."""

    def __init__(self, *a, fail=(), **kw):
        super().__init__(*a, **kw)
        self.calls: list[dict[str, str]] = []
        self.fail = set(fail)

    def set_admin_comments(self, texts):
        self.calls.append(dict(texts))
        return {j: "Invalid job id specified" for j in texts if j in self.fail}


def daemon_on(tmp_path, jobs, spec="v100:1x2,k80:1x2", **kw):
    table = load_table()
    sim = Recording(parse_cluster_spec(spec), jobs, table, **kw)
    cfg = parse_config({"partitions": ["gpu"], "round_seconds": 60, "state_dir": str(tmp_path),
                        "checkpoint": {"grace_seconds": 5}})  # fmt: skip
    d = Daemon(cfg, sim, table=table, metrics=DaemonMetrics())
    d.start()
    return d, sim


def test_reasons_are_sent_once_then_only_when_they_change(tmp_path):
    jobs = [Job(str(i), A3C, 1, total_steps=1e9) for i in range(1, 4)]  # 3 jobs, 4 GPUs
    jobs.append(Job("4", RESNET, 8, total_steps=1e9, arrival_time=270))  # 8 GPUs: never
    d, sim = daemon_on(tmp_path, jobs, spec="v100:2x2")  # one type: nobody moves
    try:
        d.round()
        assert len(sim.calls) == 1 and sorted(sim.calls[0]) == ["1", "2", "3"]
        # the same decision, the same text: one scontrol command for all three
        assert set(sim.calls[0].values()) == {
            "running on v100: among the highest priorities for v100 this round "
            "(policy max_min_fairness)"
        }
        for _ in range(4):  # nothing changes: starting -> running keeps the same reason
            sim.advance(sim.clock + 60)
            d.round()
        assert len(sim.calls) == 1, sim.calls[1:]
        sim.advance(sim.clock + 60)
        d.round()
        assert sim.calls[-1] == {
            "4": "not scheduled: it needs 8 GPUs of one type, more than any usable GPU type has"
        }
    finally:
        d.store.release()


def test_a_failed_write_is_retried_next_round(tmp_path):
    d, sim = daemon_on(tmp_path, [Job("1", A3C, 1, total_steps=1e9)], fail={"1"})
    try:
        d.round()
        sim.advance(sim.clock + 60)
        d.round()
        assert [sorted(c) for c in sim.calls] == [["1"], ["1"]]
        sim.fail.clear()
        sim.advance(sim.clock + 60)
        d.round()
        sim.advance(sim.clock + 60)
        d.round()
        assert len(sim.calls) == 3  # written at the third round, then quiet
    finally:
        d.store.release()


HOSTILE = ["Evil'; scancel -u root", "\x1b[2Jroot", "x\ny", "A" * 3000, "$(id)", "a\\b"]


@pytest.mark.hostile
@pytest.mark.parametrize("text", HOSTILE)
def test_why_never_echoes_user_text(text):
    """A skipped job's raw reason quotes its job type; why() must not."""
    for state, reason in [
        ("skipped", f"unknown job type '{text}'; known types: A3C"),
        ("skipped", text),
        ("skipped", f"job type '{text}' has no figures at scale factor 3; the table has [1]"),
        ("held", text),
        ("pending", None),
        ("preempted", None),
    ]:
        job = {"state": state, "reason": reason, "job_type": text, "scale_factor": 2,
               "allocation": {}, "paired_allocation": {}, "gpu_type": None, "nodes": [],
               "partner": None}  # fmt: skip
        line = why(job, "max_min_fairness")
        assert text not in line and all(" " <= c <= "~" for c in line), (state, line)
        assert admin_comment(line) == PREFIX + line  # nothing for Slurm's side to mangle


def test_a_backend_that_cannot_write_is_asked_once(tmp_path):
    """slurmrestd's 22.05 API has no admin_comment: one warning, then no more tries."""
    d, sim = daemon_on(tmp_path, [Job("1", A3C, 1, total_steps=1e9)])

    def cannot(texts):
        sim.calls.append(dict(texts))
        raise NotImplementedError("slurmrestd's API v0.0.38 cannot set admin_comment")

    sim.set_admin_comments = cannot
    try:
        for _ in range(3):
            d.round()
            sim.advance(sim.clock + 60)
        assert len(sim.calls) == 1
    finally:
        d.store.release()


class Denied(Recording):
    """Slurm refusing AdminComment to an account below AdminLevel=Administrator."""

    def set_admin_comments(self, texts):
        self.calls.append(dict(texts))
        return {j: f"Access/permission denied for job {j}" for j in texts}


def test_an_account_that_may_not_set_admin_comments_is_told_once_and_left_alone(tmp_path, caplog):
    table = load_table()
    sim = Denied(parse_cluster_spec("v100:1x2"), [Job("1", A3C, 1, total_steps=1e9)], table)
    cfg = parse_config({"partitions": ["gpu"], "round_seconds": 60, "state_dir": str(tmp_path),
                        "checkpoint": {"grace_seconds": 5}})  # fmt: skip
    d = Daemon(cfg, sim, table=table, metrics=DaemonMetrics())
    d.start()
    try:
        with caplog.at_level("INFO", logger="slurm_gavel.daemon"):
            for _ in range(3):
                d.round()
                sim.advance(sim.clock + 60)
    finally:
        d.store.release()
    assert len(sim.calls) == 1  # tried once, then never again
    said = [r for r in caplog.records if "admin_comment_denied" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "ERROR"
    assert "adminlevel=Administrator" in said[0].fields["fix"]  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if "admin_comment_failed" in r.getMessage()]
