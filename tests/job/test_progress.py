"""Progress reports in the spool folder."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from waiting import returns_within

from slurm_gavel.job.progress import (
    FORMAT,
    REPORT_MAX_BYTES,
    ProgressReporter,
    ReportRefused,
    open_report,
    read_report,
    report_path,
)


def _user_dir(spool: Path) -> Path:
    """What the daemon makes for this user: <spool>/<uid>, 2750, the user's."""
    mine = spool / str(os.geteuid())
    mine.mkdir(mode=0o2750)
    return mine


def test_report_file_is_written_atomically_with_the_documented_fields(tmp_path: Path) -> None:
    mine = _user_dir(tmp_path)
    rep = ProgressReporter("9", "A3C", tmp_path, interval=0.0, restart_count=1, start_step=10)
    for _ in range(3):
        rep.step_done()
    rep.write("checkpointed")
    assert report_path(tmp_path, "9") == mine / "9.json"
    assert stat.S_IMODE((mine / "9.json").stat().st_mode) == 0o640  # the daemon's group reads
    data = json.loads((mine / "9.json").read_text())
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
        "partner",
        "state",
        "hostname",
        "gpu",
        "updated",
    }
    assert read_report(mine / "9.json", owner=os.geteuid()) == data
    assert [p.name for p in mine.iterdir()] == ["9.json"]


def test_a_new_partner_restarts_the_rate_window_and_is_reported(tmp_path: Path) -> None:
    mine = _user_dir(tmp_path)
    clock = [100.0]
    rep = ProgressReporter("9", "A3C", tmp_path, interval=3600)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("slurm_gavel.job.progress.time.monotonic", lambda: clock[0])
        rep.step_done()  # the first (warm-up) step ends the timing start
        for _ in range(10):  # alone: 10 steps/s
            clock[0] += 0.1
            rep.step_done()
        assert rep.steps_per_s() == pytest.approx(10.0)
        rep.set_partner("12")
        for _ in range(4):  # shared: 2 steps/s
            clock[0] += 0.5
            rep.step_done()
        assert rep.steps_per_s() == pytest.approx(2.0)  # not a mix with the alone time
        rep.set_partner("12")  # the same partner again: the window goes on
        assert rep.steps_per_s() == pytest.approx(2.0)
        rep.write("running")
    assert json.loads((mine / "9.json").read_text())["partner"] == "12"
    rep.set_partner(None)
    assert rep.steps_per_s() is None  # nothing timed alone yet


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


# ---- hostile spool ------------------------------------------------------------


@pytest.mark.hostile
def test_reading_a_fifo_symlink_device_or_huge_file_gives_none_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    os.mknod(tmp_path / "dev.json", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
    with open(tmp_path / "huge.json", "wb") as f:
        f.truncate(REPORT_MAX_BYTES + 1)
    for name in ("fifo.json", "zero.json", "dev.json", "huge.json"):
        assert returns_within(20, lambda n=name: read_report(tmp_path / n), name) is None, name
        with pytest.raises(ReportRefused):
            open_report(str(tmp_path / name))


@pytest.mark.hostile
def test_a_report_of_another_owner_or_with_nan_is_refused(tmp_path: Path) -> None:
    mine = _user_dir(tmp_path)
    rep = ProgressReporter("9", "A3C", tmp_path, interval=0.0)
    rep.step_done()
    rep.write("running")
    path = mine / "9.json"
    assert read_report(path, owner=os.geteuid()) is not None
    os.chown(path, 65534, 65534)
    with pytest.raises(ReportRefused, match="owned by uid 65534"):
        open_report(str(path), owner=os.geteuid())
    path.write_text(path.read_text().replace('"steps": 1', '"steps": NaN'))
    with pytest.raises(ReportRefused, match="not JSON"):
        open_report(str(path))


@pytest.mark.parametrize("folder", ["another-users", "group-writable", "symlink"])
@pytest.mark.hostile
def test_the_job_writes_only_into_its_own_private_folder(
    tmp_path: Path, folder: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / str(os.geteuid())
    if folder == "symlink":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        mine.symlink_to(elsewhere)
    else:
        mine.mkdir(mode=0o750)
        if folder == "another-users":
            os.chown(mine, 65534, 65534)
        else:
            mine.chmod(0o770)
    rep = ProgressReporter("9", "A3C", tmp_path, interval=0.0)
    rep.write("running")
    rep.write("running")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == []
    err = capsys.readouterr().err
    assert err.count("no progress report") == 1  # said once, not every step
