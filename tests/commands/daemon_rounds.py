"""A state directory left by a daemon that ran a few rounds on a simulated cluster and
stopped: what `status` and `explain` read. Shared by the command tests; imported as a
plain module (pytest puts this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TYPES = ["ResNet-50 (batch size 64)", "A3C", "LM (batch size 5)"]


def run_daemon(state_dir: Path, jobs: list[Job], rounds: int = 3, **config: object) -> Daemon:
    """`rounds` 60 s rounds of the daemon over `jobs` on v100:1x2,k80:1x2 (partition
    gpu, 5 s grace, more config keys in ``config``); its state and public view are left
    in state_dir."""
    table = load_table()
    sim = SimulatedCluster(parse_cluster_spec("v100:1x2,k80:1x2"), jobs, table)
    cfg = parse_config({"partitions": ["gpu"], "round_seconds": 60, "state_dir": str(state_dir),
                        "checkpoint": {"grace_seconds": 5}, **config})  # fmt: skip
    daemon = Daemon(cfg, sim, table=table, metrics=DaemonMetrics())
    daemon.start()
    for _ in range(rounds):
        daemon.round()
        sim.advance(sim.clock + 60)
    daemon.store.release()
    return daemon
