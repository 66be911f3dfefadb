"""Paired jobs' progress reports move the pair cell, live (every release's shards
cluster, up --shards 2): two paced jobs of one type, from two users, placed as a pair
on one GPU by the daemon's backend, pace at FACTOR x their pair cell and report it,
naming the partner Slurm shows, or (unnamed) leaving ``partner`` null as a real job
does: then the tracker derives the rate from two reports written while it saw the pair
together, no sooner than MIN_WINDOW_S after it first saw them. The daemon's progress
tracker, fed each round from Slurm's view and the real spool, moves their pair cell
towards the measured rate by at most 1.25x a round, leaves the alone cell alone, and
the folded table marks the cell as an estimate."""

from __future__ import annotations

import itertools
import json
import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_gavel.daemon.pair_cells import estimated_pair_cells, update_pairs
from slurm_gavel.daemon.pair_windows import MIN_WINDOW_S
from slurm_gavel.daemon.progress_cells import STEP_FACTOR
from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.domain.throughputs import load_table
from tests.backends.slurm.test_backend import backend
from tests.backends.slurm.test_shard_pairs_on_slurm import _pair, _shard_gpu, _wait_running

pytestmark = [pytest.mark.slurm]

JOB = Path(__file__).parent / "jobs" / "paired_reporter.py"
RN18 = "ResNet-18 (batch size 32)"  # a pair cell with itself on k80 in the shipped table
FACTOR = 0.5  # this "GPU" runs the pair at half the table's figure
USERS = ("root", "nobody")


@pytest.fixture
def site() -> Iterator[Path]:
    """Spool and job output where every user can reach them (tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="slurm-gavel-pair-progress-"))
    d.chmod(0o755)
    (d / "progress").mkdir(mode=0o755)
    (d / "out").mkdir()
    (d / "out").chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _submit(slurm, site: Path, user: str, named: bool) -> str:
    # Unnamed: the window needs MIN_WINDOW_S of shared running, so a longer job. The job
    # looks at Slurm every 0.5 s: its pace follows the pairing at once (real GPUs do),
    # so a window the daemon measures holds no time paced alone.
    seconds, tail = (90, "") if named else (150, " unnamed")
    argv = [
        "sbatch", "--parsable", "-D", "/tmp", "-p", "gpu", "-o", str(site / "out" / "%j.out"),
        f"--comment=gavel:type={RN18}",
        "--wrap", f"GAVEL_EMULATE_PAIR_INTERVAL=0.5 exec python3 {JOB} '{RN18}' {seconds} "
        f"{FACTOR} {site / 'progress'}{tail}",
    ]  # fmt: skip
    res = slurm.cmd(*argv) if user == "root" else slurm.as_user(user, *argv)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_two_users_paired_jobs_move_their_pair_cell(slurm_shards_session, site, named):
    slurm = slurm_shards_session
    slurm.cancel_all()
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.fail("no user 'nobody': the test needs a second user to agree on a cell")
    table = load_table()
    cell = table.pair(RN18, RN18, 1, "k80")
    assert cell is not None
    start, want = cell[0], cell[0] * FACTOR
    side = f"{RN18}|1|k80|with|{RN18}"
    tracker = ProgressTracker(site / "progress", table=table)
    try:
        a, c = (_submit(slurm, site, u, named) for u in USERS)
        b = backend(slurm)
        tracker.merge(b.observe())  # the daemon makes each user's spool folder
        res = b.act(_pair(0, {a: ("k80", "k80-1", c), c: ("k80", "k80-1", a)}))
        assert sorted(res.started) == sorted([a, c]) and not res.failed, res
        _wait_running(slurm, [a, c])
        assert _shard_gpu(slurm, a) == _shard_gpu(slurm, c) != ()
        values, first_seen, first_move = [start], None, None
        deadline = time.monotonic() + (75 if named else 110)
        while time.monotonic() < deadline and abs(values[-1] - want) > 0.02 * want:
            time.sleep(2.0)
            snap = tracker.merge(b.observe())  # one round
            partners = {o.job.id: o.partner for o in snap.jobs}
            if first_seen is None and (partners.get(a), partners.get(c)) == (c, a):
                first_seen = snap.time
            if side in tracker.cells and tracker.cells[side].value != values[-1]:
                values.append(tracker.cells[side].value)
                first_move = snap.time if first_move is None else first_move
        outs = {p.name: p.read_text() for p in (site / "out").iterdir()}
        late = None if None in (first_seen, first_move) else first_move - first_seen
        how = "named" if named else "unnamed"
        print(f"{RN18} with itself on k80, {slurm.release}, partner {how}: pair side by round "
              f"{values}, first move {late} s after the pair was first seen")  # fmt: skip
        assert abs(values[-1] - want) <= 0.02 * want, (values, tracker.to_json(), outs)
        # Down towards the measured rate, by at most 1.25x a round, the first step whole.
        assert values[1] == pytest.approx(start / STEP_FACTOR), values
        assert all(1 <= x / y <= STEP_FACTOR + 1e-9 for x, y in itertools.pairwise(values)), values
        votes = tracker.cells[side].votes
        assert {v.uid for v in votes.values()} == {0, pwd.getpwnam("nobody").pw_uid}
        assert set(tracker.cells) == {side}  # the alone cell learned nothing from them
        measured = {o.job.id: o.measured_throughput for o in snap.jobs}
        assert measured[a] == pytest.approx(want, rel=0.1), measured
        assert measured[c] == pytest.approx(want, rel=0.1), measured
        folded = update_pairs(table, tracker.pair_observations())
        assert folded.pair(RN18, RN18, 1, "k80") == pytest.approx((values[-1], values[-1]))
        assert estimated_pair_cells(folded) == [(RN18, RN18, 1, "k80")]
        assert folded.alone == table.alone
        uids = {a: 0, c: pwd.getpwnam("nobody").pw_uid}
        names = {j: json.loads((site / "progress" / str(u) / f"{j}.json").read_text())["partner"]
                 for j, u in uids.items()}  # fmt: skip
        if named:
            assert names == {a: c, c: a}, names
        else:
            assert names == {a: None, c: None}, names  # the daemon derived the rate itself
            assert late is not None and late >= MIN_WINDOW_S, (first_seen, first_move)
    finally:
        slurm.cancel_all()
