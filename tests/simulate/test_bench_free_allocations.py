"""benchmarks/bench_free_allocations.py: the round loop's floor with free allocations.
A replay must give the recorded run's schedule, and refuse a recording of other jobs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_free_allocations.py"


def _simulate(seed: int, out: Path) -> list[str]:
    return [
        "simulate", "--generate", "60", "--interarrival", "600", "--row-spread", "0.3",
        "--seed", str(seed), "--policy", "max_min_fairness", "--no-progress",
        "--no-wall-time", "--json", str(out),
    ]  # fmt: skip


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True
    )


def test_a_replay_is_the_recorded_schedule_without_solving(tmp_path):
    allocs = tmp_path / "a.pkl"
    rec, rep = tmp_path / "rec.json", tmp_path / "rep.json"
    r = _run("record", str(allocs), "--", *_simulate(1, rec))
    assert r.returncode == 0, r.stderr
    r = _run("replay", str(allocs), "--", *_simulate(1, rep))
    assert r.returncode == 0, r.stderr
    assert rep.read_bytes() == rec.read_bytes()
    assert "unpickled" in r.stderr


def test_a_recording_of_other_jobs_is_refused(tmp_path):
    allocs = tmp_path / "a.pkl"
    assert _run("record", str(allocs), "--", *_simulate(1, tmp_path / "x.json")).returncode == 0
    r = _run("replay", str(allocs), "--", *_simulate(2, tmp_path / "y.json"))
    assert r.returncode != 0
    assert "not the recorded ones" in r.stderr


def test_without_a_mode_it_says_how_to_call_it():
    r = _run("play", "x", "--", "simulate")
    assert r.returncode == 2 and "record ALLOCS" in r.stderr
