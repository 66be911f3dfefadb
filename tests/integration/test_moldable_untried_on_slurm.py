"""A moldable job past its throughput rows, on the real cluster of each release: a
`scale=1-4` job of a type the table has at 1 GPU only (A3C), submitted by a plain user
to an idle cluster, started on 1 GPU while the rest sat idle, and `explain` did not say
why. The daemon's rounds (learned rows, `moldable_untried`) now start it at 4 GPUs,
Slurm runs it there, and `explain` names the count and the rule that chose it."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.cli import main
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics

pytestmark = [pytest.mark.slurm]


def _gpus(info: dict[str, str]) -> int:
    """The GPUs Slurm gave the job: nodes x gpu:K of its per-node request."""
    per_node = info.get("TresPerNode", info.get("Gres", ""))
    k = int(per_node.rsplit(":", 1)[-1]) if "gpu" in per_node else 0
    return int(info["NumNodes"]) * k


def test_a_job_past_its_rows_starts_on_idle_gpus_and_explain_says_why(slurm, capsys):
    site = Path(tempfile.mkdtemp(prefix="gavel-untried-", dir="/tmp"))
    state = site / "state"
    cfg = parse_config({"partitions": ["gpu"], "round_seconds": 5, "state_dir": str(state),
                        "checkpoint": {"grace_seconds": 3}})  # fmt: skip
    daemon = Daemon(cfg, cli_backend(managed_partitions=["gpu"], env=slurm.env, grace_s=5),
                    metrics=DaemonMetrics())  # fmt: skip
    try:
        job = slurm.sbatch_as(
            "nobody", "--comment=gavel:type=A3C,scale=1-4",
            "--wrap", "trap 'exit 99' USR1; sleep 300 & wait",
        )  # fmt: skip
        daemon.start()
        daemon.round()
        assert main(["status", "--state-dir", str(state), "--json"]) == 0
        m = {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}[job]["moldable"]
        assert (m["range"], m["count"], m["chosen"], m["limit"]) == ([1, 4], 4, "untried", None)
        assert [c["gpus"] for c in m["counts"]] == [1]  # the table's only row for A3C
        assert main(["explain", job, "--state-dir", str(state)]) == 0
        text = capsys.readouterr().out
        assert "on 4 (1-4) GPU(s)" in text, text
        assert (
            "moldable, range 1-4 GPUs; this run has 4: grown past 1 (the largest count with "
            "a throughput row or a report of its own; its least where it has none) into GPUs "
            "that no other job was given and no known gain took"
        ) in text, text
        slurm.wait_state(job, "RUNNING")
        assert _gpus(slurm.show(job)) == 4, slurm.show(job)
        daemon.round()  # it runs at 4, its range's maximum: nothing to say about more
        assert main(["explain", job, "--state-dir", str(state)]) == 0
        text = capsys.readouterr().out
        assert "moldable, range 1-4 GPUs; this run has 4: the count of this run" in text, text
        assert "not more" not in text
    finally:
        daemon.store.release()
        slurm.cancel_all()
        shutil.rmtree(site, ignore_errors=True)
