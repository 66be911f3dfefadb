"""The daemon's YAML configuration: dataclasses and their validation.

Every problem is found before the daemon touches Slurm and reported as one
line naming the file, the key, what is wrong and how to fix it (ConfigError is
an InputError: exit code 2). Unknown keys are errors, not warnings: a typo in
``round_secnds`` silently running with the default is the kind of surprise an
admin finds weeks later.

Relative paths in the file are resolved against the file's own directory, so
a config and the table it names can be moved together. The dataclasses are
config_types.py's, the YAML decoding config_yaml.py's, the
checks across keys config_checks.py's.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_gavel.core.learned_rows.learned_rows_settings import LearnedRowsSettings
from slurm_gavel.core.moldable.moldable_settings import MoldableSettings
from slurm_gavel.core.plugin_settings import DAEMON_PLUGINS, MechanismSettings, PluginSettings
from slurm_gavel.core.priority_weights import MAX_ADMIN_WEIGHT, WeightsConfig
from slurm_gavel.core.restart_aware.restart_aware_settings import RestartAwareSettings
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS, RoundSettings
from slurm_gavel.daemon.config_checks import cross_checks
from slurm_gavel.daemon.config_ha import ha_config
from slurm_gavel.daemon.config_learning import learning_config
from slurm_gavel.daemon.config_types import (
    BACKENDS,
    LOG_FORMATS,
    LOG_LEVELS,
    STATUS_PRIVACY,
    CheckpointConfig,
    Config,
    ConfigError,
    SlurmConfig,
)
from slurm_gavel.daemon.config_yaml import read_yaml
from slurm_gavel.domain.field_checks import Checks
from slurm_gavel.errors import read_utf8
from slurm_gavel.policies import policy_names

# ---- field checkers ------------------------------------------------------------------
# The generic ones are slurm_gavel.domain.field_checks'; these know the config's own fields.


_check = Checks(ConfigError)


def _path(value: Any, where: str, base: Path) -> Path:
    p = Path(_check.string(value, where)).expanduser()
    return p if p.is_absolute() else (base / p)


def _signal_name(value: Any, where: str) -> str:
    s = _check.string(value, where).upper()
    s = s.removeprefix("SIG")
    try:
        signal.Signals[f"SIG{s}"]
    except KeyError:
        raise ConfigError(
            f"{where}: '{value}' is not a signal name; use e.g. USR1, USR2, TERM"
        ) from None
    if s in ("KILL", "STOP"):
        raise ConfigError(
            f"{where}: SIG{s} cannot be trapped, so no job could checkpoint; use USR1 or TERM"
        )
    return s


# ---- sections ------------------------------------------------------------------------

_TOP_KEYS = [
    "policy",
    "round_seconds",
    "partitions",
    "gpu_types",
    "prices",
    "weights",
    "throughput_table",
    "checkpoint",
    "preemption_overhead_seconds",
    "stay_credit_seconds",
    "restart_aware",
    "restart_budget",
    "moldable_lp",
    "moldable_untried",
    "min_reallocation_interval_seconds",
    "solver_time_limit_seconds",
    "state_dir",
    "status_privacy",
    "progress_dir",
    "metrics_port",
    "metrics_address",
    "backend",
    "slurm",
    "log_format",
    "log_level",
    "learning",
    "ha",
]
_CHECKPOINT_KEYS = [
    "signal",
    "grace_seconds",
    "max_grace_seconds",
    "requeue_exit_code",
    "max_unsignalled_restarts",
    "short_run_seconds",
    "max_ignored_signals",
]
_SLURM_KEYS = [
    "command_timeout_seconds",
    "retry_initial_seconds",
    "retry_max_seconds",
    "rest_url",
    "rest_token_file",
    "rest_user",
    "rest_token_reread_seconds",
]


def _checkpoint(doc: Any, where: str) -> CheckpointConfig:
    d = _check.mapping(doc, where)
    _check.keys(d, _CHECKPOINT_KEYS, where)
    base = CheckpointConfig()
    return CheckpointConfig(
        signal=_signal_name(d["signal"], f"{where}.signal") if "signal" in d else base.signal,
        grace_seconds=_check.number(
            d.get("grace_seconds", base.grace_seconds), f"{where}.grace_seconds", minimum=0
        ),
        max_grace_seconds=(
            None
            if d.get("max_grace_seconds") is None
            else _check.number(d["max_grace_seconds"], f"{where}.max_grace_seconds", minimum=0)
        ),
        requeue_exit_code=_check.integer(
            d.get("requeue_exit_code", base.requeue_exit_code),
            f"{where}.requeue_exit_code",
            lo=1,
            hi=255,
        ),
        # 1 at least: 0 would give back every job at its first run end
        max_unsignalled_restarts=_check.integer(
            d.get("max_unsignalled_restarts", base.max_unsignalled_restarts),
            f"{where}.max_unsignalled_restarts",
            lo=1,
            hi=1000,
        ),
        short_run_seconds=_check.number(
            d.get("short_run_seconds", base.short_run_seconds),
            f"{where}.short_run_seconds",
            minimum=0,
        ),
        max_ignored_signals=_check.integer(
            d.get("max_ignored_signals", base.max_ignored_signals),
            f"{where}.max_ignored_signals",
            lo=0,  # 0: warn only, never give back
            hi=1000,
        ),
    )


def _slurm(doc: Any, where: str, base_dir: Path) -> SlurmConfig:
    d = _check.mapping(doc, where)
    _check.keys(d, _SLURM_KEYS, where)
    base = SlurmConfig()
    cfg = SlurmConfig(
        command_timeout_seconds=_check.number(
            d.get("command_timeout_seconds", base.command_timeout_seconds),
            f"{where}.command_timeout_seconds",
            minimum=0,
            strict=True,
        ),
        retry_initial_seconds=_check.number(
            d.get("retry_initial_seconds", base.retry_initial_seconds),
            f"{where}.retry_initial_seconds",
            minimum=0,
            strict=True,
        ),
        retry_max_seconds=_check.number(
            d.get("retry_max_seconds", base.retry_max_seconds),
            f"{where}.retry_max_seconds",
            minimum=0,
            strict=True,
        ),
        rest_url=_check.string(d.get("rest_url", base.rest_url), f"{where}.rest_url"),
        rest_token_file=(
            _path(d["rest_token_file"], f"{where}.rest_token_file", base_dir)
            if d.get("rest_token_file") is not None
            else None
        ),
        rest_user=_check.string(d["rest_user"], f"{where}.rest_user")
        if d.get("rest_user")
        else None,
        rest_token_reread_seconds=_check.number(
            d.get("rest_token_reread_seconds", base.rest_token_reread_seconds),
            f"{where}.rest_token_reread_seconds",
            minimum=0,
            strict=True,
        ),
    )
    if cfg.retry_max_seconds < cfg.retry_initial_seconds:
        raise ConfigError(
            f"{where}.retry_max_seconds: {cfg.retry_max_seconds:g} is below "
            f"retry_initial_seconds ({cfg.retry_initial_seconds:g}); raise it or lower the other"
        )
    if not cfg.rest_url.startswith(("http://", "https://", "unix:")):
        raise ConfigError(
            f"{where}.rest_url: '{cfg.rest_url}' is not an http(s):// or unix: address"
        )
    return cfg


def _partitions(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(
            f"{where}: expected a non-empty list of Slurm partition names, e.g. [gpu]"
        )
    names = tuple(_check.string(v, f"{where}[{i}]") for i, v in enumerate(value))
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ConfigError(f"{where}: partition '{sorted(dup)[0]}' is listed twice; list it once")
    return names


def _gpu_types(value: Any, where: str) -> dict[str, str]:
    d = _check.mapping(value, where)
    return {_check.string(k, where): _check.string(v, f"{where}.{k}") for k, v in d.items()}


def _prices(value: Any, where: str) -> dict[str, float]:
    d = _check.mapping(value, where)
    return {
        _check.string(k, where): _check.number(v, f"{where}.{k}", minimum=0, strict=True)
        for k, v in d.items()
    }


_WEIGHTS_KEYS = ["max_user_weight", "qos", "accounts"]


def _weights(doc: Any, where: str) -> WeightsConfig:
    """weights: {max_user_weight: W, qos: {NAME: W}, accounts: {NAME: W}}."""
    d = _check.mapping(doc, where)
    _check.keys(d, _WEIGHTS_KEYS, where)

    def weight(value: Any, at: str) -> float:
        w = _check.number(value, at, minimum=0, strict=True)
        if w > MAX_ADMIN_WEIGHT:
            raise ConfigError(
                f"{at}: {value!r} is out of range; it must be <= {MAX_ADMIN_WEIGHT:g}"
            )
        return w

    def by_name(value: Any, at: str) -> dict[str, float]:
        return {
            _check.string(k, at): weight(v, f"{at}.{k}")
            for k, v in _check.mapping(value, at).items()
        }

    cap = weight(
        d.get("max_user_weight", WeightsConfig.max_user_weight), f"{where}.max_user_weight"
    )
    if abs(cap * 1e6 - round(cap * 1e6)) > 1e-6:
        raise ConfigError(
            f"{where}.max_user_weight: {cap!r} has more than 6 decimals, which job_submit.lua "
            "and the SPANK plugin cannot write; round it"
        )
    return WeightsConfig(
        max_user_weight=cap,
        qos=by_name(d.get("qos") or {}, f"{where}.qos"),
        accounts=by_name(d.get("accounts") or {}, f"{where}.accounts"),
    )


def _seconds(d: Mapping[str, Any], w: str, key: str, default: float, strict: bool = False) -> float:
    return _check.number(d.get(key, default), w + key, minimum=0, strict=strict)


def _settings(d: Mapping[str, Any], w: str) -> RoundSettings:
    """The round's settings: top-level keys named as RoundSettings' fields."""
    base = DAEMON_DEFAULTS

    def seconds(key: str, strict: bool = False) -> float:
        return _seconds(d, w, key, getattr(base, key), strict)

    return RoundSettings(
        round_seconds=seconds("round_seconds", strict=True),
        preemption_overhead_seconds=seconds("preemption_overhead_seconds"),
        min_reallocation_interval_seconds=seconds("min_reallocation_interval_seconds"),
    )


def _plugins(d: Mapping[str, Any], w: str, learned_rows: LearnedRowsSettings) -> PluginSettings:
    """The round plugins' settings: their top-level keys, and the learned rows' from
    the learning section."""
    base = DAEMON_PLUGINS
    aware, molds = base.restart_aware, base.moldable_counts
    stay = _seconds(d, w, "stay_credit_seconds", base.mechanism.stay_credit_seconds)
    return PluginSettings(
        mechanism=MechanismSettings(stay_credit_seconds=stay),
        restart_aware=RestartAwareSettings(
            enabled=_flag(d.get("restart_aware", aware.enabled), w + "restart_aware"),
            budget=_restart_budget(d.get("restart_budget", aware.budget), w),
        ),
        moldable_counts=MoldableSettings(
            lp=_flag(d.get("moldable_lp", molds.lp), w + "moldable_lp"),
            untried=_flag(d.get("moldable_untried", molds.untried), w + "moldable_untried"),
        ),
        learned_rows=learned_rows,
    )


def plugin_keys(p: PluginSettings) -> dict[str, object]:
    """The plugins' settings by their top-level key in the file (the learned rows'
    are the learning section's)."""
    return {
        "stay_credit_seconds": p.mechanism.stay_credit_seconds,
        "restart_aware": p.restart_aware.enabled,
        "restart_budget": p.restart_aware.budget,
        "moldable_lp": p.moldable_counts.lp,
        "moldable_untried": p.moldable_counts.untried,
    }


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    return value


def _restart_budget(value: Any, w: str) -> float:
    b = _check.number(value, w + "restart_budget", minimum=0, strict=True)
    if b > 1:
        raise ConfigError(
            f"{w}restart_budget: {value!r} is a share of GPU time and must be <= 1 "
            "(0.1: restarts may cost a job a tenth of its GPU time)"
        )
    return b


def parse_config(doc: Any, source: Path | None = None) -> Config:
    """Validate a decoded YAML document; `source` anchors relative paths and messages."""
    origin = str(source) if source else "config"
    base_dir = source.parent.resolve() if source else Path.cwd()
    if doc is None:
        raise ConfigError(f"{origin}: the file is empty; it needs at least 'partitions'")
    d = _check.mapping(doc, origin)
    _check.keys(d, _TOP_KEYS, origin)
    if "partitions" not in d:
        raise ConfigError(
            f"{origin}: missing key 'partitions'; list the Slurm partitions the daemon manages"
        )
    w = f"{origin}: "
    base = Config(partitions=())
    ha = (
        ha_config(d["ha"], w + "ha", base_dir, d.get("state_dir"))
        if d.get("ha") is not None
        else None
    )
    learning, learned_rows = learning_config(d.get("learning") or {}, w + "learning")
    cfg = Config(
        partitions=_partitions(d["partitions"], w + "partitions"),
        policy=_check.choice(d.get("policy", base.policy), w + "policy", policy_names()),
        settings=_settings(d, w),
        plugins=_plugins(d, w, learned_rows),
        gpu_types=_gpu_types(d.get("gpu_types") or {}, w + "gpu_types"),
        prices=_prices(d.get("prices") or {}, w + "prices"),
        weights=_weights(d.get("weights") or {}, w + "weights"),
        throughput_table=(
            _path(d["throughput_table"], w + "throughput_table", base_dir)
            if d.get("throughput_table") is not None
            else None
        ),
        checkpoint=_checkpoint(d.get("checkpoint") or {}, w + "checkpoint"),
        solver_time_limit_seconds=(
            _check.number(
                d["solver_time_limit_seconds"],
                w + "solver_time_limit_seconds",
                minimum=0,
                strict=True,
            )
            if d.get("solver_time_limit_seconds") is not None
            else None
        ),
        state_dir=(
            ha.shared_dir
            if ha is not None
            else _path(d.get("state_dir", str(base.state_dir)), w + "state_dir", base_dir)
        ),
        status_privacy=_check.choice(
            d.get("status_privacy", base.status_privacy), w + "status_privacy", STATUS_PRIVACY
        ),
        progress_dir=(
            _path(d["progress_dir"], w + "progress_dir", base_dir)
            if d.get("progress_dir") is not None
            else None
        ),
        metrics_port=_check.integer(
            d.get("metrics_port", base.metrics_port), w + "metrics_port", lo=0, hi=65535
        ),
        metrics_address=_check.string(
            d.get("metrics_address", base.metrics_address), w + "metrics_address"
        ),
        backend=_check.choice(d.get("backend", base.backend), w + "backend", BACKENDS),
        slurm=_slurm(d.get("slurm") or {}, w + "slurm", base_dir),
        log_format=_check.choice(
            d.get("log_format", base.log_format), w + "log_format", LOG_FORMATS
        ),
        log_level=_check.choice(d.get("log_level", base.log_level), w + "log_level", LOG_LEVELS),
        learning=learning,
        ha=ha,
        source=source,
    )
    cross_checks(cfg, w)
    return cfg


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config file."""
    p = Path(path)
    text = read_utf8(
        p,
        ConfigError,
        unreadable="cannot read the config ({strerror}); check the path",
        save_as="the config as UTF-8",
    )
    doc = read_yaml(text, p)
    return parse_config(doc, p)


__all__ = [
    "load_config",
    "parse_config",
]
