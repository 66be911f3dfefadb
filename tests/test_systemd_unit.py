"""The shipped systemd unit: least privilege, measured with systemd-analyze.

`systemd-analyze security --offline=true` rates a unit file without loading it
into a running systemd (this machine's PID 1 is not systemd); the unit must rate
<= 4.0 ("OK"). The other tests pin the unit to the files and config it names:
the account, the writable paths and the capabilities the daemon really needs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_gavel.daemon.config_types import Config

CONF = Path(__file__).resolve().parent.parent / "conf"
UNIT = CONF / "systemd" / "slurm-gavel.service"
SYSUSERS = CONF / "systemd" / "slurm-gavel.sysusers"
TMPFILES = CONF / "systemd" / "slurm-gavel.tmpfiles"
MAX_EXPOSURE = 4.0


def directives(path: Path) -> dict[str, list[str]]:
    """Key -> values of every `Key=value` line (comments and sections dropped)."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def exposure(unit: Path) -> float:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip(
            "systemd-analyze is not installed, so the unit's exposure cannot be measured: "
            "install Debian's 'systemd' package (apt-get install systemd) and rerun"
        )
    res = subprocess.run(
        [analyze, "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", res.stdout + res.stderr)
    assert m, f"no exposure level in systemd-analyze's output:\n{res.stdout}\n{res.stderr}"
    return float(m.group(1))


def test_the_unit_rates_at_most_4_in_systemd_analyze_security():
    score = exposure(UNIT)
    print(f"systemd-analyze security: {UNIT.name} exposure {score}")
    assert score <= MAX_EXPOSURE, f"{UNIT} rates {score} (> {MAX_EXPOSURE})"


def test_a_root_unit_would_fail_the_same_check(tmp_path):
    """The measurement can fail: the unit as first shipped rated 9.0."""
    old = tmp_path / "old.service"
    old.write_text(
        "[Service]\nExecStart=/usr/local/bin/slurm-gavel run\nUser=root\n"
        "NoNewPrivileges=yes\nProtectSystem=full\nProtectHome=read-only\nPrivateTmp=yes\n"
    )
    assert exposure(old) > MAX_EXPOSURE


def test_the_daemon_runs_as_its_own_account_with_one_capability():
    d = directives(UNIT)
    assert d["User"] == ["slurm-gavel"] and d["Group"] == ["slurm-gavel"]
    assert d["NoNewPrivileges"] == ["yes"]
    assert d["ProtectSystem"] == ["strict"]
    caps = set(d["CapabilityBoundingSet"][0].split())
    # chown: hand a new spool folder to its user (daemon/spool.py); the daemon reads it
    # through the folder's group, so no CAP_DAC_* to read or write around file modes.
    assert caps == {"CAP_CHOWN"}
    assert set(d["AmbientCapabilities"][0].split()) == caps
    assert set(d["RestrictAddressFamilies"][0].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    # sysusers creates the account the unit names.
    sysusers = [ln.split() for ln in SYSUSERS.read_text().splitlines() if ln.startswith("u ")]
    assert [fields[1] for fields in sysusers] == ["slurm-gavel"]


def test_the_unit_can_write_where_the_default_config_writes():
    d = directives(UNIT)
    state_dir = Config(partitions=("gpu",)).state_dir
    assert Path("/var/lib") / d["StateDirectory"][0] == state_dir
    # conf/gavel.yaml's suggested progress_dir lies under a writable path, which the
    # tmpfiles snippet creates owned by the daemon (not writable by users).
    suggested = re.search(r"progress_dir: (\S+)", (CONF / "gavel.yaml").read_text())
    assert suggested, "conf/gavel.yaml no longer suggests a progress_dir"
    writable = [p.lstrip("-") for p in d["ReadWritePaths"][0].split()]
    assert any(Path(suggested.group(1)).is_relative_to(p) for p in writable)
    made = {ln.split()[1]: ln.split() for ln in TMPFILES.read_text().splitlines() if ln[:2] == "d "}
    assert made[suggested.group(1)][2:5] == ["0755", "slurm-gavel", "slurm-gavel"]


def test_reload_sends_the_signal_the_daemon_reloads_on():
    """`systemctl reload` must send SIGHUP (run.py's reload handler), to the main
    process, and SIGTERM must stay the stop signal (a clean end after the round)."""
    d = directives(UNIT)
    assert d["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert d["KillSignal"] == ["SIGTERM"]
    run_py = (Path(__file__).resolve().parent.parent / "slurm_gavel/commands/run.py").read_text()
    assert "signal.SIGHUP, on_hangup" in run_py
