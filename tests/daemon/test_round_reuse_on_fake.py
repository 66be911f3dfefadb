"""The daemon's round keeps the per-job objects of jobs that did not change (the
observed jobs of an unchanged record: backends/slurm/view.py's memo) and decides
and writes exactly what it would build afresh: the same scenario on the fake Slurm
run twice, once with everything kept and once with every kept object dropped before
each round, compared round by round (the snapshot, the commands, the state files)."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from slurm_gavel.core.learned_rows.job_rows import Measured
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.testing import FakeSlurm, OnSignal, Script, fake_backend
from slurm_gavel.testing.owner import OwnerError

TYPES = ("ResNet-18", "A3C", "LM", "Transformer", "CycleGAN")


def _scenario(tmp: Path, keep: bool, seed: int = 3) -> list[dict[str, Any]]:
    """Rounds of a daemon on a fake cluster in which jobs wait, rotate, end, arrive,
    are held by their owner and a node drains; per round what it saw, did and wrote."""
    rng = random.Random(seed)
    table = load_table()
    slurm = FakeSlurm("v100:3x4,p100:2x4,k80:2x4")
    ids = []

    def submit(n: int) -> None:
        for _ in range(n):
            jt = rng.choice([t for t in TYPES if table.has(t, 1)])
            sf = rng.choice([1, 1, 1, 2])
            if not table.has(jt, sf):
                sf = 1
            runs = rng.choice([None, None, 150.0, 400.0])
            on_signal = rng.choice([OnSignal.CHECKPOINT, OnSignal.CHECKPOINT, OnSignal.IGNORE])
            u = rng.randrange(5)
            ids.append(slurm.submit(
                f"gavel:type={jt},scale={sf}", script=Script(runs_s=runs, on_signal=on_signal),
                user=f"u{u}", user_id=5000 + u, gres=f"gpu:{sf}",
            ))  # fmt: skip

    submit(70)
    # jobs whose fit changes while their record does not: memory per node that a plain
    # job's start takes away, and a begin time that passes while they are held
    for k in range(4):
        ids.append(slurm.submit("gavel:type=A3C,scale=1", mem_mb=40000, user="u1",
                                user_id=5001, gres="gpu:1"))  # fmt: skip
        ids.append(slurm.submit("gavel:type=A3C,scale=1", begin=slurm.clock() + 100 + 60 * k,
                                user="u2", user_id=5002, gres="gpu:1"))  # fmt: skip
    backend = fake_backend(slurm, grace_s=10)
    cfg = parse_config({
        "partitions": ["gpu"], "round_seconds": 60, "checkpoint": {"grace_seconds": 10},
        "state_dir": str(tmp / "state"), "log_format": "kv", "log_level": "error",
    })  # fmt: skip
    d = Daemon(cfg, backend, table=table, metrics=DaemonMetrics(), clock=slurm.clock)
    d.start()
    rows = d.state.plugins.learned_rows
    for j in ids[::2]:  # distinct learned rows for half the jobs
        rows.measured[j] = {"v100": Measured(rng.uniform(1, 50), 600.0, 0.0, 0.0, 0)}
        rows.scale_factor[j] = 1
    rows.revision += 1
    out = []
    for r in range(12):
        if not keep:
            backend._observed_memo.clear()  # the old path: every ObservedJob built anew
        if r == 4:
            submit(10)
        if r in (3, 5):  # plain jobs that take most of a node's memory
            slurm.submit(gres="gpu:v100:1", mem_mb=30000, partition="v100",
                         script=Script(runs_s=90.0))  # fmt: skip
        if r == 6:
            slurm.drain("p100-1")
        if r == 8:
            _first_that_takes(slurm.owner.hold, ids)  # a waiting job held by its owner
        if r == 9:
            _first_that_takes(slurm.owner.requeuehold, ids)  # a running one requeue-held
        n = len(backend.transport.log)
        rep = d.round()
        out.append({
            "snapshot": backend.view.snapshot if backend.view else None,
            "commands": backend.transport.log[n:],
            "placement": rep.placement,
            "files": {p.name: _no_wall_clock(p.read_bytes())
                      for p in sorted((tmp / "state").glob("*.json"))},
        })  # fmt: skip
        slurm.advance(60.0)
    d.store.release()
    return out


_WALL = re.compile(rb'"(saved_at|started_at)":[0-9.e+-]+')


def _no_wall_clock(text: bytes) -> bytes:
    """The file with its two wall-clock stamps (when the daemon started, when it saved:
    the host's time, not the fake's) blanked; every other byte compared."""
    return _WALL.sub(rb'"\1":0', text)


def _first_that_takes(command: Any, ids: list[str]) -> None:
    for j in ids:
        try:
            command(j)
            return
        except OwnerError:
            continue


def test_kept_objects_decide_and_write_what_fresh_ones_do(tmp_path: Path) -> None:
    kept = _scenario(tmp_path / "kept", keep=True)
    fresh = _scenario(tmp_path / "fresh", keep=False)
    assert len(kept) == len(fresh)
    for r, (a, b) in enumerate(zip(kept, fresh, strict=True)):
        assert a["snapshot"] == b["snapshot"], f"round {r}"
        assert a["commands"] == b["commands"], f"round {r}"
        assert a["placement"] == b["placement"], f"round {r}"
        assert a["files"].keys() == b["files"].keys(), f"round {r}"
        for name in a["files"]:
            assert a["files"][name] == b["files"][name], f"round {r}: {name}"
    # the scenario moved: jobs started, were preempted and ended
    assert any(k == "release" for rnd in kept for k, _ in rnd["commands"])
    assert any(k == "signal" for rnd in kept for k, _ in rnd["commands"])


def test_an_unchanged_record_keeps_its_observed_job() -> None:
    slurm = FakeSlurm()
    a = slurm.submit("gavel:type=A3C,scale=1")
    b = slurm.submit("gavel:type=A3C,scale=1")
    backend = fake_backend(slurm)
    first = {o.job.id: o for o in backend.observe().jobs}
    slurm.set_comment(b, "gavel:type=LM,scale=1")
    second = {o.job.id: o for o in backend.observe().jobs}
    assert second[a] is first[a]  # the same record: the same object
    assert second[b] is not first[b] and second[b].job.job_type == "LM"
