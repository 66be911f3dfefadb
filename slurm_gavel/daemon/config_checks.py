"""Checks across the daemon config's keys: values that are each valid alone but
impossible together (a grace longer than the round, prices for GPU types the table
lacks, ...), each a ConfigError that names both keys and the fix."""

from __future__ import annotations

import difflib

from slurm_gavel.daemon.config_types import Config, ConfigError


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


def cross_checks(cfg: Config, w: str) -> None:
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
    from slurm_gavel.domain.throughputs import load_table

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
