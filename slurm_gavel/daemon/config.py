"""The daemon's YAML configuration: dataclasses and their validation.

Every problem is found before the daemon touches Slurm and reported as one
line naming the file, the key, what is wrong and how to fix it (ConfigError is
an InputError: exit code 2). Unknown keys are errors, not warnings: a typo in
``round_secnds`` silently running with the default is the kind of surprise an
admin finds weeks later.

Relative paths in the file are resolved against the file's own directory, so
a config and the table it names can be moved together.
"""

from __future__ import annotations

import difflib
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slurm_gavel.core.checks import Checks, show
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS, RoundSettings
from slurm_gavel.core.shares import MAX_ADMIN_WEIGHT, WeightsConfig
from slurm_gavel.errors import InputError, read_utf8
from slurm_gavel.policies import policy_names

BACKENDS = ("cli", "rest")
LOG_FORMATS = ("json", "kv")
LOG_LEVELS = ("debug", "info", "warning", "error")
# Who sees which managed jobs in `slurm-gavel status` (status_private.py): auto follows
# Slurm's PrivateData (private when it hides jobs), public = every user sees every job,
# private = each user sees only their own.
STATUS_PRIVACY = ("auto", "public", "private")


class ConfigError(InputError):
    """The daemon configuration is wrong; the message names the key and the fix."""


@dataclass(frozen=True)
class CheckpointConfig:
    # Signal sent to the batch shell to ask a job to checkpoint and exit (name without SIG).
    signal: str = "USR1"
    # Seconds a job gets to exit after the signal before the daemon requeue-holds it.
    grace_seconds: float = 30.0
    # Most seconds a job may ask for with grace= (--gavel-grace); a longer ask is capped.
    # None: grace_seconds, so no job gets longer than the site's grace until the admin says.
    max_grace_seconds: float | None = None

    @property
    def grace_cap(self) -> float:
        return self.grace_seconds if self.max_grace_seconds is None else self.max_grace_seconds

    # Exit code meaning "checkpointed, requeue me held"; must equal RequeueExitHold.
    requeue_exit_code: int = 99


@dataclass(frozen=True)
class SlurmConfig:
    # Seconds before one sinfo/squeue/scontrol call is abandoned.
    command_timeout_seconds: float = 30.0
    # While slurmctld does not answer the daemon waits and retries, doubling the
    # wait from retry_initial_seconds up to retry_max_seconds; it never gives up.
    retry_initial_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    # backend: rest only.
    rest_url: str = "http://localhost:6820"
    rest_token_file: Path | None = None  # a JWT (scontrol token), for http(s) URLs
    rest_user: str | None = None  # the user the JWT belongs to (X-SLURM-USER-NAME)
    # Re-read rest_token_file this often (also at once when slurmrestd refuses it).
    rest_token_reread_seconds: float = 300.0


@dataclass(frozen=True)
class Config:
    partitions: tuple[str, ...]
    policy: str = "max_min_fairness"
    # round_seconds, preemption_overhead_seconds, stay_credit_seconds and
    # min_reallocation_interval_seconds: top-level keys of the file, as in RoundSettings.
    settings: RoundSettings = DAEMON_DEFAULTS
    # Slurm GRES type -> throughput-table GPU type, for sites whose names differ.
    gpu_types: Mapping[str, str] = field(default_factory=dict)
    # Dollars per GPU-hour by throughput-table GPU type: what policy min_cost minimises.
    prices: Mapping[str, float] = field(default_factory=dict)
    # Shares from the admin: weights by QOS and account, the cap on a user's own weight.
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    throughput_table: Path | None = None  # None = the table shipped with the package
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    solver_time_limit_seconds: float | None = None
    state_dir: Path = Path("/var/lib/slurm-gavel")
    status_privacy: str = "auto"  # one of STATUS_PRIVACY
    progress_dir: Path | None = None  # the job-side progress spool (GAVEL_PROGRESS_DIR)
    metrics_port: int = 0  # 0 = no metrics endpoint
    metrics_address: str = "127.0.0.1"
    backend: str = "cli"
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    log_format: str = "kv"
    log_level: str = "info"
    source: Path | None = None  # the file this was read from (for messages)


# ---- field checkers ------------------------------------------------------------------
# The generic ones are slurm_gavel.core.checks'; these know the config's own fields.


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
]
_CHECKPOINT_KEYS = ["signal", "grace_seconds", "max_grace_seconds", "requeue_exit_code"]
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


def _settings(d: Mapping[str, Any], w: str) -> RoundSettings:
    """The round's settings: top-level keys named as RoundSettings' fields."""
    base = DAEMON_DEFAULTS

    def seconds(key: str, strict: bool = False) -> float:
        value = d.get(key, getattr(base, key))
        return _check.number(value, w + key, minimum=0, strict=strict)

    return RoundSettings(
        round_seconds=seconds("round_seconds", strict=True),
        preemption_overhead_seconds=seconds("preemption_overhead_seconds"),
        stay_credit_seconds=seconds("stay_credit_seconds"),
        min_reallocation_interval_seconds=seconds("min_reallocation_interval_seconds"),
    )


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
    cfg = Config(
        partitions=_partitions(d["partitions"], w + "partitions"),
        policy=_check.choice(d.get("policy", base.policy), w + "policy", policy_names()),
        settings=_settings(d, w),
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
        state_dir=_path(d.get("state_dir", str(base.state_dir)), w + "state_dir", base_dir),
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
        source=source,
    )
    _cross_checks(cfg, w)
    return cfg


def _check_max_grace(cfg: Config, w: str) -> None:
    ck = cfg.checkpoint
    if ck.max_grace_seconds is None:
        return
    if ck.max_grace_seconds < ck.grace_seconds:
        raise ConfigError(
            f"{w}checkpoint.max_grace_seconds ({ck.max_grace_seconds:g}) is below "
            f"checkpoint.grace_seconds ({ck.grace_seconds:g}): a job asking grace= could get "
            "less than one asking nothing; raise max_grace_seconds or lower grace_seconds"
        )
    round_seconds = cfg.settings.round_seconds
    if ck.max_grace_seconds >= round_seconds:
        raise ConfigError(
            f"{w}checkpoint.max_grace_seconds ({ck.max_grace_seconds:g}) must be shorter than "
            f"round_seconds ({round_seconds:g}), or a job given the most grace would hold "
            "its GPUs for the whole next round; lower the maximum or lengthen the round"
        )


def _cross_checks(cfg: Config, w: str) -> None:
    """Values that are each fine alone but impossible together."""
    rs = cfg.settings
    if cfg.checkpoint.grace_seconds >= rs.round_seconds:
        raise ConfigError(
            f"{w}checkpoint.grace_seconds ({cfg.checkpoint.grace_seconds:g}) must be shorter "
            f"than round_seconds ({rs.round_seconds:g}), or preempted jobs would hold their "
            "GPUs for the whole next round; shorten the grace or lengthen the round"
        )
    _check_max_grace(cfg, w)
    if rs.preemption_overhead_seconds >= rs.round_seconds:
        raise ConfigError(
            f"{w}preemption_overhead_seconds ({rs.preemption_overhead_seconds:g}) is not "
            f"shorter than round_seconds ({rs.round_seconds:g}): every restart would cost a "
            "whole round; lengthen the round (Gavel uses 360 s)"
        )
    if cfg.throughput_table is not None and not cfg.throughput_table.is_file():
        raise ConfigError(
            f"{w}throughput_table: {cfg.throughput_table} does not exist; fix the path or "
            "remove the key to use the table shipped with slurm-gavel"
        )
    if (
        cfg.backend == "rest"
        and cfg.slurm.rest_token_file is not None
        and not (cfg.slurm.rest_token_file.is_file())
    ):
        raise ConfigError(
            f"{w}slurm.rest_token_file: {cfg.slurm.rest_token_file} does not exist; create it "
            "(scontrol token) or remove the key"
        )
    for slurm_type in cfg.gpu_types:
        if not slurm_type.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(
                f"{w}gpu_types: '{slurm_type}' is not a Slurm GRES type name "
                "(letters, digits, '_' and '-' only)"
            )
    if cfg.policy == "min_cost" or cfg.prices:
        _check_prices(cfg, w)


def _check_prices(cfg: Config, w: str) -> None:
    """Prices name the throughput table's GPU types; min_cost needs one for each.

    Checked here, not in the round: without it min_cost failed every round with the
    same error while the daemon kept running and scheduling nothing."""
    from slurm_gavel.core.throughputs import load_table

    types = load_table(cfg.throughput_table).gpu_types
    for name in cfg.prices:
        if name not in types:
            hint = difflib.get_close_matches(name, types, n=1)
            did = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise ConfigError(
                f"{w}prices: '{name}' is not a GPU type of the throughput table{did}; prices "
                f"are keyed by the table's names ({', '.join(types)}), after gpu_types renames"
            )
    missing = [t for t in types if t not in cfg.prices]
    if cfg.policy == "min_cost" and missing:
        example = ", ".join(f"{t}: <dollars per GPU-hour>" for t in missing)
        raise ConfigError(
            f"{w}policy min_cost needs a price for every GPU type of the throughput table; "
            f"missing: {', '.join(missing)}; add prices: {{{example}}}"
        )


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that rejects a key given twice (PyYAML silently keeps the last)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str | int | float | bool | None):
            # A list or mapping as a key (`[a, b]: 1`, `? {x: 1}`): no key of ours is one.
            raise ConfigError(
                f"line {key_node.start_mark.line + 1}: a {show(key).removeprefix('a ')} "
                "cannot be a key; keys are plain names such as 'policy'"
            )
        if key in seen:
            raise ConfigError(
                f"line {key_node.start_mark.line + 1}: key '{key}' is given twice; keep one"
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config file."""
    p = Path(path)
    text = read_utf8(
        p,
        ConfigError,
        unreadable="cannot read the config ({strerror}); check the path",
        save_as="the config as UTF-8",
    )
    try:
        doc = yaml.load(
            text, Loader=_UniqueKeyLoader
        )  # a SafeLoader subclass: no arbitrary objects
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from e
    except RecursionError:
        raise ConfigError(f"{p}: nested too deeply to read; this is not a config") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{p}: not valid YAML{line}: {problem}") from e
    return parse_config(doc, p)
