"""No job held forever: a held managed job the daemon cannot use goes back to Slurm,
with the reason in its comment, which its owner sees in `scontrol show job`."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.throughputs import load_table

pytestmark = pytest.mark.slurm


def one_round(slurm, tmp_path: Path) -> Daemon:  # type: ignore[no-untyped-def]
    cfg = parse_config(
        {
            "partitions": ["gpu", "v100", "p100", "k80"],
            "round_seconds": 60,
            "checkpoint": {"grace_seconds": 5},
            "state_dir": str(tmp_path / "state"),
            # a type the table lacks is given back under table knowledge only (with
            # learned knowledge, the default, it runs on an estimate)
            "learning": {"knowledge": "table"},
        }
    )
    backend = cli_backend(managed_partitions=cfg.partitions, env=slurm.env, grace_s=5.0)
    d = Daemon(cfg, backend, table=load_table(), metrics=DaemonMetrics())
    d.start()
    try:
        d.round()
    finally:
        d.store.release()
    return d


@pytest.mark.hostile(guards="stranded", inputs=2)
def test_held_jobs_the_daemon_cannot_use_go_back_to_slurm_with_the_reason(slurm, tmp_path):
    # A type the table lacks passes the grammar (the Lua cannot know the table) and is
    # held; a comment the grammar refuses can only be there from before the Lua (set
    # here as root, whom the Lua lets change comments).
    unknown = slurm.sbatch(
        "--comment=gavel:type=VGG-16", "-p", "gpu", "--gres=gpu:2", "-o", "/dev/null",
        "--wrap", "true",
    )  # fmt: skip
    refused = slurm.sbatch(
        "--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null", "--wrap", "true"
    )
    slurm.cmd("scontrol", "update", f"JobId={refused}", "Comment=gavel:type=A3C,scale=0x10")
    good = slurm.sbatch(
        "--comment=gavel:type=A3C", "-p", "gpu", "--begin=now+3600", "-o", "/dev/null",
        "--wrap", "true",
    )  # fmt: skip
    for job in (unknown, refused, good):
        assert slurm.show(job)["Priority"] == "0"
    one_round(slurm, tmp_path)
    info = slurm.show(unknown)
    assert info["Comment"].startswith("gavel-released:")
    assert (
        "unknown job type 'VGG-16'"
        in slurm.cmd("squeue", "-h", "-t", "all", "-j", unknown, "-o", "%k").stdout
    )
    assert info["Priority"] != "0"
    assert (
        "gpu:2" in slurm.cmd("squeue", "-h", "-t", "all", "-j", unknown, "-o", "%b").stdout
    )  # request back
    slurm.wait_state(unknown, "COMPLETED", "GONE", timeout=60)  # Slurm ran it on its own
    info = slurm.show(refused)
    assert info["Comment"].startswith("gavel-released:") and info["Priority"] != "0"
    assert "scale=" in slurm.cmd("squeue", "-h", "-t", "all", "-j", refused, "-o", "%k").stdout
    # the good one stays managed: placed by the daemon (it waits for --begin), not released
    assert slurm.show(good)["Comment"] == "gavel:type=A3C"
    seen = slurm.as_user("nobody", "scontrol", "show", "job", refused)  # as a user sees it
    assert seen.returncode == 0 and "gavel-released:" in seen.stdout, seen.stderr
