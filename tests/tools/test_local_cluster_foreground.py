"""`tools/local-cluster up --foreground` (the docker cluster service's main process),
without Slurm: the lifecycle functions are replaced by fakes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from slurm_gavel_dev import localcluster, localcluster_cli


@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> dict:
    """is_up answers from a script; down is recorded; no sleeping."""
    fake: dict = {
        "up": [],
        "downs": [],
        "on_poll": None,
        "pids": {"slurmctld": 10, "slurmd:v100-1": 11},
        "alive": {"slurmctld"},
    }

    def is_up(run: Path) -> bool:
        if fake["on_poll"]:
            fake["on_poll"]()
        return fake["up"].pop(0) if fake["up"] else False

    monkeypatch.setattr(localcluster, "is_up", is_up)
    monkeypatch.setattr(localcluster, "down", lambda run: fake["downs"].append(run))
    monkeypatch.setattr(localcluster, "read_state", lambda run: {"pids": fake["pids"]})
    monkeypatch.setattr(
        localcluster,
        "running_daemons",
        lambda run: {n: p for n, p in fake["pids"].items() if n in fake["alive"]},
    )
    monkeypatch.setattr(localcluster.time, "sleep", lambda s: None)
    return fake


def test_a_dead_daemon_stops_the_cluster_and_fails(fake_cluster, tmp_path, capsys):
    fake_cluster["up"] = [True, True, False]
    before = signal.getsignal(signal.SIGTERM)
    assert localcluster.stay_up(tmp_path, poll_seconds=0) == 1
    assert fake_cluster["downs"] == [tmp_path]
    assert "slurmd:v100-1 exited" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before  # handler restored


def test_sigterm_stops_the_cluster_cleanly(fake_cluster, tmp_path):
    fake_cluster["up"] = [True] * 100
    polls = []

    def poll() -> None:
        polls.append(1)
        if len(polls) == 3:
            signal.raise_signal(signal.SIGTERM)  # what `docker stop` sends

    fake_cluster["on_poll"] = poll
    assert localcluster.stay_up(tmp_path, poll_seconds=0) == 0
    assert fake_cluster["downs"] == [tmp_path]
    assert len(polls) == 3


def test_down_runs_with_sigterm_ignored(fake_cluster, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(
        localcluster, "down", lambda run: seen.append(signal.getsignal(signal.SIGTERM))
    )
    fake_cluster["up"] = [False]
    localcluster.stay_up(tmp_path, poll_seconds=0)
    assert seen == [signal.SIG_IGN]


def test_foreground_flag_hands_over_to_stay_up(monkeypatch, tmp_path):
    calls: list[str] = []
    monkeypatch.setattr(localcluster, "up", lambda spec, run, port_base_auto: calls.append("up"))
    monkeypatch.setattr(localcluster, "status", lambda run: "up")
    monkeypatch.setattr(localcluster, "stay_up", lambda run: calls.append("stay") or 1)
    code = localcluster_cli.main(
        ["up", "--foreground", "--dir", str(tmp_path), "--topology", "v100:1x2"]
    )
    assert (code, calls) == (1, ["up", "stay"])
