"""Emulated pairs live (every release's shards cluster, up --shards 2): two paced jobs the
daemon's backend placed as a pair on one GPU read from Slurm that they share it and
pace at their pair cells; when one is preempted the other goes back to its own speed.
The jobs run tests/workloads/jobs/paced_probe.py (the runner's pacing loop, no torch)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from slurm_gavel.domain.throughputs import load_table
from tests.backends.slurm.test_backend import backend
from tests.backends.slurm.test_shard_pairs_on_slurm import _pair, _shard_gpu, _wait_running

pytestmark = [pytest.mark.slurm]

PROBE = Path(__file__).parent / "jobs" / "paced_probe.py"
R50 = "ResNet-50 (batch size 64)"


def _submit(slurm, tmp_path: Path, name: str, job_type: str) -> str:
    return slurm.sbatch(
        f"--comment=gavel:type={job_type}",
        "-p",
        "gpu",
        "-o",
        str(tmp_path / f"{name}.out"),
        "--wrap",
        f"exec python3 {PROBE} '{job_type}' 120",
    )


def _wait_line(path: Path, pattern: str, timeout: float = 45.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        m = re.search(pattern, text)
        if m:
            return m.group(0)
        time.sleep(0.5)
    raise AssertionError(f"no {pattern!r} in {path}:\n{text}")


def test_paired_jobs_pace_at_their_pair_cells_and_alone_again(slurm_shards_session, tmp_path):
    slurm = slurm_shards_session
    slurm.cancel_all()
    tmp_path.chmod(0o755)
    table = load_table()
    r50_pair, a3c_pair = table.pair(R50, "A3C", 1, "v100")
    try:
        a = _submit(slurm, tmp_path, "a", R50)
        b_ = _submit(slurm, tmp_path, "b", "A3C")
        b = backend(slurm)
        b.observe()
        res = b.act(_pair(0, {a: ("v100", "v100-1", b_), b_: ("v100", "v100-1", a)}))
        assert sorted(res.started) == sorted([a, b_]) and not res.failed, res
        _wait_running(slurm, [a, b_])
        assert _shard_gpu(slurm, a) == _shard_gpu(slurm, b_) != ()
        line_a = _wait_line(tmp_path / "a.out", r"paired with job .*")
        line_b = _wait_line(tmp_path / "b.out", r"paired with job .*")
        assert line_a.startswith(f"paired with job {b_} (A3C) on v100: {r50_pair:.3g} steps/s")
        assert line_b.startswith(f"paired with job {a} ({R50}) on v100: {a3c_pair:.3g} steps/s")
        # b preempted (checkpoint signal, exit 99, held): a alone on its shards again.
        b.observe()
        res = b.act(_pair(1, {a: ("v100", "v100-1", None)}))
        assert res.preempted == (b_,) and res.kept == (a,) and not res.failed, res
        solo = table.row(R50, 1)["v100"]
        line = _wait_line(tmp_path / "a.out", r"alone on its GPU: .*")
        assert line == f"alone on its GPU: {solo:.3g} steps/s"
    finally:
        slurm.cancel_all()
