"""`sacct` run through the backends' command runner (SlurmCommands): argument lists, a
timeout, retries while slurmdbd is unreachable, a count under kind "sacct"; and the
errors `trace from-sacct` and `report` print stay clear (sacct missing, slurmdbd down,
too slow). Fake sacct scripts on PATH stand in for Slurm's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from slurm_gavel.accounting.sacct import SacctError, query
from slurm_gavel.backends.slurm.cli.commands import SlurmCommands
from slurm_gavel.cli import main

DATA = Path(__file__).parents[1] / "data" / "sacct"


def fake_sacct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """A sacct on PATH running `body` (Python, with args and env); its calls logged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    script = bin_dir / "sacct"
    script.write_text(
        f"#!{sys.executable}\nimport os, sys, time\nargs = sys.argv[1:]\n"
        f"open({str(log)!r}, 'a').write(' '.join(args) + '|' + "
        "os.environ.get('SLURM_TIME_FORMAT', '') + '\\n')\n" + body
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")  # an admin's shell setting
    return log


def runner(**kw: float) -> tuple[SlurmCommands, list[float]]:
    sleeps: list[float] = []
    return SlurmCommands(sleep=sleeps.append, **kw), sleeps  # type: ignore[arg-type]


def test_json_through_the_runner_counted_as_sacct(tmp_path, monkeypatch):
    capture = DATA / "24.11" / "sacct.json"
    log = fake_sacct(tmp_path, monkeypatch, f"sys.stdout.write(open({str(capture)!r}).read())\n")
    commands, _ = runner()
    runs, bad, form = query("now-1day", partitions=["gpu"], commands=commands)
    assert form == "json" and bad == 0 and len(runs) > 11
    assert dict(commands.counts) == {"sacct": 1}
    (call,) = log.read_text().splitlines()
    # -P's times are parsed as sacct's standard form, whatever the caller's shell set
    # (and not the runner's epoch seconds, which the job listing asks for)
    assert call == "-a -X -D -S now-1day -r gpu --json|standard"


def test_a_missing_sacct_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SacctError, match=r"sacct is not installed \(Debian: slurm-client\)"):
        query("now-1day", commands=runner()[0])


def test_a_down_slurmdbd_is_retried_then_named(tmp_path, monkeypatch):
    log = fake_sacct(
        tmp_path,
        monkeypatch,
        "sys.stderr.write('sacct: error: Sending PersistInit msg: Connection refused\\n"
        "sacct: error: Problem talking to the database: Connection refused\\n')\n"
        "sys.exit(1)\n",
    )
    commands, sleeps = runner(retries=2, backoff=0.5)
    with pytest.raises(SacctError) as e:
        query("now-1day", commands=commands)
    assert str(e.value) == (
        "sacct could not reach slurmdbd after 3 tries (sacct: error: Problem talking to "
        "the database: Connection refused); is slurmdbd running and "
        "AccountingStorageType=accounting_storage/slurmdbd in slurm.conf?"
    )
    assert sleeps == [0.5, 1.0] and commands.counts["sacct"] == 3
    assert len(log.read_text().splitlines()) == 3  # no -P after: it would fail alike


def test_a_failing_sacct_falls_back_to_parsable_then_says_why(tmp_path, monkeypatch):
    fake_sacct(tmp_path, monkeypatch, "sys.stderr.write('sacct: fatal: bad\\n')\nsys.exit(1)\n")
    commands, sleeps = runner()
    with pytest.raises(SacctError, match=r"sacct failed \(1\): sacct: fatal: bad; is slurmdbd"):
        query("now-1day", commands=commands)
    assert sleeps == [] and commands.counts["sacct"] == 2  # --json, then -P


def test_a_slow_sacct_is_not_retried(tmp_path, monkeypatch):
    fake_sacct(tmp_path, monkeypatch, "time.sleep(30)\n")
    commands, sleeps = runner(timeout=0.5)
    with pytest.raises(SacctError, match=r"sacct took over 0 s .*narrow --since/--until"):
        query("now-1day", commands=commands)
    assert sleeps == [] and commands.counts["sacct"] == 1


def test_the_commands_print_the_error_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["report", "--capacity", "v100=1"]) == 2
    assert "sacct is not installed" in capsys.readouterr().err
    assert main(["trace", "from-sacct", "-o", str(tmp_path / "t.csv")]) == 2
    assert "sacct is not installed" in capsys.readouterr().err


def test_report_from_a_live_sacct_prints_what_the_saved_file_prints(tmp_path, monkeypatch, capsys):
    capture = DATA / "26.05" / "sacct.json"
    fake_sacct(tmp_path, monkeypatch, f"sys.stdout.write(open({str(capture)!r}).read())\n")
    cap = ["--capacity", "v100=2,p100=2,k80=2", "--json"]
    assert main(["report", *cap]) == 0
    live = json.loads(capsys.readouterr().out)
    assert main(["report", "--input", str(capture), *cap]) == 0
    saved = json.loads(capsys.readouterr().out)
    assert live["groups"] == saved["groups"] and live["jobs"] == saved["jobs"]
