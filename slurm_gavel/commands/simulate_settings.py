"""`slurm-gavel simulate`'s settings: what the simulation runs with (the daemon's
config, the seed, the round's settings, the throughput table), from the command line,
else the config (--config), else the simulator's defaults."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

from slurm_gavel.core.plugin_settings import SIMULATOR_PLUGINS, PluginSettings
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS, RoundSettings
from slurm_gavel.daemon.config import load_config
from slurm_gavel.daemon.config_types import Config
from slurm_gavel.errors import InputError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def add_settings_options(p: argparse.ArgumentParser) -> None:
    """--config, --seed, the round's settings (stored under RoundSettings' field
    names, so apply_config finds them), the plugins' and --table."""
    p.add_argument(
        "--config",
        metavar="FILE",
        help=(
            "the daemon's YAML config (e.g. conf/gavel.yaml): simulate with its policy, "
            "round_seconds, stay_credit_seconds, preemption_overhead_seconds (the restart "
            "cost charged), min_reallocation_interval_seconds, solver time limit, "
            "throughput_table, prices and account weights; options given here override it"
        ),
    )
    p.add_argument("--seed", type=int, default=0, help="seed for generation and gandiva")
    p.add_argument(
        "--round-seconds",
        type=float,
        metavar="R",
        help="seconds per scheduling round (default 360, or the config's round_seconds)",
    )
    p.add_argument(
        "--preemption-overhead",
        dest="preemption_overhead_seconds",
        type=float,
        metavar="S",
        help=(
            "checkpoint+restore seconds a restarted or moved job loses (default 30, or the "
            "config's preemption_overhead_seconds; 0 = Gavel)"
        ),
    )
    p.add_argument(
        "--overhead-for",
        action="append",
        default=[],
        metavar="JOBTYPE=S",
        help="per-job-type override of --preemption-overhead (repeatable)",
    )
    p.add_argument(
        "--stay-credit",
        dest="stay_credit_seconds",
        type=float,
        metavar="S",
        help=(
            "not Gavel: in underloaded rounds a job's current GPU type counts S seconds "
            "less received time, so split allocations switch type less (default 0 = Gavel, "
            "or the config's stay_credit_seconds)"
        ),
    )
    p.add_argument(
        "--reallocate-every",
        dest="reallocate_every_seconds",
        type=float,
        metavar="S",
        help="also recompute every S seconds",
    )
    p.add_argument(
        "--min-reallocation-interval",
        dest="min_reallocation_interval_seconds",
        type=float,
        metavar="S",
        help=(
            "recompute at most once per S seconds; a job-set change waits (default 0 = on "
            "every change, or the config's min_reallocation_interval_seconds; Gavel's own "
            "simulator runs with 1920)"
        ),
    )
    p.add_argument(
        "--restart-aware",
        dest="restart_aware",
        action="store_const",
        const=True,
        default=None,
        help=(
            "not Gavel: keep each run of a job where it is for its restart cost / "
            "--restart-budget seconds (the cost: the trace's restart_seconds, else "
            "--overhead-for, else --preemption-overhead); replaces --stay-credit "
            "(default off, or the config's restart_aware)"
        ),
    )
    p.add_argument(
        "--restart-budget",
        dest="restart_budget",
        type=float,
        metavar="B",
        help=(
            "with --restart-aware: the share of a job's GPU time its restarts may cost, "
            "0 < B <= 1 (default 0.1, or the config's restart_budget)"
        ),
    )
    p.add_argument(
        "--moldable-lp",
        dest="moldable_lp",
        action="store_const",
        const=True,
        default=None,
        help=(
            "not Gavel: a moldable job's GPU count from one max-min LP over (GPU type, "
            "count) instead of least-first + grow into idle GPUs (default off, or the "
            "config's moldable_lp)"
        ),
    )
    p.add_argument("--table", metavar="FILE", help="throughput table (default: Gavel's)")


def overhead_overrides(items: list[str]) -> dict[str, float]:
    """--overhead-for JOBTYPE=S options as {job type: seconds}."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or not name or seconds < 0:
            raise InputError(f"--overhead-for '{item}': expected JOBTYPE=SECONDS (>= 0)")
        out[name] = seconds
    return out


def apply_config(
    args: argparse.Namespace,
) -> tuple[Config | None, RoundSettings, PluginSettings]:
    """The config (--config), the round's settings and its plugins' settings: those
    given on the command line, else the config's, else the simulator's defaults.

    With --config the simulation runs with the daemon's settings (what daemon.py hands
    its SchedulerConfig), so "try it in the simulator first" models what the daemon
    will run; an option given on the command line still wins.
    """
    cfg = load_config(args.config) if args.config else None
    base, plugins = SIMULATOR_DEFAULTS, SIMULATOR_PLUGINS
    if cfg is not None:
        base, plugins = cfg.settings, cfg.plugins
        if not args.policy:
            args.policy = [cfg.policy]
        if args.table is None and cfg.throughput_table is not None:
            args.table = str(cfg.throughput_table)
    settings = _given(base, **{f.name: getattr(args, f.name) for f in fields(RoundSettings)})
    plugins = replace(
        plugins,
        mechanism=_given(plugins.mechanism, stay_credit_seconds=args.stay_credit_seconds),
        restart_aware=_given(
            plugins.restart_aware, enabled=args.restart_aware, budget=args.restart_budget
        ),
        # Never untried counts here, the config's or not: a simulated job has no true
        # rate at a count its table lacks (core/moldable/moldable.py, 2.), so no option either.
        moldable_counts=_given(plugins.moldable_counts, lp=args.moldable_lp, untried=False),
    )
    _check_settings(settings, plugins)
    return cfg, settings, plugins


def _given(base: T, **options: Any) -> T:
    """``base`` with the options given (not None) in its place."""
    return replace(base, **{k: v for k, v in options.items() if v is not None})


def _check_settings(s: RoundSettings, p: PluginSettings) -> None:
    if not s.round_seconds > 0:
        raise InputError(f"--round-seconds {s.round_seconds}: must be > 0 seconds")
    if s.preemption_overhead_seconds < 0:
        raise InputError(f"--preemption-overhead {s.preemption_overhead_seconds}: must be >= 0")
    stay = p.mechanism.stay_credit_seconds
    if not (0 <= stay < float("inf")):
        raise InputError(f"--stay-credit {stay}: must be a finite number >= 0")
    if not (0 < p.restart_aware.budget <= 1):
        raise InputError(
            f"--restart-budget {p.restart_aware.budget}: must be a share of GPU time, 0 < B <= 1 "
            "(0.1: restarts may cost a job a tenth of its GPU time)"
        )
    if not (0 <= s.min_reallocation_interval_seconds < float("inf")):
        raise InputError(
            f"--min-reallocation-interval {s.min_reallocation_interval_seconds}: must be a "
            "finite number of seconds >= 0"
        )


def config_line(args: argparse.Namespace, cfg: Config, s: RoundSettings, p: PluginSettings) -> str:
    """The line that says which settings a --config run uses."""
    limit = cfg.solver_time_limit_seconds
    stay = p.mechanism.stay_credit_seconds
    return (
        f"settings: {args.config} (command-line options win): policy {', '.join(args.policy)}, "
        f"round {s.round_seconds:g} s, stay credit {stay:g} s, restart "
        f"overhead {s.preemption_overhead_seconds:g} s, min reallocation interval "
        f"{s.min_reallocation_interval_seconds:g} s, solver time limit "
        f"{'none' if limit is None else f'{limit:g} s'}\n"
    )
