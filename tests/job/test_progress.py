"""Progress reports in the spool folder."""

from __future__ import annotations

import json
from pathlib import Path

from slurm_gavel.job.progress import FORMAT, ProgressReporter, read_report


def test_report_file_is_written_atomically_with_the_documented_fields(tmp_path: Path) -> None:
    rep = ProgressReporter("9", "A3C", tmp_path, interval=0.0, restart_count=1, start_step=10)
    for _ in range(3):
        rep.step_done()
    rep.write("checkpointed")
    data = json.loads((tmp_path / "9.json").read_text())
    assert data["format"] == FORMAT and data["job_id"] == "9" and data["job_type"] == "A3C"
    assert data["steps"] == 13 and data["run_steps"] == 3 and data["restart_count"] == 1
    assert data["state"] == "checkpointed" and data["steps_per_s"] > 0
    assert set(data) == {
        "format",
        "job_id",
        "job_type",
        "steps",
        "steps_per_s",
        "run_steps",
        "restart_count",
        "state",
        "hostname",
        "gpu",
        "updated",
    }
    assert read_report(tmp_path / "9.json") == data
    assert [p.name for p in tmp_path.iterdir()] == ["9.json"]


def test_rate_is_unknown_until_two_steps_are_timed(tmp_path: Path) -> None:
    rep = ProgressReporter("9", None, tmp_path, interval=3600)
    rep.step_done()
    assert rep.steps_per_s() is None
    assert not (tmp_path / "9.json").exists() or read_report(tmp_path / "9.json") is not None


def test_no_folder_writes_nothing(tmp_path: Path) -> None:
    rep = ProgressReporter("9", None, None, interval=0.0)
    rep.step_done()
    rep.write("finished")
    assert read_report(tmp_path / "9.json") is None
