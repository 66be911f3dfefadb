"""The command line of tools/local-cluster (see slurm_gavel_dev.localcluster)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from slurm_gavel_dev import localcluster as lc
from slurm_gavel_dev import localcluster_chroot as chroot
from slurm_gavel_dev.localcluster_conf import (
    DEFAULT_PORT_BASE,
    DEFAULT_TOPOLOGY,
    SHARED_PARTITION,
    ClusterError,
    ClusterSpec,
    parse_topology,
)
from slurm_gavel_dev.localcluster_rest import rest_up


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/local-cluster", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["up", "down", "status", "rest", "env"])
    p.add_argument(
        "--topology",
        default=DEFAULT_TOPOLOGY,
        help=f"TYPE:NODESxGPUS,... (default {DEFAULT_TOPOLOGY})",
    )
    p.add_argument(
        "--partitions",
        default="both",
        choices=["per-type", "shared", "both"],
        help=f"one partition per GPU type, one shared '{SHARED_PARTITION}', or both",
    )
    p.add_argument(
        "--slurm",
        default=chroot.HOST_RELEASE,
        choices=list(chroot.RELEASES),
        help=f"Slurm release (default {chroot.HOST_RELEASE}, the host's packages; the others "
        f"run in a Debian chroot built on first use in {chroot.CACHE})",
    )
    p.add_argument(
        "--dir", type=Path, default=lc.DEFAULT_DIR, help=f"run dir (default {lc.DEFAULT_DIR})"
    )
    p.add_argument(
        "--port-base",
        default=str(DEFAULT_PORT_BASE),
        help="slurmctld port; slurmds use the next ones; 'auto' picks free ports",
    )
    p.add_argument(
        "--spank",
        action="append",
        default=[],
        metavar="PLUGIN.so",
        help="load a SPANK plugin (optional), built against the same release's spank.h; "
        "PLUGIN.so:required makes it required",
    )
    p.add_argument(
        "--no-hold",
        action="store_true",
        help="do not install job_submit.lua (managed jobs are then not held)",
    )
    p.add_argument("--rest", action="store_true", help="with up: also start slurmrestd")
    p.add_argument(
        "--accounting",
        action="store_true",
        help="with up: also start MariaDB and slurmdbd (sacct, sreport) and register "
        "the cluster, accounts and users",
    )
    p.add_argument(
        "--shards",
        type=int,
        default=0,
        metavar="N",
        help="with up: N gres/shard per fake GPU, so jobs can share a GPU "
        "(docs/admin-guide.md, shard set-up; default 0: none)",
    )
    p.add_argument(
        "--foreground",
        action="store_true",
        help="with up: stay in the foreground and stop the cluster on SIGTERM",
    )
    p.add_argument(
        "--munge",
        action="store_true",
        help="with down: also stop the host's munged if this cluster started it "
        "(other clusters may share it)",
    )
    return p


def _spank_lines(args: list[str]) -> list[str]:
    lines = []
    for item in args:
        path, _, kind = item.partition(":")
        kind = kind or "optional"
        if kind not in ("optional", "required"):
            raise ClusterError(f"--spank {item}: the suffix must be :optional or :required")
        if not Path(path).is_file():
            raise ClusterError(f"--spank {path}: no such file (build the plugin first)")
        lines.append(f"{kind} {Path(path).resolve()}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    run: Path = args.dir.resolve()
    try:
        if args.command == "up":
            auto = args.port_base == "auto"
            spec = ClusterSpec(
                topology=args.topology,
                partitions=args.partitions,
                port_base=DEFAULT_PORT_BASE if auto else int(args.port_base),
                spank=_spank_lines(args.spank),
                hold_on_arrival=not args.no_hold,
                slurm=args.slurm,
                accounting=args.accounting,
                shards=args.shards,
            )
            parse_topology(spec.topology)
            lc.up(spec, run, port_base_auto=auto)
            if args.rest:
                print(f"slurmrestd: unix:{rest_up(run)}")
            print(lc.status(run))
            print(lc.env_lines(run))
            if args.foreground:
                return lc.stay_up(run)
        elif args.command == "down":
            lc.down(run, stop_munge=args.munge)
            print(f"down: {run}")
        elif args.command == "rest":
            print(f"slurmrestd: unix:{rest_up(run)}")
        elif args.command == "env":
            print(lc.env_lines(run))
        else:
            print(lc.status(run))
            return 0 if lc.is_up(run) else 1
    except (ClusterError, subprocess.CalledProcessError) as e:
        print(f"local-cluster: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
