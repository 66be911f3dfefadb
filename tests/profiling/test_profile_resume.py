"""`slurm-gavel profile` saves each measurement as it completes and resumes: a failed
worker, Ctrl-C or a damaged record loses nothing, and a rerun measures only the rest.

The workers here are a stand-in script (no torch, milliseconds each) behind the real
process handling of slurm_gavel.profiling.profiler; tests/profiling/test_profiler.py runs the real
workloads (tiny, on CPU)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from slurm_gavel.cli import main
from slurm_gavel.commands import profile as profile_cmd
from slurm_gavel.commands.profile import default_types
from slurm_gavel.commands.progress_line import Progress
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.profiling import profiler

TYPES = ["A3C", "CycleGAN", "LM (batch size 5)", "ResNet-18 (batch size 16)"]

FAKE_WORKER = """
import argparse, json, pathlib, sys
p = argparse.ArgumentParser()
p.add_argument("--job-type"); p.add_argument("--sync-dir"); p.add_argument("--slot")
a, _ = p.parse_known_args()
here = pathlib.Path(sys.argv[0]).parent
fail = here / "fail-on"
if fail.exists() and fail.read_text() == a.job_type:
    sys.exit("RuntimeError: CUDA error: out of memory")
with open(here / "measured.log", "a") as f:
    f.write(a.job_type + "\\n")
if a.sync_dir:
    (pathlib.Path(a.sync_dir) / f"ready-{a.slot}").touch()
print(json.dumps({"steps_per_s": len(a.job_type) / 10, "steps": 5}))
"""


class Workers:
    def __init__(self, d: Path) -> None:
        self.dir = d
        (d / "worker.py").write_text(FAKE_WORKER)

    def fail_on(self, job_type: str | None) -> None:
        f = self.dir / "fail-on"
        f.unlink(missing_ok=True)
        if job_type is not None:
            f.write_text(job_type)

    def measured(self) -> list[str]:
        log = self.dir / "measured.log"
        lines = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return lines


@pytest.fixture
def workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workers:
    d = tmp_path / "workers"
    d.mkdir()
    w = Workers(d)

    def cmd(job_type: str, seconds: float, device: str, tiny: bool) -> list[str]:
        return [sys.executable, "-u", str(d / "worker.py"), "--job-type", job_type]

    monkeypatch.setattr(profiler, "_worker_cmd", cmd)
    return w


def profile(tmp_path: Path, *extra: str, types: list[str] = TYPES) -> int:
    out = tmp_path / "table.json"
    return main(["profile", "--device", "cpu", "--out", str(out), "--types", *types, *extra])


def record(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "table.profile.json").read_text())


def test_default_set_is_one_type_per_family_at_its_smallest_batch():
    chosen = default_types(load_table().job_types)
    assert chosen == [
        "ResNet-18 (batch size 16)", "ResNet-50 (batch size 16)", "Transformer (batch size 16)",
        "A3C", "LM (batch size 5)", "Recommendation (batch size 512)", "CycleGAN",
    ]  # fmt: skip


def test_one_progress_line_per_measurement_with_an_eta(tmp_path, workers, capsys):
    assert profile(tmp_path, "--pairs", types=TYPES[:2]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err  # not a terminal: plain lines
    lines = [ln for ln in err.splitlines() if ln.startswith("[")]
    assert [ln.split("]")[0] for ln in lines] == [f"[{i}/5" for i in range(1, 6)]
    assert all("; ETA " in ln for ln in lines) and lines[-1].endswith("ETA 0:00:00")
    assert lines[2].startswith("[3/5] A3C + A3C: 0.300 + 0.300 steps/s in ")
    table = load_table(tmp_path / "table.json")
    assert table.alone[("CycleGAN", 1)]["cpu"] == pytest.approx(0.8)
    assert table.pair("A3C", "CycleGAN", 1, "cpu") == pytest.approx((0.3, 0.8))
    assert len(record(tmp_path)["measurements"]) == 5


def test_a_failed_worker_loses_nothing_and_the_rerun_measures_only_the_rest(
    tmp_path, workers, capsys
):
    workers.fail_on(TYPES[2])
    assert profile(tmp_path) == 2
    err = capsys.readouterr().err
    assert "CUDA error: out of memory" in err
    assert "2 of 4 measurement(s) kept in" in err and "rerun the same command" in err
    assert workers.measured() == TYPES[:2]
    assert [m["job_type"] for m in record(tmp_path)["measurements"]] == TYPES[:2]
    assert not (tmp_path / "table.json").exists()  # the table only once complete
    workers.fail_on(None)
    assert profile(tmp_path) == 0
    assert workers.measured() == TYPES[2:]
    assert "4 measurement(s), 2 already in" in capsys.readouterr().err
    table = load_table(tmp_path / "table.json")
    assert {t: table.alone[(t, 1)]["cpu"] for t in TYPES} == {t: len(t) / 10 for t in TYPES}
    assert profile(tmp_path) == 0  # all measured: the same command measures nothing
    assert workers.measured() == []


def test_ctrl_c_keeps_what_was_measured(tmp_path, workers, capsys, monkeypatch):
    calls = []

    def measure(cell, **kw):
        calls.append(cell)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return profiler.measure(cell, **kw)

    monkeypatch.setattr(profile_cmd, "measure", measure)
    assert profile(tmp_path) == 130
    assert "interrupted; 2 of 4 measurement(s) kept" in capsys.readouterr().err
    monkeypatch.setattr(profile_cmd, "measure", profiler.measure)
    workers.measured()
    assert profile(tmp_path) == 0
    assert workers.measured() == TYPES[2:]


def test_a_changed_setup_is_refused_and_the_record_kept(tmp_path, workers, capsys):
    workers.fail_on(TYPES[3])
    assert profile(tmp_path) == 2
    workers.fail_on(None)
    before = (tmp_path / "table.profile.json").read_bytes()
    capsys.readouterr()
    assert profile(tmp_path, "--seconds", "5") == 2
    err = capsys.readouterr().err
    assert "another set-up (seconds: 10.0 there, 5.0 now)" in err and "--fresh" in err
    assert profile(tmp_path, types=TYPES[:2]) == 2
    assert "types: " in capsys.readouterr().err
    assert (tmp_path / "table.profile.json").read_bytes() == before
    assert workers.measured() == TYPES[:3]  # the first run's; none since
    assert profile(tmp_path, "--seconds", "5", "--fresh") == 0
    assert workers.measured() == TYPES


def test_the_record_goes_beside_a_table_in_a_new_folder(tmp_path, workers):
    out = tmp_path / "new" / "t.json"
    assert main(["profile", "--device", "cpu", "--out", str(out), "--types", "A3C"]) == 0
    assert (tmp_path / "new" / "t.profile.json").exists() and out.exists()


def test_resume_needs_a_record(tmp_path, workers, capsys):
    assert profile(tmp_path, "--resume") == 2
    assert "there is no" in capsys.readouterr().err and workers.measured() == []


def _row(**kw: object) -> dict:
    row = {"job_type": "A3C", "scale_factor": 1, "partner": None, "steps_per_s": 0.3,
           "steps": 5, "partner_steps_per_s": None, "seconds": 1.0}  # fmt: skip
    return {**row, **kw}


def _doc(*rows: dict, **top: object) -> bytes:
    setup = {"device_name": "cpu", "gpu_type": "cpu", "device": "cpu", "seconds": 10.0,
             "scale_factors": [1], "types": TYPES, "pairs": False, "tiny": False}  # fmt: skip
    doc = {"format": "slurm-gavel-profile/1", "setup": setup, "measurements": list(rows)}
    return json.dumps({**doc, **top}).encode()


HOSTILE = {
    "not json": (b"{not json", "damaged JSON"),
    "truncated": (_doc(_row())[:-20], "damaged JSON"),
    "not utf-8": (b"\xff\xfe{}", "damaged JSON"),
    "empty": (b"", "damaged JSON"),
    "other format": (b'{"format": "slurm-gavel-throughputs/1"}', "not a profile record"),
    "a list": (b"[1, 2]", "not a profile record"),
    "NaN rate": (_doc(_row()).replace(b"0.3", b"NaN"), "NaN is not a number"),
    "Infinity rate": (_doc(_row()).replace(b"0.3", b"-Infinity"), "Infinity is not a number"),
    "overflowing rate": (_doc(_row()).replace(b"0.3", b"1e999"), "inf is not a finite number"),
    "negative rate": (_doc(_row(steps_per_s=-1.0)), "not a finite number >= 0"),
    "text rate": (_doc(_row(steps_per_s="fast")), "not a finite number"),
    "boolean rate": (_doc(_row(steps_per_s=True)), "not a finite number"),
    "scale factor 0": (_doc(_row(scale_factor=0)), "not a whole number 1-1024"),
    "scale factor 1.5": (_doc(_row(scale_factor=1.5)), "not a whole number 1-1024"),
    "negative steps": (_doc(_row(steps=-3)), "steps -3"),
    "extra field": (_doc({**_row(), "cmd": "rm -rf /"}), "expected an object with the fields"),
    "missing field": (_doc({k: v for k, v in _row().items() if k != "steps"}), "fields"),
    "twice": (_doc(_row(), _row()), "appears twice"),
    "not in the plan": (_doc(_row(job_type="VGG-16")), "is not one this set-up measures"),
    "escape in a type": (_doc(_row(job_type="\x1b[2J\x1b[31mA3C")), "not one this set-up"),
    "pair without rate": (_doc(_row(partner="A3C")), "go together"),
    "setup not an object": (_doc(setup=[1]), "'setup' is not an object"),
    "unknown setup key": (_doc(setup={"seconds": 10.0, "x\x1b": 1}), "not a set-up field"),
}
HOSTILE["rows not a list"] = (_doc(measurements={"a": 1}), "'measurements' is not a list")


@pytest.mark.hostile
@pytest.mark.parametrize("name", [*HOSTILE, "over 16 MiB"])
def test_a_damaged_or_hostile_record_is_refused_and_kept(name, tmp_path, workers, capsys):
    data, needle = HOSTILE.get(name, (b" " * (16 << 20) + b"{}", "over 16 MiB"))
    path = tmp_path / "table.profile.json"
    path.write_bytes(data)
    assert profile(tmp_path) == 2
    err = capsys.readouterr().err
    assert needle in err and str(path) in err and "--fresh" in err
    assert "\x1b" not in err and len(err) < 2000
    assert path.read_bytes() == data  # nothing lost
    assert workers.measured() == [] and not (tmp_path / "table.json").exists()


def test_a_record_that_is_fine_is_resumed(tmp_path, workers, capsys):
    (tmp_path / "table.profile.json").write_bytes(_doc(_row(steps_per_s=7.0)))
    assert profile(tmp_path) == 0
    assert workers.measured() == TYPES[1:]
    assert load_table(tmp_path / "table.json").alone[("A3C", 1)]["cpu"] == 7.0


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_measurement_under_way_is_shown_in_place():
    term = Terminal()
    p = Progress(4, 2, [10.0, 20.0], stream=term)  # two recorded: 15 s each so far
    assert p.eta() == "0:00:30"
    p.start("A3C x1")
    assert term.getvalue() == "\r\x1b[K[3/4] measuring A3C x1...; ETA 0:00:30"
    p.done("A3C x1", "0.300 steps/s (5 steps)", 30.0)
    assert term.getvalue().endswith(
        "\r\x1b[K[3/4] A3C x1: 0.300 steps/s (5 steps) in 30.0 s; ETA 0:00:20\n"
    )
    p.start("\x1b]0;owned\x07CycleGAN x1")  # a type name is shown, never obeyed
    assert "\x1b]" not in term.getvalue() and "\\x1b]0;owned" in term.getvalue()
