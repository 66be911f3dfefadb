"""`slurm-gavel run`: the scheduler daemon (admin-run; systemd unit in conf/systemd/)."""

from __future__ import annotations

import argparse
import logging
import signal
import time
from types import FrameType
from typing import Any

from slurm_gavel.daemon.config import load_config
from slurm_gavel.daemon.config_types import Config
from slurm_gavel.daemon.logs import configure, event
from slurm_gavel.domain.cluster_model import ClusterBackend

SUMMARY = "run the scheduler daemon against Slurm (rounds until stopped)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every round: observe the managed jobs and GPU nodes in Slurm, compute the
    policy's allocation, pick this round's placement and carry it out (release,
    checkpoint-signal, requeue-hold), then save the state. SIGTERM/SIGINT end the
    loop after the current round; SIGHUP (systemctl reload) reads the config file
    and the throughput table again between rounds, and a file that does not
    validate is refused with an error while the daemon runs on with the old one."""
    p.add_argument("--config", required=True, metavar="FILE", help="daemon YAML config")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="compute and print each round's actions without sending anything to Slurm "
        "(reads Slurm, writes no state)",
    )
    p.add_argument("--once", action="store_true", help="run one round and exit (cron-style)")


class RetryWatch:
    """The backend's retry sleep, noting that slurmctld was unreachable meanwhile."""

    def __init__(self) -> None:
        self.seen = False

    def sleep(self, seconds: float) -> None:
        self.seen = True
        time.sleep(seconds)

    def take(self) -> bool:
        seen, self.seen = self.seen, False
        return seen


def build_backend(config: Config, watch: RetryWatch | None = None) -> ClusterBackend:
    """The configured Slurm backend (imported here: `status` never needs it)."""
    from slurm_gavel.backends.slurm.cli.commands import SlurmCommands
    from slurm_gavel.backends.slurm.preemption import FRESH_RUN_S

    # Short in-command retries ride out a blip mid-act; a longer outage fails the
    # round and the daemon's own backoff (slurm.retry_*) takes over. Either way the
    # watch tells the daemon, which then settles before acting (daemon.py).
    commands = SlurmCommands(
        timeout=config.slurm.command_timeout_seconds,
        retries=3,
        backoff=config.slurm.retry_initial_seconds / 2,
        sleep=(watch or RetryWatch()).sleep,
    )
    options: dict[str, Any] = {
        "managed_partitions": config.partitions,
        "commands": commands,
        "grace_s": config.checkpoint.grace_seconds,
        "max_grace_s": config.checkpoint.max_grace_seconds,
        "checkpoint_signal": config.checkpoint.signal,
        # A run younger than this is preempted a round later, not signalled in its
        # first seconds (slurm/preemption.py): 5 s, or half a round where rounds are
        # shorter than 10 s (the test clusters' 4 s rounds: 2 s; Slurm's start time is
        # whole seconds, so 2 s still spares a run's first second).
        "fresh_run_s": min(FRESH_RUN_S, config.settings.round_seconds / 2),
    }
    if config.backend == "rest":
        from slurm_gavel.backends.slurm.rest.transport import rest_backend

        # The token file is checked (owner, mode 0600) and re-read on a schedule and
        # when slurmrestd refuses the token (slurm/rest/auth.py).
        return rest_backend(
            url=config.slurm.rest_url,
            token_file=config.slurm.rest_token_file,
            token_reread_s=config.slurm.rest_token_reread_seconds,
            user=config.slurm.rest_user,
            **options,
        )
    from slurm_gavel.backends.slurm.cli.transport import cli_backend

    return cli_backend(**options)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)  # InputError -> one line, exit 2
    configure(config.log_format, config.log_level)
    from slurm_gavel.daemon.daemon import Daemon  # after validation: errors before heavy imports

    watch = RetryWatch()
    daemon = Daemon(
        config, build_backend(config, watch), dry_run=args.dry_run, retried_unreachable=watch.take
    )
    daemon_log = logging.getLogger("slurm_gavel.daemon")

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        event(daemon_log, "signal", signal=signal.Signals(signum).name)
        daemon.stop()

    def on_hangup(_signum: int, _frame: FrameType | None) -> None:
        # Only ask: the file is read between rounds (Daemon.reload), never mid-round.
        event(daemon_log, "signal", signal="SIGHUP", action="reload")
        daemon.request_reload()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if not args.once:  # one round and exit: nothing to reload into (SIGHUP ends it)
        signal.signal(signal.SIGHUP, on_hangup)
    # Lock the state first: a second daemon must fail on the lock, naming the pid of
    # the first, not on the metrics port the first one already holds.
    daemon.start()
    if config.metrics_port and not args.once and not args.dry_run:
        daemon.metrics.serve(config.metrics_port, config.metrics_address)
        event(daemon_log, "metrics", address=config.metrics_address, port=config.metrics_port)
    event(
        daemon_log,
        "starting",
        config=str(args.config),
        policy=config.policy,
        round_s=config.settings.round_seconds,
        partitions=",".join(config.partitions),
        backend=config.backend,
        dry_run=args.dry_run,
        once=args.once,
    )
    return daemon.run(once=args.once)
