"""Reloading the daemon's config on SIGHUP (`systemctl reload slurm-gavel`).

The signal handler only asks (Daemon.request_reload); the daemon reads the file
between two rounds, never during one, so a round runs from start to end with one
config. :func:`prepare_reload` reads and checks everything first (the config file,
then the throughput table it names) and changes nothing: a file that does not
parse or validate is refused as a whole, with the error naming the key, and the
daemon goes on with the config it has.

What a reload changes, from the next round on: the policy, the round length, GPU
type renames, prices, weights, the throughput table (read again even when its path
is the same), the preemption overhead estimate, the stay credit, the reallocation
interval, the solver time limit and logging. What needs a restart (RESTART_KEYS):
the objects the daemon built once at start from them. The backend (``backend``,
``partitions``, ``slurm``) and the grace deadlines of jobs it has already signalled
(``checkpoint``), the locked state folder and who may read its status views
(``status_privacy``, resolved against Slurm's PrivateData at start), the progress
spool and the metrics listener. Those keep their running values; the reload names
each one that changed in a warning, so an admin never believes a setting took effect that did not.
"""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Protocol

from slurm_gavel.core.plugin_settings import PluginSettings
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_settings import RoundSettings
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.daemon.config import load_config, plugin_keys
from slurm_gavel.daemon.config_types import Config, ConfigError
from slurm_gavel.daemon.logs import ROOT, configure, event
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.daemon.scheduler_config import scheduler_config
from slurm_gavel.domain.throughputs import ThroughputTable, load_table
from slurm_gavel.errors import InputError

log = logging.getLogger("slurm_gavel.daemon")

RESTART_KEYS = (
    "partitions",
    "backend",
    "slurm",
    "checkpoint",
    "state_dir",
    "status_privacy",
    "progress_dir",
    "metrics_port",
    "metrics_address",
    "ha",
)
# Settings the policy's input is built from: a change recomputes the allocation at
# the next round, even when the job set is the same.
ALLOCATION_KEYS = ("policy", "prices", "weights", "solver_time_limit_seconds", "gpu_types")
# A daemon config is a few kilobytes; refuse what cannot be one before reading it
# (a path swapped for a FIFO or a device would otherwise block the running daemon).
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class Reload:
    """A checked reload, ready to apply."""

    config: Config  # what the daemon runs with from now on (RESTART_KEYS kept)
    table: ThroughputTable  # the configured throughput table, read again
    changed: tuple[str, ...]  # keys that take effect, "throughput_table (contents)" too
    needs_restart: tuple[str, ...]  # keys that changed in the file but keep running values
    reallocate: bool  # the allocation's inputs changed: recompute it next round


def _check_file(path: Path, what: str) -> None:
    """A regular file of sane size, or ConfigError naming it (never blocks)."""
    try:
        st = path.stat()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what} ({e.strerror}); check the path") from e
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: the {what} is not a regular file; point at the file itself")
    if what == "config" and st.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: {st.st_size} bytes is not a daemon config (at most {MAX_CONFIG_BYTES})"
        )


def prepare_reload(current: Config, path: Path, current_table: ThroughputTable) -> Reload:
    """Read and check the config at `path` and its throughput table against the
    running `current` config; raises ConfigError (an InputError) naming the problem.
    Nothing is applied here."""
    _check_file(path, "config")
    new = load_config(path)
    if new.throughput_table is not None:
        _check_file(new.throughput_table, "throughput table")
    try:
        table = load_table(new.throughput_table)
    except InputError as e:  # ThroughputError: names the file and the entry
        raise ConfigError(f"{path}: throughput_table: {e}") from e
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as e:
        # JSON of the wrong shape that the table parser does not name (it trusts the
        # file at start, where a traceback stops the daemon; here it must not)
        raise ConfigError(
            f"{path}: throughput_table {new.throughput_table}: not a throughput table "
            f"({type(e).__name__}: {str(e)[:200]}); fix the file or point at another"
        ) from e
    needs_restart = tuple(k for k in RESTART_KEYS if getattr(new, k) != getattr(current, k))
    config = replace(new, **{k: getattr(current, k) for k in RESTART_KEYS})
    grace = config.checkpoint.grace_cap
    round_seconds = config.settings.round_seconds
    if grace >= round_seconds:
        # The file itself passed this check, with its own checkpoint section; the
        # running one (a restart changes it) would outlast the new, shorter round.
        raise ConfigError(
            f"{path}: round_seconds ({round_seconds:g}) must stay longer than the "
            f"running checkpoint grace ({grace:g} s); checkpoint changes need a restart: "
            "restart the daemon, or keep round_seconds above the grace"
        )
    skip = {*RESTART_KEYS, "source"}
    now, before = _by_key(config), _by_key(current)
    changed = [k for k, v in now.items() if k not in skip and v != before[k]]
    table_changed = table != current_table
    if table_changed and "throughput_table" not in changed:
        changed.append("throughput_table (contents)")
    reallocate = table_changed or any(k in changed for k in ALLOCATION_KEYS)
    return Reload(config, table, tuple(changed), needs_restart, reallocate)


def _by_key(config: Config) -> dict[str, object]:
    """The config's values by the file's key: the round's settings and the plugins'
    are top-level keys, the learned rows' the learning section's."""
    out: dict[str, object] = {}
    for f in fields(Config):
        value = getattr(config, f.name)
        if isinstance(value, RoundSettings):
            out.update((g.name, getattr(value, g.name)) for g in fields(RoundSettings))
        elif isinstance(value, PluginSettings):
            out.update(plugin_keys(value))
        elif f.name == "learning":
            out[f.name] = (value, config.plugins.learned_rows)
        else:
            out[f.name] = value
    return out


class Reloadable(Protocol):
    """The settings of the daemon (daemon.Daemon) a reload replaces."""

    config: Config
    table: ThroughputTable
    sched_config: SchedulerConfig
    progress: ProgressTracker | None
    state: SchedulerState
    metrics: DaemonMetrics


def reload_daemon(d: Reloadable) -> bool:
    """Daemon.reload: prepare, then apply to the daemon's public settings. Never raises
    (a reload must not end the daemon); True when the new config is in use."""
    source = d.config.source
    try:
        if source is None:
            raise ConfigError("the daemon was not started from a config file")
        plan = prepare_reload(d.config, source, d.table)
    except Exception as e:
        d.metrics.config_reloads.labels(result="refused").inc()
        event(log, "config_reload_refused", logging.ERROR, config=str(source),
              error=str(e)[:500], kept_policy=d.config.policy)  # fmt: skip
        if not isinstance(e, InputError):  # a bug, not the file: keep the traceback
            log.error("config reload failed", exc_info=True, extra={"event": "reload_bug"})
        return False
    for key in plan.needs_restart:
        event(log, "config_needs_restart", logging.WARNING, key=key,
              note="changed in the file; keeps its running value until a restart")  # fmt: skip
    old = d.config
    d.config, d.table = plan.config, plan.table
    d.sched_config = scheduler_config(plan.config, plan.table)
    if d.progress is not None:
        d.progress.table = plan.table
        d.progress.changed = True  # fold the learned cells into the new table
    if plan.reallocate:
        d.state.allocation = None  # the next round computes it from the new inputs
    if plan.config.log_format != old.log_format:
        configure(plan.config.log_format, plan.config.log_level)
    elif plan.config.log_level != old.log_level:
        logging.getLogger(ROOT).setLevel(plan.config.log_level.upper())
    d.metrics.config_reloads.labels(result="applied").inc()
    event(log, "config_reloaded", config=str(source),
          changed=",".join(plan.changed) or "nothing", reallocate=plan.reallocate,
          policy=plan.config.policy, round_s=plan.config.settings.round_seconds)  # fmt: skip
    return True
