"""daemon/ha.py, config_ha.py and the daemon's standby life: the `ha:` section and its
errors, the gate before every action, the signals handed to the next leader (hostile
contents dropped), a standby that costs Slurm nothing, and a leader that steps down
without another action once a standby has claimed a higher generation."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest
from waiting import wait_for

from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.config_types import ConfigError, HaConfig
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.ha import SIGNALS_FILE, ActionRefused, Ha, signals_from_json
from slurm_gavel.daemon.lease import HaFiles, LeaseRecord
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.round_loop import STEP_DOWN
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.testing import FakeSlurm, fake_backend


def events(records: list[logging.LogRecord], name: str) -> list[dict[str, object]]:
    return [dict(r.fields) for r in list(records) if getattr(r, "event", None) == name]  # type: ignore[attr-defined]


# ---- the config section -------------------------------------------------------------


def config(tmp_path: Path, **ha: object) -> dict[str, object]:
    return {"partitions": ["gpu"], "ha": {"shared_dir": str(tmp_path / "shared"), **ha}}


def test_ha_puts_the_state_in_the_shared_directory(tmp_path):
    cfg = parse_config(config(tmp_path, lease_seconds=20))
    assert cfg.ha == HaConfig(tmp_path / "shared", 20.0, None)
    assert cfg.state_dir == tmp_path / "shared"
    assert cfg.ha.margin == 5.0


def test_without_ha_nothing_changes(tmp_path):
    cfg = parse_config({"partitions": ["gpu"], "state_dir": str(tmp_path)})
    assert cfg.ha is None and cfg.state_dir == tmp_path


def test_a_state_dir_naming_the_same_directory_is_accepted(tmp_path):
    doc = config(tmp_path)
    doc["state_dir"] = str(tmp_path / "shared" / ".")
    assert parse_config(doc).state_dir == tmp_path / "shared"


@pytest.mark.parametrize(
    ("ha", "state_dir", "says"),
    [
        ({}, None, "shared_dir: missing"),
        ({"lease_seconds": 1}, None, "out of range"),
        ({"lease_seconds": 10**6}, None, "out of range"),
        ({"lease_seconds": "30"}, None, "lease_seconds"),
        ({"lease_seconds": 30, "margin_seconds": 16}, None, "more than half"),
        ({"lease_seconds": 30, "margin_seconds": 0}, None, "margin_seconds"),
        ({"lease": 30}, None, "lease"),
        (None, "/elsewhere", "differs from state_dir"),
    ],
)
def test_ha_errors_name_the_key_and_the_fix(tmp_path, ha, state_dir, says):
    doc: dict[str, object] = {"partitions": ["gpu"]}
    doc["ha"] = {"shared_dir": str(tmp_path), **(ha or {})} if ha != {} else {}
    if state_dir:
        doc["state_dir"] = state_dir
    with pytest.raises(ConfigError, match=says) as e:
        parse_config(doc)
    assert "ha" in str(e.value)


# ---- the gate ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def leader(tmp_path: Path, clock: Clock) -> Ha:
    ha = Ha(HaConfig(tmp_path, lease_seconds=30), DaemonMetrics(), holder="h:1:a", clock=clock,
            wall=clock)  # fmt: skip
    assert ha.wait_to_lead(threading.Event())
    ha.stop(clean=False)  # no keeper thread in these tests: the clock is ours
    return ha


def test_the_gate_logs_each_action_with_the_generation(tmp_path, daemon_log):
    ha = leader(tmp_path, Clock())
    ha.gate("hold", ["4", "5"])
    [e] = events(daemon_log, "action")
    assert (e["kind"], e["jobs"], e["generation"]) == ("hold", "4,5", 1)


def test_a_lapsed_lease_refuses_counts_logs_and_steps_down(tmp_path, daemon_log):
    clock = Clock()
    ha = leader(tmp_path, clock)
    stepped = []
    ha.on_deposed = lambda: stepped.append(True)
    clock.t += 22.6  # beyond lease - margin (22.5) without a renewal
    with pytest.raises(ActionRefused, match="window"):
        ha.gate("signal", ["7"])
    assert stepped and ha.is_deposed()
    assert ha.metrics.ha_refused_actions._value.get() == 1
    [e] = events(daemon_log, "action_refused")
    assert e["kind"] == "signal" and e["generation"] == 1
    assert not events(daemon_log, "action")
    assert not (tmp_path / "ha" / SIGNALS_FILE).exists()  # refused: not written ahead
    with pytest.raises(ActionRefused):
        ha.check()  # for good


def test_a_signal_is_written_ahead_and_read_back_by_the_next_leader(tmp_path):
    clock = Clock()
    ha = leader(tmp_path, clock)
    ha.gate("signal", ["12", "13_4"])
    doc = json.loads((tmp_path / "ha" / SIGNALS_FILE).read_text())
    assert doc == {"generation": 1, "sent": {"12": 100.0, "13_4": 100.0}}
    nxt = Ha(HaConfig(tmp_path), DaemonMetrics(), holder="h:2:b", wall=lambda: 130.0)
    assert nxt.load_signals() == {"12": 100.0, "13_4": 100.0}


@pytest.mark.parametrize(
    "doc",
    [None, [], "x", {"sent": []}, {"sent": "12"}, {"generation": 1}],
)
def test_signals_files_that_are_no_signals_hand_over_nothing(doc):
    assert signals_from_json(doc, 1000.0) == {}


def test_hostile_signal_entries_are_dropped_one_by_one():
    now = 1_000_000.0
    sent = {
        "12": now - 5,  # kept
        "13_2": now,  # kept: an array task
        "1_": now, "_1": now, "12a": now, "-3": now, "": now, "١٢": now, "9" * 40: now,
        "14": "yesterday", "15": None, "16": True, "17": float("nan"), "18": 1e300,
        "19": now - 8 * 86400,  # older than any grace
        "20": now + 7200,  # from the future beyond any clock difference
    }  # fmt: skip
    assert signals_from_json({"sent": sent}, now) == {"12": now - 5, "13_2": now}


def test_unreadable_signals_hand_over_nothing(tmp_path, daemon_log):
    (tmp_path / "ha").mkdir()
    (tmp_path / "ha" / SIGNALS_FILE).write_bytes(b"\xff\x00{")
    ha = Ha(HaConfig(tmp_path), DaemonMetrics(), holder="h:2:b")
    assert ha.load_signals() == {}
    assert events(daemon_log, "ha_signals_unreadable")


# ---- the daemon's lives ------------------------------------------------------------------


def ha_daemon(tmp_path: Path, slurm: FakeSlurm, holder: str) -> Daemon:
    doc = {"partitions": ["gpu"], "round_seconds": 1, "checkpoint": {"grace_seconds": 0.5},
           "ha": {"shared_dir": str(tmp_path / "shared"), "lease_seconds": 3}}  # fmt: skip
    cfg = parse_config(doc)
    assert cfg.ha is not None
    metrics = DaemonMetrics()
    ha = Ha(cfg.ha, metrics, holder=holder)
    backend = fake_backend(slurm, gate=ha.gate)
    return Daemon(cfg, backend, table=load_table(), metrics=metrics, ha=ha)


def in_thread(d: Daemon) -> tuple[threading.Thread, list[int]]:
    code: list[int] = []
    t = threading.Thread(target=lambda: code.append(d.run()), daemon=True)
    t.start()
    return t, code


def test_a_standby_costs_slurm_nothing_and_loads_no_state(tmp_path):
    files = HaFiles(tmp_path / "shared")
    files.ensure()
    assert files.claim(1, "other:1:x")
    files.write_lease(LeaseRecord("other:1:x", 1, 0, time.time(), 3.0))
    slurm = FakeSlurm()
    slurm.submit("gavel:type=A3C,scale=1")
    d = ha_daemon(tmp_path, slurm, "me:2:y")
    t, code = in_thread(d)
    for i in range(8):  # the leader renews: the standby never takes over
        time.sleep(0.25)
        files.write_lease(LeaseRecord("other:1:x", 1, i + 1, time.time(), 3.0))
    assert [h["holder"] for h in files.read_heartbeats()] == ["me:2:y"]
    d.stop()
    t.join(10)
    assert code == [0]
    assert d.backend.transport.log == []  # not a read, not an action
    assert not (tmp_path / "shared" / "state.json").exists()
    assert files.read_heartbeats() == []  # its heartbeat goes with it


def test_a_leader_steps_down_at_a_higher_claim_without_another_action(tmp_path, daemon_log):
    slurm = FakeSlurm()
    for _ in range(3):
        slurm.submit("gavel:type=A3C,scale=1")
    d = ha_daemon(tmp_path, slurm, "me:1:x")
    t, code = in_thread(d)
    wait_for(lambda: events(daemon_log, "action"), 30, "the leader's first action", 0.05)
    assert HaFiles(tmp_path / "shared").claim(2, "other:2:y")  # a standby took over
    claimed = len(events(daemon_log, "action"))
    t.join(15)
    assert code == [STEP_DOWN]
    assert len(events(daemon_log, "action")) <= claimed + 1  # one batch at most was past its check
    assert events(daemon_log, "ha_deposed") and events(daemon_log, "stepping_down")
    lease = HaFiles(tmp_path / "shared").read_lease()
    assert lease is not None and b'"released": true' not in lease  # deposed: not released
    doc = json.loads((tmp_path / "shared" / "state.json").read_text())
    assert doc["ha"] == {"holder": "me:1:x", "generation": 1}


def test_a_leader_stopped_cleanly_releases_its_lease_for_the_standby(tmp_path, daemon_log):
    slurm = FakeSlurm()
    slurm.submit("gavel:type=A3C,scale=1")
    d = ha_daemon(tmp_path, slurm, "me:1:x")
    t, code = in_thread(d)
    wait_for(lambda: events(daemon_log, "round"), 30, "the leader's first round", 0.05)
    d.stop()
    t.join(15)
    assert code == [0] and events(daemon_log, "ha_released")
    standby = Ha(HaConfig(tmp_path / "shared", lease_seconds=3), DaemonMetrics(), holder="b:2:y")
    assert standby.wait_to_lead(threading.Event())  # at its first look, not a lease later
    assert standby.lead.took_over_because == "released" and standby.generation == 2
    standby.stop(clean=True)
