"""Multi-rank agreement without Slurm: two gloo ranks in subprocesses.

tests/job/test_ranks_on_slurm.py runs the whole path on the local cluster.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from two_ranks import failed, free_port, run_two_ranks

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]
SCRIPT = Path(__file__).resolve().parent / "jobs" / "ranks_local.py"


def _run(dirs: list[Path], restarts: int, *signal: int) -> list[subprocess.CompletedProcess[str]]:
    port = str(free_port())
    tail = [str(restarts)] + [str(s) for s in signal]
    return run_two_ranks(SCRIPT, [[str(r), port, str(dirs[r]), *tail] for r in (0, 1)])


def test_one_signalled_rank_stops_both_on_the_same_step_and_both_resume_there(
    tmp_path: Path,
) -> None:
    ck = tmp_path / "ck"
    first = _run([ck, ck], 0, 1, 6)  # only rank 1 is signalled, after step 6
    assert [p.returncode for p in first] == [99, 99], [p.stderr for p in first]
    for r, p in enumerate(first):
        assert f"rank {r}: checkpoint" in p.stderr and "at step 7; exiting 99" in p.stderr
    assert sorted(f.name for f in (ck / "77").iterdir()) == [  # rank 0's alone
        "ckpt-000000000007.pt",
        "ckpt-000000000007.pt.sha256",
    ]
    second = _run([ck, ck], 1)
    assert [p.returncode for p in second] == [0, 0], [p.stderr for p in second]
    for p in second:
        assert p.stdout.splitlines() == ["start 7", "done 20 [20.0, 20.0, 20.0]"]


def test_ranks_that_see_different_checkpoints_refuse_to_go_on(tmp_path: Path) -> None:
    """A checkpoint folder that is not shared: rank 1 finds nothing and would start over."""
    shared = tmp_path / "ck"
    assert [p.returncode for p in _run([shared, shared], 0, 0, 3)] == [99, 99]
    second = _run([shared, tmp_path / "node-local"], 1)
    assert [failed(p.returncode) for p in second] == [True, True], second
    for p in second:
        assert "RankMismatchError: the ranks resumed at different steps (0..4)" in p.stderr
        assert "file system every node sees" in p.stderr
