"""Two hostile users against the daemon on the real local cluster.

Two unprivileged accounts submit managed jobs and, while the daemon schedules them
(as root here: the local cluster's SlurmUser), try what the issue reproduced: raise
their weight at submit and afterwards, turn a job managed or unmanaged by editing its
comment, release their own held jobs, near-miss comments (' gavel:', hex, inf), and in
the progress spool: FIFOs, symlinks to /dev/zero, huge files, reports for the other
user's jobs, 1e12 steps/s, NaN and inf, future times, made-up job types, writing into
the other user's folder. One run (module fixture, about two minutes) feeds five
checks, each counted in the hostile-input figure by what it guards:

* crash: the daemon never died, logged no traceback and no internal round failure;
* hang: every round finished within round_seconds, and none was skipped;
* escalation: every submission above the weight cap was refused, every comment edit
  was refused, and the throughput table the daemon learned stays within bounds;
* stranded: every job Slurm accepted completed (none left held).
"""

from __future__ import annotations

import itertools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from test_least_privilege import RUNUSER, ensure_user

from slurm_gavel.core.estimate import MAX_DRIFT
from slurm_gavel.domain.throughputs import load_table

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.slurm_release("22.05")]

REPO = Path(__file__).resolve().parents[2]
USERS = ("gavel-hostile-1", "gavel-hostile-2")
ROUND_S = 5.0
JOB_STEPS = 30  # seconds of work per job
MIN_ATTACK_S = 50.0  # attack for at least this long, jobs or not
JOBS_PER_USER = 4
TYPES = ("A3C", "ResNet-50 (batch size 64)")

# A managed job: one step a second, checkpoint on USR1 and exit 99, resume from it.
JOB = r"""#!/bin/bash
ckpt="$1/$SLURM_JOB_ID.ckpt"; steps="$2"; step=0
[ -f "$ckpt" ] && step=$(cat "$ckpt")
trap '[ "$step" -ge "$steps" ] && exit 0; echo "$step" > "$ckpt"; exit 99' USR1
while [ "$step" -lt "$steps" ]; do sleep 1 & wait $!; step=$((step + 1)); done
"""

# Submissions the Lua (job_submit.lua) must refuse: each would raise the user's share,
# or be held by the Lua and then refused by the daemon (a job stranded forever).
REFUSED_COMMENTS = [
    "gavel:type=A3C,weight=1000",
    "gavel:type=A3C,weight=1.5",
    "gavel:type=A3C,weight=inf",
    "gavel:type=A3C,weight=1e3",
    "gavel:type=A3C,weight=0x10",
    "gavel:type=A3C,scale=0x10",
    "gavel:type=A3C,scale=1e0",
    "gavel:type=A3C,scale=-1",
    " gavel:type=A3C",
    "gavel: type=A3C",
    "GAVEL:type=A3C",
    "gavel:type=A3C,,weight=9",
    "gavel:type=A3C,weight=9,weight=0.5",
    "gavel:type=" + "A" * 300,
    "gavel:type=A3C\x1b[2J",
]

# Run as a hostile user: every spool attack in the user's own folder and the other's.
SPOOL_ATTACKS = r"""
import json, os, sys, time
own, other, own_jobs, other_jobs, root = sys.argv[1:6]
own_jobs, other_jobs = own_jobs.split(","), other_jobs.split(",")
tried, allowed = 0, []
def attempt(name, fn):
    global tried
    tried += 1
    try:
        fn()
        return True
    except OSError:
        return False
def write(path, data, mode="w"):
    tmp = path + ".tmp"
    with open(tmp, mode) as f:
        f.write(data)
    os.replace(tmp, path)
def report(jid, **over):
    doc = {"format": "slurm-gavel-progress/1", "job_id": jid, "job_type": "A3C",
           "steps": 3, "steps_per_s": 1.0, "run_steps": 3, "restart_count": 0,
           "state": "running", "hostname": "v100-1", "gpu": "cpu", "updated": time.time()}
    doc.update(over)
    return json.dumps(doc)
def replace_with(path, make):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    make(path)
j = lambda job: os.path.join(own, job + ".json")
a, b = own_jobs[0], own_jobs[1 % len(own_jobs)]
attempt("fifo", lambda: replace_with(j(a), os.mkfifo))
attempt("dev-zero", lambda: replace_with(j(b), lambda p: os.symlink("/dev/zero", p)))
for job in own_jobs[2:]:
    attempt("huge", lambda: write(j(job), "x" * (8 << 20)))
for job in other_jobs:  # reports for the other user's jobs, in one's own folder
    attempt("foreign", lambda: write(j(job), report(job, steps_per_s=1e12)))
for job in own_jobs[:2]:
    for over in ({"steps_per_s": 1e12}, {"steps_per_s": 1e-12}, {"updated": time.time() + 86400},
                 {"job_type": "Made-up (batch size 1)"}, {"job_id": other_jobs[0]},
                 {"steps": -5}, {"restart_count": 10**18}):
        attempt("forged", lambda: write(j(job) + ".forged", report(job, **over)))
        attempt("forged", lambda: os.replace(j(job) + ".forged", j(job)))
    for raw in ('Infinity', 'NaN', '1e999', '"fast"'):
        text = report(job).replace('"steps_per_s": 1.0', '"steps_per_s": ' + raw)
        attempt("nonfinite", lambda: write(j(job), text))
# Other users' folders and the spool root: must not be writable.
for target in (os.path.join(other, own_jobs[0] + ".json"), os.path.join(root, "planted"),
               os.path.join(root, str(os.getuid() + 1))):
    if attempt("intrude", lambda: write(target, report(own_jobs[0], steps_per_s=1e12))):
        allowed.append(target)
print(json.dumps({"tried": tried, "allowed": allowed}))
"""


@dataclass
class HostileRun:
    events: list[dict[str, Any]]
    daemon_rc: int | None
    non_json: list[str]
    refused: dict[str, list[str]] = field(default_factory=dict)  # user -> comments refused
    accepted_bad: list[str] = field(default_factory=list)  # hostile submissions Slurm took
    edits_allowed: list[str] = field(default_factory=list)
    spool_allowed: list[str] = field(default_factory=list)
    final_states: dict[str, str] = field(default_factory=dict)
    learned: dict[str, Any] | None = None
    state_text: str = ""
    tried: int = 0
    spool_rounds: int = 0  # rounds of spool attacks (once the daemon made the folders)


def as_user(slurm, user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", **slurm.env}
    return subprocess.run(
        [RUNUSER, "-u", user, "--", *argv], capture_output=True, text=True, env=env, timeout=60
    )


def submit(slurm, user: str, home: Path, comment: str) -> subprocess.CompletedProcess[str]:
    return as_user(
        slurm, user, "sbatch", "--parsable", "-D", str(home), "-o", "/dev/null", "-p", "gpu",
        f"--comment={comment}", str(home / "job.sh"), str(home), str(JOB_STEPS),
    )  # fmt: skip


@pytest.fixture(scope="module")
def hostile_run(slurm_session) -> Iterator[HostileRun]:
    slurm = slurm_session
    slurm.cancel_all()
    if not shutil.which("useradd"):
        pytest.fail("useradd is needed to create the hostile users (Debian: passwd)")
    users = [ensure_user(u) for u in USERS]
    site = Path(tempfile.mkdtemp(prefix="gavel-hostile-", dir="/tmp"))
    os.chmod(site, 0o755)
    spool = site / "progress"
    spool.mkdir(mode=0o755)
    homes = {}
    for u in users:
        home = site / u.pw_name
        home.mkdir(mode=0o700)
        (home / "job.sh").write_text(JOB)
        os.chmod(home / "job.sh", 0o755)
        os.chown(home, u.pw_uid, u.pw_gid)
        homes[u.pw_name] = home
    cfg = site / "gavel.yaml"
    cfg.write_text(
        f"round_seconds: {ROUND_S}\npartitions: [gpu]\ncheckpoint: {{grace_seconds: 3}}\n"
        f"state_dir: {site / 'state'}\nprogress_dir: {spool}\nlog_format: json\n"
        "slurm: {command_timeout_seconds: 10, retry_initial_seconds: 0.5, "
        "retry_max_seconds: 2}\n"
    )
    log_path = site / "daemon.log"
    with open(log_path, "ab") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "slurm_gavel", "run", "--config", str(cfg)],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **slurm.env},
        )  # fmt: skip
    run = HostileRun(events=[], daemon_rc=None, non_json=[])
    try:
        run.refused = {u.pw_name: [] for u in users}
        jobs: dict[str, list[str]] = {u.pw_name: [] for u in users}
        for u in users:
            for comment in REFUSED_COMMENTS:
                res = submit(slurm, u.pw_name, homes[u.pw_name], comment)
                run.tried += 1
                if res.returncode == 0:
                    run.accepted_bad.append(f"{u.pw_name}: {comment!r}")
                else:
                    run.refused[u.pw_name].append(comment)
            for i in range(JOBS_PER_USER):
                res = submit(slurm, u.pw_name, homes[u.pw_name], f"gavel:type={TYPES[i % 2]}")
                assert res.returncode == 0, res.stderr
                jobs[u.pw_name].append(res.stdout.strip().split(";")[0])
            # a plain job the user then tries to turn into a managed one
            res = submit(slurm, u.pw_name, homes[u.pw_name], "my notes")
            assert res.returncode == 0, res.stderr
            jobs[u.pw_name].append(res.stdout.strip().split(";")[0])
        started = time.monotonic()
        deadline = started + 300
        attacks = 0
        while time.monotonic() < deadline:
            for n, u in enumerate(users):
                other = users[1 - n]
                mine, theirs = jobs[u.pw_name], jobs[other.pw_name]
                if attacks < 3:  # comment edits and releases, a few rounds in a row
                    for k, job in enumerate(mine):
                        managed = k < JOBS_PER_USER  # the last one is the plain job
                        for argv in (
                            ["scontrol", "update", f"JobId={job}",
                             "Comment=gavel:type=A3C,weight=1000"],
                            ["scontrol", "update", f"JobId={job}", "Comment=plain now"]
                            if managed else [],
                            ["scontrol", "release", job] if managed else [],
                            # (a plain job's Slurm priority is Slurm's business, not ours)
                            ["scontrol", "update", f"JobId={job}", "Priority=100000"]
                            if managed else [],
                        ):  # fmt: skip
                            if not argv:
                                continue
                            res = as_user(slurm, u.pw_name, *argv)
                            run.tried += 1
                            if res.returncode == 0 and argv[1] == "update":
                                run.edits_allowed.append(f"{u.pw_name}: {' '.join(argv)}")
                own = spool / str(u.pw_uid)
                if own.is_dir():  # the daemon makes it once it sees a job of this user
                    res = as_user(
                        slurm, u.pw_name, f"/usr/bin/python{sys.version_info[0]}."
                        f"{sys.version_info[1]}", "-c", SPOOL_ATTACKS, str(own),
                        str(spool / str(other.pw_uid)), ",".join(mine), ",".join(theirs),
                        str(spool),
                    )  # fmt: skip
                    assert res.returncode == 0, res.stderr[-2000:]
                    out = json.loads(res.stdout)
                    run.tried += out["tried"]
                    run.spool_rounds += 1
                    run.spool_allowed += out["allowed"]
            attacks += 1
            states = slurm.cmd(
                "squeue", "-h", "-t", "all", "-o", "%i %T", check=False
            ).stdout.split("\n")
            got = dict(line.split() for line in states if line.strip())
            run.final_states = {j: got.get(j, "GONE") for ids in jobs.values() for j in ids}
            if time.monotonic() - started >= MIN_ATTACK_S and all(
                s in ("COMPLETED", "FAILED", "CANCELLED", "GONE") for s in run.final_states.values()
            ):
                break
            if daemon.poll() is not None:
                break
            time.sleep(ROUND_S / 2)
        learned = site / "state" / "throughputs-learned.json"
        run.learned = json.loads(learned.read_text()) if learned.exists() else None
        state = site / "state" / "state.json"
        run.state_text = state.read_text() if state.exists() else ""
    finally:
        run.daemon_rc = daemon.poll()
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        for line in log_path.read_text(errors="replace").splitlines():
            try:
                run.events.append(json.loads(line))
            except json.JSONDecodeError:
                run.non_json.append(line)
        slurm.cancel_all()
        shutil.rmtree(site, ignore_errors=True)
    yield run


def rounds(run: HostileRun) -> list[dict[str, Any]]:
    return [e for e in run.events if e.get("event") == "round"]


@pytest.mark.hostile(guards="crash")
def test_the_daemon_never_crashed(hostile_run, record_property):
    record_property("hostile_inputs", hostile_run.tried)
    assert hostile_run.daemon_rc is None, f"the daemon exited ({hostile_run.daemon_rc})"
    assert not hostile_run.non_json, "\n".join(hostile_run.non_json[-40:])
    failed = [e for e in hostile_run.events if e.get("event") == "round_failed"]
    assert not failed, failed[:5]
    assert len(rounds(hostile_run)) >= MIN_ATTACK_S / ROUND_S - 2


@pytest.mark.hostile(guards="hang", inputs=0)
def test_rounds_finish_in_time_under_hostile_load(hostile_run):
    done = rounds(hostile_run)
    # A hang (a FIFO read without O_NONBLOCK, a symlink to /dev/zero) is unbounded; a
    # round on a loaded 2-core CI machine takes up to ~7 s. Speed is benchmarks' job.
    slow = [e for e in done if e["duration_s"] >= 3 * ROUND_S]
    assert not slow, slow[:5]
    # No round went missing: consecutive rounds at most four round lengths apart.
    times = [datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp() for e in done]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 4 * ROUND_S + 1, gaps
    print(f"hostile load: {len(done)} rounds, longest {max(e['duration_s'] for e in done):.3f} s")


@pytest.mark.hostile(guards="escalation", inputs=0)
def test_no_user_raised_their_share(hostile_run):
    assert not hostile_run.accepted_bad, hostile_run.accepted_bad
    assert not hostile_run.edits_allowed, hostile_run.edits_allowed
    assert not hostile_run.spool_allowed, hostile_run.spool_allowed
    assert hostile_run.spool_rounds >= 2, "the daemon made no spool folder per user"
    capped = [e for e in hostile_run.events if e.get("event") == "weight_capped"]
    assert not capped, capped  # nothing above the cap even reached the daemon


@pytest.mark.hostile(guards="escalation", inputs=0)
def test_forged_progress_leaves_the_table_within_bounds(hostile_run):
    # No NaN or inf saved for good, no made-up row, in the state or the learned table.
    assert hostile_run.state_text, "the daemon saved no state"
    for text in (hostile_run.state_text, json.dumps(hostile_run.learned)):
        assert "NaN" not in text and "Infinity" not in text
        assert "Made-up (batch size 1)" not in text
    if hostile_run.learned is None:
        return  # nothing was learned: the configured table stands as it was
    base = load_table()
    for job_type, by_scale in hostile_run.learned["throughputs"].items():
        for scale, cells in by_scale.items():
            ref_row = base.row(job_type, int(scale)) if base.has(job_type, int(scale)) else {}
            for gpu, value in cells.items():
                ref = ref_row.get(gpu)
                if ref:
                    assert ref / MAX_DRIFT <= value <= ref * MAX_DRIFT, (job_type, gpu, value, ref)


@pytest.mark.hostile(guards="stranded", inputs=0)
def test_no_job_is_stranded(hostile_run):
    stuck = {j: s for j, s in hostile_run.final_states.items() if s != "COMPLETED"}
    assert not stuck, stuck
    assert pwd.getpwnam(USERS[0])  # the users stay for the next run (useradd is slow)
