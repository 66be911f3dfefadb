from dataclasses import fields, replace
from pathlib import Path

import pytest

from slurm_gavel.core.learned_rows.explore import Exploration
from slurm_gavel.core.learned_rows.learned_rows_settings import LearnedRowsSettings
from slurm_gavel.core.learned_rows.row_trust import TrustBounds
from slurm_gavel.core.moldable.moldable_settings import MoldableSettings
from slurm_gavel.core.plugin_settings import (
    DAEMON_PLUGINS,
    SIMULATOR_PLUGINS,
    MechanismSettings,
    PluginSettings,
)
from slurm_gavel.core.restart_aware.restart_aware_settings import RestartAwareSettings
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS, SIMULATOR_DEFAULTS, RoundSettings
from slurm_gavel.daemon.config import load_config, parse_config, plugin_keys
from slurm_gavel.daemon.config_types import ConfigError
from slurm_gavel.daemon.scheduler_config import scheduler_config
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError

REPO = Path(__file__).resolve().parents[2]
TABLE = load_table()


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "gavel.yaml"
    p.write_text(text)
    return p


def test_shipped_example_config_is_valid():
    cfg = load_config(REPO / "conf" / "gavel.yaml")
    assert cfg.partitions
    assert cfg.policy == "max_min_fairness"
    assert cfg.checkpoint.signal == "USR1"
    assert cfg.settings.round_seconds == 360


def test_minimal_config_takes_documented_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "partitions: [gpu]\n"))
    assert cfg.partitions == ("gpu",)
    assert cfg.settings.round_seconds == 360.0
    assert cfg.metrics_port == 0
    assert cfg.backend == "cli"
    assert cfg.throughput_table is None
    assert cfg.checkpoint.requeue_exit_code == 99
    assert cfg.plugins.mechanism.stay_credit_seconds == 0.0  # Gavel's mechanism unless opted in
    assert cfg.status_privacy == "auto"  # follows Slurm's PrivateData


def test_relative_paths_resolve_against_the_config_directory(tmp_path):
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "t.json").write_text("{}")
    cfg = load_config(
        write(tmp_path, "partitions: [gpu]\nstate_dir: state\nthroughput_table: tables/t.json\n")
    )
    assert cfg.state_dir == tmp_path.resolve() / "state"
    assert cfg.throughput_table == tmp_path.resolve() / "tables" / "t.json"


def test_stay_credit_is_parsed():
    cfg = parse_config({"partitions": ["gpu"], "stay_credit_seconds": 1080})
    assert cfg.plugins.mechanism.stay_credit_seconds == 1080.0


def test_min_reallocation_interval_is_parsed_and_defaults_to_every_change():
    assert parse_config({"partitions": ["gpu"]}).settings.min_reallocation_interval_seconds == 0.0
    cfg = parse_config({"partitions": ["gpu"], "min_reallocation_interval_seconds": 1920})
    assert cfg.settings.min_reallocation_interval_seconds == 1920.0


def test_every_round_setting_is_read_from_the_key_of_its_name():
    keys = {
        "round_seconds": 300.0,
        "preemption_overhead_seconds": 7.0,
        "min_reallocation_interval_seconds": 13.0,
    }
    cfg = parse_config({"partitions": ["gpu"], **keys})
    assert cfg.settings == RoundSettings(**keys)
    # a field added to RoundSettings needs a key here, or the admin cannot set it
    assert {f.name for f in fields(RoundSettings)} - set(keys) == {"reallocate_every_seconds"}


def test_every_plugin_setting_is_read_from_its_key_into_its_plugins_own_settings():
    keys = {
        "stay_credit_seconds": 11.0,
        "restart_aware": True,
        "restart_budget": 0.2,
        "moldable_lp": True,
        "moldable_untried": False,
    }
    learning = {"ratio_factor": 3.0, "explore_max_gpu_seconds": 60.0}
    cfg = parse_config({"partitions": ["gpu"], **keys, "learning": learning})
    assert cfg.plugins == PluginSettings(
        mechanism=MechanismSettings(stay_credit_seconds=11.0),
        restart_aware=RestartAwareSettings(enabled=True, budget=0.2),
        moldable_counts=MoldableSettings(lp=True, untried=False),
        learned_rows=LearnedRowsSettings(
            TrustBounds(ratio_factor=3.0), Exploration(max_gpu_seconds=60.0)
        ),
    )
    assert plugin_keys(cfg.plugins) == keys  # what a reload compares, by the file's key
    # none of them is a round setting any more: each plugin owns its own
    assert not set(keys) & {f.name for f in fields(RoundSettings)}
    # the one builder hands them to the round as they are
    assert scheduler_config(cfg, TABLE).plugins is cfg.plugins


def test_daemon_and_simulator_defaults_differ_only_in_the_overhead_and_untried_counts():
    assert parse_config({"partitions": ["gpu"]}).settings == DAEMON_DEFAULTS
    assert parse_config({"partitions": ["gpu"]}).plugins == DAEMON_PLUGINS
    assert DAEMON_DEFAULTS.preemption_overhead_seconds == 0.0
    assert SIMULATOR_DEFAULTS.preemption_overhead_seconds == 30.0
    # a real job runs at a count the table lacks; a simulated one has no rate there
    assert DAEMON_PLUGINS.moldable_counts.untried
    assert not SIMULATOR_PLUGINS.moldable_counts.untried
    assert replace(DAEMON_DEFAULTS, preemption_overhead_seconds=30.0) == SIMULATOR_DEFAULTS
    sim_molds = replace(DAEMON_PLUGINS.moldable_counts, untried=False)
    assert replace(DAEMON_PLUGINS, moldable_counts=sim_molds) == SIMULATOR_PLUGINS
    with pytest.raises(TypeError, match="preemption_overhead_seconds"):
        RoundSettings(round_seconds=360.0)  # type: ignore[call-arg]  # no silent default


def test_signal_names_are_normalised():
    cfg = parse_config({"partitions": ["gpu"], "checkpoint": {"signal": "sigusr2"}})
    assert cfg.checkpoint.signal == "USR2"


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"partitions": ["gpu"], "round_secnds": 60}, "unknown key 'round_secnds'; did you mean"),
        ({"partitions": ["gpu"], "checkpoint": {"grace": 5}}, "checkpoint: unknown key 'grace'"),
        ({"round_seconds": 60}, "missing key 'partitions'"),
        ({"partitions": []}, "partitions: expected a non-empty list"),
        ({"partitions": ["gpu", "gpu"]}, "listed twice"),
        ({"partitions": ["gpu"], "round_seconds": "60"}, "round_seconds: expected a number"),
        ({"partitions": ["gpu"], "round_seconds": 0}, "round_seconds: 0 is out of range"),
        ({"partitions": ["gpu"], "round_seconds": float("nan")}, "not a finite number"),
        ({"partitions": ["gpu"], "stay_credit_seconds": -1}, "stay_credit_seconds: -1 is out"),
        (
            {"partitions": ["gpu"], "min_reallocation_interval_seconds": -5},
            "min_reallocation_interval_seconds: -5 is out",
        ),
        ({"partitions": ["gpu"], "stay_credit_seconds": "1h"}, "stay_credit_seconds: expected"),
        ({"partitions": ["gpu"], "metrics_port": 70000}, "metrics_port: 70000 is out of range"),
        ({"partitions": ["gpu"], "metrics_port": True}, "metrics_port: expected a whole number"),
        ({"partitions": ["gpu"], "policy": "max_min_fairnes"}, "did you mean 'max_min_fairness'"),
        ({"partitions": ["gpu"], "backend": "ssh"}, "choose one of: cli, rest"),
        ({"partitions": ["gpu"], "log_format": "xml"}, "choose one of: json, kv"),
        ({"partitions": ["gpu"], "status_privacy": "privat"}, "did you mean 'private'"),
        ({"partitions": ["gpu"], "status_privacy": True}, "status_privacy: expected a non-empty"),
        ({"partitions": ["gpu"], "checkpoint": {"signal": "KILL"}}, "cannot be trapped"),
        ({"partitions": ["gpu"], "checkpoint": {"signal": "NOPE"}}, "not a signal name"),
        ({"partitions": ["gpu"], "checkpoint": {"requeue_exit_code": 0}}, "in 1..255"),
        (
            {"partitions": ["gpu"], "round_seconds": 10, "checkpoint": {"grace_seconds": 10}},
            "must be shorter than round_seconds",
        ),
        (
            {
                "partitions": ["gpu"],
                "round_seconds": 10,
                "checkpoint": {"grace_seconds": 1},
                "preemption_overhead_seconds": 12,
            },
            "every restart would cost a whole round",
        ),
        (
            {"partitions": ["gpu"], "checkpoint": {"grace_seconds": 30, "max_grace_seconds": 10}},
            "checkpoint.max_grace_seconds (10) is below checkpoint.grace_seconds (30)",
        ),
        (
            {"partitions": ["gpu"], "checkpoint": {"max_grace_seconds": 360}},
            "checkpoint.max_grace_seconds (360) must be shorter than round_seconds (360)",
        ),
        ({"partitions": ["gpu"], "checkpoint": {"max_grace_seconds": "300s"}}, "expected a number"),
        ({"partitions": ["gpu"], "checkpoint": {"max_grace_seconds": -1}}, "out of range"),
        (
            {"partitions": ["gpu"], "checkpoint": {"max_grace_seconds": float("inf")}},
            "not a finite number",
        ),
        ({"partitions": ["gpu"], "throughput_table": "/nonexistent.json"}, "does not exist"),
        ({"partitions": ["gpu"], "gpu_types": ["v100"]}, "gpu_types: expected a mapping"),
        ({"partitions": ["gpu"], "gpu_types": {"tesla v100": "v100"}}, "not a Slurm GRES type"),
        (
            {"partitions": ["gpu"], "slurm": {"retry_initial_seconds": 5, "retry_max_seconds": 1}},
            "retry_max_seconds: 1 is below",
        ),
        ({"partitions": ["gpu"], "slurm": {"rest_url": "localhost"}}, "not an http(s)://"),
        (
            {"partitions": ["gpu"], "slurm": {"rest_token_reread_seconds": 0}},
            "rest_token_reread_seconds: 0 is out of range; it must be > 0",
        ),
        (["gpu"], "expected a mapping of keys"),
    ],
)
def test_bad_values_are_named_with_the_fix(doc, needle):
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    msg = str(e.value)
    assert needle in msg
    assert "\n" not in msg  # one line for the CLI
    assert isinstance(e.value, InputError) and e.value.exit_code == 2


def test_file_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the config"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"not valid YAML at line 2"):
        load_config(write(tmp_path, "partitions: [gpu]\nround_seconds: 1: 2\n"))
    with pytest.raises(ConfigError, match="the file is empty"):
        load_config(write(tmp_path, "# nothing\n"))
    with pytest.raises(ConfigError, match=r"line 2: key 'policy' is given twice"):
        load_config(write(tmp_path, "policy: fifo\npolicy: gandiva\npartitions: [gpu]\n"))
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "partitions: [gpu]\nround_seconds: -1\n"))
    assert str(e.value).startswith(str(tmp_path / "gavel.yaml"))


def test_yaml_cannot_build_python_objects(tmp_path):
    # The config is read with a SafeLoader subclass: no tags that construct objects.
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "partitions: !!python/object/apply:os.getcwd []\n"))


# ---- prices for min_cost; hostile config files -------------------------------


def test_min_cost_without_prices_is_refused_at_load_naming_the_missing_types():
    # Before: the config loaded and every round failed with "GPU type 'k80' has no price".
    with pytest.raises(ConfigError) as e:
        parse_config({"partitions": ["gpu"], "policy": "min_cost", "prices": {"v100": 2.48}})
    msg = str(e.value)
    assert "min_cost needs a price for every GPU type" in msg
    assert "missing: k80, p100" in msg and "v100" not in msg.split("missing:")[1]
    assert "\n" not in msg


def test_prices_are_parsed_and_checked_against_the_table():
    cfg = parse_config(
        {
            "partitions": ["gpu"],
            "policy": "min_cost",
            "prices": {"v100": 2.48, "p100": 1.46, "k80": 0.45},
        }
    )
    assert cfg.prices == {"v100": 2.48, "p100": 1.46, "k80": 0.45}
    with pytest.raises(ConfigError, match=r"'v10' is not a GPU type .*did you mean 'v100'"):
        parse_config({"partitions": ["gpu"], "prices": {"v10": 1}})
    for bad in (0, -1, float("inf"), float("nan"), "cheap", True):
        with pytest.raises(ConfigError, match=r"prices\.k80"):
            parse_config({"partitions": ["gpu"], "prices": {"k80": bad}})


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (b"partitions: [gpu]\n[a, b]: 1\n", "line 2: a list cannot be a key"),
        (b"partitions: [gpu]\n? {a: 1}\n: 2\n", "line 2: a mapping cannot be a key"),
        (b"partitions: [gpu]\n# caf\xe9\n", "not UTF-8 text (byte 0xe9 at line 2)"),
        (
            b"\xff\xfe" + "partitions: [gpu]\n".encode("utf-16-le"),
            "not UTF-8 text (byte 0xff at line 1)",
        ),
        (b"x: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
    ],
    ids=["list-key", "mapping-key", "latin-1", "utf-16", "deep"],
)
@pytest.mark.hostile
def test_hostile_config_files_are_one_line_errors_naming_the_file(tmp_path, text, needle):
    # Before: TypeError (unhashable list), UnicodeDecodeError and RecursionError tracebacks.
    p = tmp_path / "gavel.yaml"
    p.write_bytes(text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and needle in msg and "\n" not in msg


# ---- weights: shares from the admin (slurm_gavel/core/priority_weights.py) ------------


def test_weights_are_parsed_and_default_to_no_raise():
    cfg = parse_config({"partitions": ["gpu"]})
    assert cfg.weights.max_user_weight == 1.0 and not cfg.weights.qos
    cfg = parse_config(
        {
            "partitions": ["gpu"],
            "weights": {"max_user_weight": 2.5, "qos": {"high": 4}, "accounts": {"phys": 2}},
        }
    )
    assert cfg.weights.max_user_weight == 2.5
    assert dict(cfg.weights.qos) == {"high": 4.0}
    assert dict(cfg.weights.accounts) == {"phys": 2.0}


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("weights", "needle"),
    [
        ({"max_user_weight": 0}, "max_user_weight: 0 is out of range"),
        ({"max_user_weight": -1}, "max_user_weight: -1 is out of range"),
        ({"max_user_weight": float("inf")}, "not a finite number"),
        ({"max_user_weight": float("nan")}, "not a finite number"),
        ({"max_user_weight": "1"}, "expected a number"),
        ({"max_user_weight": True}, "expected a number"),
        ({"max_user_weight": 1e308}, "must be <= 1e+06"),
        ({"max_user_weight": 0.1234567}, "more than 6 decimals"),
        ({"qos": {"high": 0}}, "weights.qos.high: 0 is out of range"),
        ({"qos": {"high": 1e9}}, "must be <= 1e+06"),
        ({"qos": ["high"]}, "weights.qos"),
        ({"qos": {1: 2}}, "expected a non-empty string"),
        ({"accounts": {"a": -2}}, "weights.accounts.a: -2 is out of range"),
        ({"accounts": {"": 2}}, "expected a non-empty string"),
        ({"shares": {}}, "shares"),
        ([1, 2], "weights"),
    ],
)
def test_bad_weights_are_named(weights, needle):
    with pytest.raises(ConfigError) as e:
        parse_config({"partitions": ["gpu"], "weights": weights})
    assert needle in str(e.value)


def test_max_grace_defaults_to_the_global_grace_and_is_parsed():
    ck = parse_config({"partitions": ["gpu"]}).checkpoint
    assert (ck.max_grace_seconds, ck.grace_cap) == (None, 30.0)
    ck = parse_config({"partitions": ["gpu"], "checkpoint": {"max_grace_seconds": 300}}).checkpoint
    assert (ck.max_grace_seconds, ck.grace_cap) == (300.0, 300.0)


def test_shipped_config_says_how_to_enable_the_packed_policy(tmp_path):
    """conf/gavel.yaml's comment names a policy line that, put in place of the shipped
    one, loads, is a packing policy, and points at the admin guide's shard set-up."""
    from slurm_gavel.policies import PACKING_POLICIES

    text = (REPO / "conf" / "gavel.yaml").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("#   policy: ")]
    assert "Shard set-up" in text and "docs/admin-guide.md" in text
    assert "### Shard set-up" in (REPO / "docs" / "admin-guide.md").read_text()
    enabled = text.replace("\npolicy: max_min_fairness\n", "\n" + line[len("#   ") :] + "\n")
    cfg = load_config(write(tmp_path, enabled))
    assert cfg.policy == "max_min_fairness_packed" and cfg.policy in PACKING_POLICIES
    assert (
        cfg.settings.round_seconds == 360
        and cfg.partitions == load_config(REPO / "conf" / "gavel.yaml").partitions
    )


@pytest.mark.parametrize("key", ["moldable_lp", "moldable_untried"])
@pytest.mark.parametrize("bad", ["yes", 1, None, [True]])
def test_moldable_flags_must_be_true_or_false(key, bad):
    with pytest.raises(ConfigError, match=f"{key}: expected true or false"):
        parse_config({"partitions": ["gpu"], key: bad})
