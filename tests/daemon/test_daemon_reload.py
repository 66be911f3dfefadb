"""SIGHUP reload (daemon/reload.py): what a reload changes, what it refuses, and that
a refused one leaves the daemon running on its old config, losing nothing."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.daemon.config import load_config
from slurm_gavel.daemon.config_types import ConfigError
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.reload import MAX_CONFIG_BYTES, RESTART_KEYS, prepare_reload
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TYPES = ["ResNet-50 (batch size 64)", "A3C", "Transformer (batch size 64)", "LM (batch size 5)"]


@pytest.fixture(scope="module")
def table():
    return load_table()


def yaml_config(tmp_path: Path, extra: str = "", policy: str = "max_min_fairness") -> str:
    return (
        f"policy: {policy}\n"
        "round_seconds: 60\n"
        "partitions: [gpu]\n"
        "checkpoint: {grace_seconds: 5}\n"
        f"state_dir: {tmp_path / 'state'}\n"
        "slurm: {retry_initial_seconds: 1, retry_max_seconds: 4}\n" + extra
    )


@pytest.fixture
def cfg_path(tmp_path):
    p = tmp_path / "gavel.yaml"
    p.write_text(yaml_config(tmp_path))
    return p


@pytest.fixture
def daemon(tmp_path, cfg_path, table):
    jobs = [Job(str(i), TYPES[i % len(TYPES)], 1, total_steps=1e7) for i in range(8)]
    sim = SimulatedCluster(parse_cluster_spec("v100:1x2,p100:1x2,k80:1x2"), jobs, table)
    d = Daemon(load_config(cfg_path), sim, table=table, metrics=DaemonMetrics())
    d.start()
    yield d
    d.store.release()


def events(records, name):
    return [r.fields for r in records if getattr(r, "event", None) == name]  # type: ignore[attr-defined]


# ---- prepare_reload: the plan, nothing applied -------------------------------------------


def test_a_policy_change_takes_effect_and_recomputes_the_allocation(tmp_path, cfg_path, table):
    current = load_config(cfg_path)
    cfg_path.write_text(yaml_config(tmp_path, "stay_credit_seconds: 120\n", policy="fifo"))
    plan = prepare_reload(current, cfg_path, table)
    assert plan.config.policy == "fifo" and plan.config.plugins.mechanism.stay_credit_seconds == 120
    assert set(plan.changed) == {"policy", "stay_credit_seconds"}
    assert plan.reallocate and plan.needs_restart == ()
    assert current.policy == "max_min_fairness"  # nothing applied


@pytest.mark.parametrize(
    "extra, key",
    [
        ("restart_aware: true\n", "restart_aware"),
        ("restart_budget: 0.2\n", "restart_budget"),
        ("moldable_lp: true\n", "moldable_lp"),
        ("moldable_untried: false\n", "moldable_untried"),
        ("learning: {ratio_factor: 2}\n", "learning"),  # the learned rows plugin's bounds
        ("learning: {explore_max_gpu_seconds: 60}\n", "learning"),
        ("learning: {knowledge: table}\n", "learning"),
    ],
)
def test_a_plugin_setting_changed_is_reported_by_its_key(tmp_path, cfg_path, table, extra, key):
    current = load_config(cfg_path)
    cfg_path.write_text(yaml_config(tmp_path, extra))
    plan = prepare_reload(current, cfg_path, table)
    assert plan.changed == (key,)
    assert plan.config.plugins != current.plugins or key == "learning"


def test_an_unchanged_file_changes_nothing(cfg_path, table):
    plan = prepare_reload(load_config(cfg_path), cfg_path, table)
    assert plan.changed == () and plan.needs_restart == () and not plan.reallocate


def test_settings_built_at_start_keep_their_running_values(tmp_path, cfg_path, table):
    current = load_config(cfg_path)
    cfg_path.write_text(
        yaml_config(tmp_path, "round_seconds: 90\n").replace("round_seconds: 60\n", "")
        .replace(str(tmp_path / "state"), str(tmp_path / "elsewhere"))
        .replace("partitions: [gpu]", "partitions: [gpu, a100]")
        .replace("grace_seconds: 5", "grace_seconds: 10")
        + "backend: rest\nmetrics_port: 9100\nstatus_privacy: public\n"
    )  # fmt: skip
    plan = prepare_reload(current, cfg_path, table)
    assert set(plan.needs_restart) == {
        "state_dir", "partitions", "checkpoint", "backend", "metrics_port",
        "status_privacy"}  # fmt: skip
    for key in RESTART_KEYS:
        assert getattr(plan.config, key) == getattr(current, key), key
    assert plan.config.settings.round_seconds == 90 and plan.changed == ("round_seconds",)


def test_a_round_shorter_than_the_running_grace_is_refused(tmp_path, cfg_path, table):
    """The file's own grace (2 s) fits its round (4 s), but the grace keeps running at 5 s
    until a restart: a round of 4 s would end inside it."""
    current = load_config(cfg_path)
    cfg_path.write_text(
        yaml_config(tmp_path).replace("round_seconds: 60", "round_seconds: 4")
        .replace("grace_seconds: 5", "grace_seconds: 2")
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"round_seconds \(4\).*running checkpoint grace \(5"):
        prepare_reload(current, cfg_path, table)


def test_the_table_is_read_again_even_at_the_same_path(tmp_path, cfg_path, table):
    path = tmp_path / "table.json"
    table.save(path)
    cfg_path.write_text(yaml_config(tmp_path, f"throughput_table: {path}\n"))
    current = load_config(cfg_path)
    assert not prepare_reload(current, cfg_path, table).reallocate  # the same cells
    doc = json.loads(path.read_text())
    doc["throughputs"]["A3C"]["1"]["v100"] *= 2
    path.write_text(json.dumps(doc))
    plan = prepare_reload(current, cfg_path, table)
    assert plan.changed == ("throughput_table (contents)",) and plan.reallocate
    assert plan.table.throughput("A3C", 1, "v100") == 2 * table.throughput("A3C", 1, "v100")


BROKEN_CONFIGS = {
    "typo in a key": ("polcy: fifo\npartitions: [gpu]\n", "unknown key 'polcy'"),
    "unknown policy": ("policy: fair\npartitions: [gpu]\n", "policy: unknown value 'fair'"),
    "not YAML": ("policy: [fifo\npartitions: [gpu]\n", "not valid YAML"),
    "empty": ("", "the file is empty"),
    "a key twice": ("policy: fifo\npolicy: gandiva\npartitions: [gpu]\n", "given twice"),
    "no partitions": ("policy: fifo\n", "missing key 'partitions'"),
    "negative round": ("round_seconds: -5\npartitions: [gpu]\n", "round_seconds"),
    "python object tag": (
        "policy: !!python/object/apply:os.system ['touch /tmp/pwned']\npartitions: [gpu]\n",
        "not valid YAML",
    ),
    "nested too deep": ("policy: " + "[" * 5000 + "]" * 5000 + "\npartitions: [gpu]\n", "deep"),
    "billion laughs": (
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\npartitions: [gpu]\n",
        "unknown key 'a'",
    ),
    "missing table": (
        "throughput_table: /nonexistent/t.json\npartitions: [gpu]\n",
        "does not exist",
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN_CONFIGS))
def test_broken_configs_are_refused_naming_the_problem(tmp_path, cfg_path, table, name):
    text, needle = BROKEN_CONFIGS[name]
    current = load_config(cfg_path)
    cfg_path.write_text(text)
    with pytest.raises(ConfigError, match=needle) as e:
        prepare_reload(current, cfg_path, table)
    assert str(cfg_path) in str(e.value) or "line" in str(e.value)
    assert not Path("/tmp/pwned").exists()


def test_hostile_files_never_block_or_swamp_the_daemon(tmp_path, cfg_path, table):
    current = load_config(cfg_path)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # opening it to read would block until a writer comes: never opened
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="not a regular file"):
        prepare_reload(current, fifo, table)
    assert time.monotonic() - t0 < 1
    with pytest.raises(ConfigError, match="not a regular file"):
        prepare_reload(current, tmp_path, table)  # a folder
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match="is not a daemon config"):
        prepare_reload(current, big, table)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"policy: \xff\xfe\npartitions: [gpu]\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        prepare_reload(current, binary, table)
    gone = tmp_path / "gone.yaml"
    with pytest.raises(ConfigError, match="cannot read the config"):
        prepare_reload(current, gone, table)


PAIRS = '{"format": "slurm-gavel-throughputs/1", "throughputs": {}, "pairs": [%s]}'
BROKEN_TABLES = [
    ('{"format": "nope"}', "not a slurm-gavel throughput table"),
    ("[1, 2", "not valid JSON"),
    (PAIRS % '{"a": "x", "b": "y", "throughput": 7}', "not a throughput table"),
    (PAIRS % '{"a": "x", "b": "y", "throughput": {}, "scale_factor": "two"}', "not a throughput"),
]


@pytest.mark.parametrize("content, needle", BROKEN_TABLES)
def test_a_broken_table_is_refused_with_the_config(tmp_path, cfg_path, table, content, needle):
    current = load_config(cfg_path)
    bad = tmp_path / "table.json"
    bad.write_text(content)
    cfg_path.write_text(yaml_config(tmp_path, f"throughput_table: {bad}\n"))
    with pytest.raises(ConfigError, match=needle):
        prepare_reload(current, cfg_path, table)


def test_the_table_format_string_is_the_real_one(table, tmp_path):
    table.save(tmp_path / "t.json")  # the hostile cases above must pass the format check
    assert json.loads((tmp_path / "t.json").read_text())["format"] == "slurm-gavel-throughputs/1"


# ---- the daemon: applied between rounds, refused ones keep the old config ----------------


def test_reload_changes_the_policy_of_the_next_round(tmp_path, cfg_path, daemon, daemon_log):
    first = daemon.round()
    assert daemon.state.allocation.policy == "max_min_fairness" and first.reallocated
    cfg_path.write_text(yaml_config(tmp_path, policy="max_sum_throughput"))
    assert daemon.reload()
    report = daemon.round()
    assert report.reallocated and daemon.state.allocation.policy == "max_sum_throughput"
    assert daemon.sched_config.policy == "max_sum_throughput"
    (done,) = events(daemon_log, "config_reloaded")
    assert done["changed"] == "policy" and done["policy"] == "max_sum_throughput"
    assert 'slurm_gavel_config_reloads_total{result="applied"} 1.0' in daemon.metrics.exposition()


def test_a_refused_reload_keeps_everything(tmp_path, cfg_path, daemon, daemon_log):
    daemon.round()
    before = (daemon.config, daemon.sched_config, daemon.state.allocation)
    received = {j: dict(a.received_s) for j, a in daemon.state.jobs.items()}
    cfg_path.write_text("policy: max_min_fairnes\npartitions: [gpu]\n")
    assert not daemon.reload()
    assert (daemon.config, daemon.sched_config, daemon.state.allocation) == before
    assert {j: dict(a.received_s) for j, a in daemon.state.jobs.items()} == received
    (refused,) = events(daemon_log, "config_reload_refused")
    assert "did you mean 'max_min_fairness'" in refused["error"]
    assert refused["kept_policy"] == "max_min_fairness"
    assert not daemon.round().reallocated  # the same allocation runs on
    assert 'slurm_gavel_config_reloads_total{result="refused"} 1.0' in daemon.metrics.exposition()


def test_restart_only_changes_are_warned_about(tmp_path, cfg_path, daemon, daemon_log):
    cfg_path.write_text(yaml_config(tmp_path, "metrics_port: 9100\n"))
    assert daemon.reload()
    (warned,) = events(daemon_log, "config_needs_restart")
    assert warned["key"] == "metrics_port" and daemon.config.metrics_port == 0


def test_a_reload_asked_during_the_wait_is_applied_between_rounds(tmp_path, cfg_path, daemon):
    """The loop wakes for it (its error would otherwise show a round later), applies it
    with no round in between, and goes on waiting for the round that is due."""
    codes: list[int] = []
    t = threading.Thread(target=lambda: codes.append(daemon.run()))
    t.start()
    try:
        while daemon.last_report is None and t.is_alive():
            t.join(0.01)
        rounds = daemon.state.round_index
        cfg_path.write_text(yaml_config(tmp_path, policy="fifo"))
        daemon.request_reload()
        deadline = time.monotonic() + 10
        while daemon.config.policy != "fifo" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert daemon.config.policy == "fifo" and daemon.sched_config.policy == "fifo"
        assert daemon.state.round_index == rounds  # not one round more: the wait goes on
    finally:
        daemon.stop()
        t.join(10)
    assert codes == [0]
