"""Active/standby daemons (`ha:`) end to end on the real local Slurm cluster.

Two `slurm-gavel run` processes share one state directory, as two hosts would share
one on the storage of slurmctld's StateSaveLocation; each has its own log (and its
own metrics port: on one host two daemons cannot share one). A scenario fails the
leader (or the standby) while about ten checkpointing jobs preempt one another, and
then checks what a failover must keep:

* every job COMPLETED with every step done: each run but the last ended by the
  checkpoint signal, each resumed where the one before checkpointed (no job left
  requeue-held, none started without a placement: the Lua holds every job);
* no job signalled twice in one run, across both daemons' `action` events (each logs
  every action batch with its generation before sending it);
* no action by a deposed leader: none logged by it after it resumed;
* the new leader took over within the lease plus a round of the failure, and started
  from the saved accounting (no job's received time went backwards).

CI runs two short scenarios per release (the leader killed, the leader paused past its
lease). `SLURM_GAVEL_FAILOVER_REPEATS=20` runs each of the four scenarios that many
times with seeded timings (test_failover_repeated; its results go to the JSON file
named by SLURM_GAVEL_FAILOVER_OUT): the numbers in benchmarks/README.md come from it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_for

from tests.integration.conftest import DaemonProcess, Scenario, new_scenario
from tests.integration.test_daemon_on_slurm import (
    BIG_V100_SPEEDUP,
    SMALL_V100_SPEEDUP,
    V100_SLOWER,
    assert_checkpoint_protocol,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

LEASE_S = 8.0
MARGIN_S = LEASE_S / 4  # the default margin_seconds
ROUND_S = 4.0
KINDS = ("leader_killed", "leader_paused", "leader_storage_readonly", "standby_killed")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(sc: Scenario, port: int) -> str:
    return (
        "policy: max_min_fairness\n"
        f"round_seconds: {ROUND_S:g}\n"
        "partitions: [gpu]\n"
        "checkpoint: {signal: USR1, grace_seconds: 3}\n"
        f"ha: {{shared_dir: {sc.dir / 'state'}, lease_seconds: {LEASE_S:g}}}\n"
        "log_format: json\n"
        f"metrics_port: {port}\n"
        "slurm: {command_timeout_seconds: 4, retry_initial_seconds: 0.5, "
        "retry_max_seconds: 2}\n"
    )


@dataclass
class Pair:
    """The scenario and its two daemons (a and b: the same config but the port)."""

    sc: Scenario
    a: DaemonProcess
    b: DaemonProcess
    extra: list[DaemonProcess] = field(default_factory=list)

    def all(self) -> list[DaemonProcess]:
        return [self.a, self.b, *self.extra]

    def stop(self) -> None:
        for d in self.all():
            for p in d.procs:
                if p.poll() is None:
                    with_cont(p.pid)
            d.stop()


def with_cont(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def ha_pair(slurm: Any, tmp_path: Path) -> Pair:
    sc = new_scenario(slurm, tmp_path)
    daemons = []
    for name in ("a", "b"):
        cfg = tmp_path / f"gavel-{name}.yaml"
        cfg.write_text(_config(sc, _free_port()))
        daemons.append(DaemonProcess(cfg, slurm.env, tmp_path / f"daemon-{name}.log"))
    sc.daemon = daemons[0]  # what Scenario's helpers read (its failure messages)
    return Pair(sc, daemons[0], daemons[1])


def start_in_own_mounts(d: DaemonProcess, shared: Path) -> subprocess.Popen[bytes]:
    """The daemon in a mount namespace of its own where `shared` is a bind mount of
    itself, which make_readonly() can then remount read-only for it alone (as root,
    chmod does not stop a write)."""
    script = 'mount --bind "$0" "$0" && exec "$@"'
    with open(d.log_path, "ab") as out:
        p = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(shared),
             sys.executable, "-m", "slurm_gavel", "run", "--config", str(d.config)],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **d.env},
        )  # fmt: skip
    d.procs.append(p)
    return p


def remount(pid: int, shared: Path, mode: str) -> None:
    subprocess.run(
        ["nsenter", "-t", str(pid), "-m", "mount", "-o", f"remount,bind,{mode}", str(shared)],
        check=True, capture_output=True, timeout=20,
    )  # fmt: skip


def epoch(ts: str) -> float:
    """An event's time (the logs' UTC, to the millisecond) as Unix time."""
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def first(d: DaemonProcess, name: str, after: float = 0.0, **match: Any) -> dict[str, Any] | None:
    for e in d.events(name):
        if epoch(e["ts"]) >= after and all(e.get(k) == v for k, v in match.items()):
            return e
    return None


def leading(pair: Pair) -> DaemonProcess | None:
    """The daemon whose latest ha_leader event is the newest (None: none led yet)."""
    best, when = None, -1.0
    for d in pair.all():
        for e in d.events("ha_leader"):
            t = epoch(e["ts"])
            if t > when:
                best, when = d, t
    return best


def submit_jobs(sc: Scenario, rng: random.Random, n: int = 10) -> None:
    kinds = (BIG_V100_SPEEDUP, SMALL_V100_SPEEDUP, V100_SLOWER)
    for i in range(n):
        # 2 or 4 GPUs each: ~30 GPUs asked of 24, so rounds time-share and preempt
        sc.submit(kinds[i % 3], steps=rng.randint(12, 20), scale=rng.choice((2, 4)))


def acting_round(sc: Scenario, at_least: int) -> dict[str, Any] | None:
    doc = sc.state_doc()
    if doc and doc.get("inflight") and doc["inflight"]["round_index"] >= at_least:
        return doc
    return None


def signal_times(pair: Pair) -> dict[str, list[float]]:
    """job -> the times a daemon sent it the checkpoint signal (its action events)."""
    out: dict[str, list[float]] = {}
    for d in pair.all():
        for e in d.events("action"):
            if e.get("kind") == "signal":
                for j in str(e["jobs"]).split(","):
                    out.setdefault(j, []).append(epoch(e["ts"]))
    return out


def assert_no_run_signalled_twice(pair: Pair) -> None:
    """Between two signals to a job, a new run of it started: each signal was for
    another run (the first of two to one run would have been answered already)."""
    for job, times in signal_times(pair).items():
        starts = [s.start for s in pair.sc.segments(job)]
        times.sort()
        for t1, t2 in itertools.pairwise(times):
            assert any(t1 < s < t2 for s in starts), (
                f"job {job} signalled twice in one run: at {t1:.3f} and {t2:.3f}; "
                f"its runs started at {starts}"
            )


def assert_nothing_after(d: DaemonProcess, t: float, what: str) -> None:
    late = [e for e in d.events("action") if epoch(e["ts"]) >= t]
    assert not late, f"{what} acted after {t:.3f}: {late[:5]}"


def failover(slurm: Any, tmp_path: Path, kind: str, seed: int) -> dict[str, Any]:
    """One scenario of `kind` with seeded timings; asserts, and returns what it measured."""
    rng = random.Random(seed)
    pair = ha_pair(slurm, tmp_path)
    sc = pair.sc
    shared = sc.dir / "state"
    shared.mkdir()
    try:
        submit_jobs(sc, rng)
        if kind == "leader_storage_readonly":
            start_in_own_mounts(pair.a, shared)
        else:
            pair.a.start()
        wait_for(lambda: first(pair.a, "ha_leader"), 60, "daemon a to lead", poll=0.2)
        pair.b.start()
        wait_for(lambda: first(pair.b, "ha_standby"), 60, "daemon b to stand by", poll=0.2)
        # Fail during a round's act (the state's inflight record), from round 2 to 4,
        # then a seeded part of a round later: mid-act, mid-grace or between rounds.
        doc = wait_for(lambda: acting_round(sc, rng.randint(2, 4)), 120, "a round acting")
        time.sleep(rng.uniform(0, ROUND_S))
        before = {j: sum(a["received_s"].values()) for j, a in doc["scheduler"]["jobs"].items()}
        failed_at = time.time()
        out: dict[str, Any] = {"kind": kind, "seed": seed, "lease_s": LEASE_S}
        if kind == "standby_killed":
            pair.b.kill()
            time.sleep(LEASE_S)
            pair.b.start()  # back as a standby; a keeps leading
            assert first(pair.b, "ha_leader") is None
            out["takeover_s"] = None
        else:
            if kind == "leader_killed":
                pair.a.kill()
                sc.daemon = pair.b  # the one wait_finished watches
            elif kind == "leader_paused":
                pair.a.proc.send_signal(signal.SIGSTOP)
            else:
                remount(pair.a.proc.pid, shared, "ro")
            led = wait_for(lambda: first(pair.b, "ha_leader", after=failed_at), 3 * LEASE_S + 30,
                           "b to take over", poll=0.2)  # fmt: skip
            took = epoch(led["ts"]) - failed_at
            acted = wait_for(lambda: first(pair.b, "round", after=epoch(led["ts"])), 60,
                             "b's first round", poll=0.2)  # fmt: skip
            out["takeover_s"] = round(took, 3)
            out["first_round_s"] = round(epoch(acted["ts"]) - failed_at, 3)
            # The target: the new leader's first round ends within the lease plus a
            # round (the lease runs from the leader's last renewal, before it failed;
            # the standby looks every 0.8 s). Recorded, and asserted only loosely: a
            # host stalled as a whole (measured once in 80 runs: 20 s, both daemons
            # with it, under other tests' load) delays the takeover and says nothing
            # of the daemon; a standby that never takes over still fails here.
            out["within_target"] = out["first_round_s"] <= LEASE_S + ROUND_S
            assert took <= 3 * LEASE_S + ROUND_S, out
            if kind == "leader_paused":
                time.sleep(rng.uniform(0, 2))
                resumed = time.time()
                with_cont(pair.a.proc.pid)
                # it finds itself deposed, refuses, steps down and stands by again
                wait_for(lambda: first(pair.a, "ha_standby", after=resumed), 30,
                         "a to stand by after it resumed", poll=0.2)  # fmt: skip
                out["late_refused"] = len(
                    [e for e in pair.a.events("action_refused") if epoch(e["ts"]) >= resumed]
                )
            if kind == "leader_storage_readonly":
                # a's window closes margin_seconds (lease / 4) before b may claim at the
                # earliest (a's last renewal plus a lease): nothing from a after that
                # (an action is logged after its check, within milliseconds)
                assert_nothing_after(pair.a, epoch(led["ts"]) - MARGIN_S + 0.1, "a")
                assert first(pair.a, "ha_deposed", after=failed_at) is not None
            loaded = first(pair.b, "state_loaded", after=failed_at)
            assert loaded is not None and loaded["round"] >= doc["scheduler"]["round_index"]
            out["resumed"] = wait_for(lambda: (v := sc.status())["round"] > loaded["round"] and v,
                                      60, "a round of b", poll=0.5)["round"]  # fmt: skip
            for job in sc.status()["jobs"]:
                if job["id"] in before:  # no accounting went backwards
                    assert sum(job["received_s"].values()) >= before[job["id"]] - 1e-6, job
        states = sc.wait_finished(list(sc.managed), timeout=360)
        sc.assert_all_completed(states)
        for job_id in sc.managed:
            assert_checkpoint_protocol(sc, job_id)
        assert_no_run_signalled_twice(pair)
        if kind == "leader_paused":
            assert_nothing_after(pair.a, resumed, "the resumed leader a")
        out["signals"] = sum(len(v) for v in signal_times(pair).values())
        return out
    finally:
        pair.stop()


def test_leader_killed_the_standby_takes_over_within_the_lease_and_a_round(slurm, tmp_path):
    out = failover(slurm, tmp_path, "leader_killed", seed=1)
    assert out["takeover_s"] is not None


def test_leader_paused_past_its_lease_issues_nothing_when_it_resumes(slurm, tmp_path):
    out = failover(slurm, tmp_path, "leader_paused", seed=2)
    assert out["takeover_s"] is not None


REPEATS = int(os.environ.get("SLURM_GAVEL_FAILOVER_REPEATS", "0") or 0)


# The seeded repetitions are a measurement (benchmarks/failover_summary.py reads their
# JSON lines), defined only when asked for: a Slurm test that skips fails CI.
if REPEATS:

    @pytest.mark.parametrize("kind", KINDS)
    def test_failover_repeated(slurm, tmp_path, kind):
        """Each scenario REPEATS times with seeds 0..REPEATS-1; the measurements appended
        to SLURM_GAVEL_FAILOVER_OUT (JSON lines) when set."""
        out_path = os.environ.get("SLURM_GAVEL_FAILOVER_OUT")
        for seed in range(REPEATS):
            slurm.cancel_all()
            run_dir = tmp_path / f"{kind}-{seed}"
            run_dir.mkdir()
            out = failover(slurm, run_dir, kind, seed)
            if out_path:
                with open(out_path, "a") as f:
                    f.write(
                        json.dumps({**out, "slurm": os.environ.get("SLURM_GAVEL_SLURM")}) + "\n"
                    )
