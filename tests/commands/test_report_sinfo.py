"""`slurm-gavel report`'s GPU capacity from sinfo, through the backends' command runner
(kind "sinfo"): retried while slurmctld is unreachable; empty, as before, when sinfo is
missing, fails or is too slow (the table then says to pass --capacity)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli.commands import SlurmCommands
from slurm_gavel.commands.report import sinfo_capacity

# sinfo -h -N -o '%N|%G' of a cluster whose node v100-1 sits in two partitions
LISTED = """v100-1|gpu:v100:4(S:0-1),shard:v100:8(S:0-1)
v100-1|gpu:v100:4(S:0-1),shard:v100:8(S:0-1)
k80-1|gpu:k80:2(S:0)
plain-1|gpu:2
cpu-1|(null)
"""


def fake_sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    log = tmp_path / "calls.log"
    script = tmp_path / "sinfo"
    script.write_text(
        f"#!{sys.executable}\nimport sys, time\n"
        f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n" + body
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return log


def runner(**kw: float) -> tuple[SlurmCommands, list[float]]:
    sleeps: list[float] = []
    return SlurmCommands(sleep=sleeps.append, **kw), sleeps  # type: ignore[arg-type]


def test_gpus_per_type_each_node_once(tmp_path, monkeypatch):
    log = fake_sinfo(tmp_path, monkeypatch, f"sys.stdout.write({LISTED!r})\n")
    commands, _ = runner()
    assert sinfo_capacity(commands) == {"v100": 4, "k80": 2}  # untyped GPUs not counted
    assert log.read_text() == "-h -N -o %N|%G\n" and dict(commands.counts) == {"sinfo": 1}


def test_unreachable_slurmctld_is_retried_then_nothing(tmp_path, monkeypatch):
    fake_sinfo(
        tmp_path,
        monkeypatch,
        "sys.stderr.write('sinfo: error: Unable to contact slurm controller\\n')\nsys.exit(1)\n",
    )
    commands, sleeps = runner(retries=2)
    assert sinfo_capacity(commands) == {}
    assert commands.counts["sinfo"] == 3 and len(sleeps) == 2


@pytest.mark.parametrize(
    "body, kw",
    [
        ("sys.stderr.write('sinfo: error: bad\\n')\nsys.exit(1)\n", {}),  # fails
        ("time.sleep(30)\n", {"timeout": 0.5}),  # too slow: not retried
    ],
)
def test_a_failing_or_slow_sinfo_gives_nothing(tmp_path, monkeypatch, body, kw):
    fake_sinfo(tmp_path, monkeypatch, body)
    commands, sleeps = runner(**kw)
    assert sinfo_capacity(commands) == {} and sleeps == [] and commands.counts["sinfo"] == 1


def test_a_missing_sinfo_gives_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert sinfo_capacity() == {}
