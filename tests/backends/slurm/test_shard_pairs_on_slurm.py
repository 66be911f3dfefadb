"""gres/shard on the real local cluster of each release (up --shards 2): the facts the
admin guide's shard set-up states, checked live (the captures beside them:
tests/backends/data/<release>/shards/, test_shard_pairs.py)."""

from __future__ import annotations

import json
import time

import pytest

from slurm_gavel.backends.slurm.cli.jobs_from_text import job_from_listing, node_gpu_types
from slurm_gavel.backends.slurm.cli.listing import LISTING_FIELDS
from slurm_gavel.backends.slurm.fields import gres_indices
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from tests.backends.slurm.test_backend import backend, managed

pytestmark = pytest.mark.slurm


@pytest.fixture
def slurm_shards(slurm_shards_session):  # type: ignore[no-untyped-def]
    """The cluster with shards, with every job cancelled before and after the test."""
    slurm_shards_session.cancel_all()
    yield slurm_shards_session
    slurm_shards_session.cancel_all()


def _wait_running(slurm, ids, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(slurm.state(i) == "RUNNING" for i in ids):
            return
        time.sleep(0.5)
    raise AssertionError({i: slurm.state(i) for i in ids})


def _detail(slurm, job_id):
    flag = "--json" if slurm.release == "22.05" else "--json=v0.0.42"
    doc = json.loads(slurm.cmd("squeue", flag, "-t", "all", "-j", job_id).stdout)
    (job,) = [j for j in doc["jobs"] if str(j["job_id"]) == job_id]
    return job["gres_detail"]


def test_two_shard_jobs_share_a_gpu_and_keep_whole_gpu_jobs_off_it(slurm_shards):
    slurm = slurm_shards
    sub = ("-p", "v100", "-w", "v100-1", "-o", "/dev/null", "--wrap", "sleep 300")
    a = slurm.sbatch("--gres=shard:1", *sub)
    b = slurm.sbatch("--gres=shard:1", *sub)
    _wait_running(slurm, [a, b])
    (da,), (db,) = _detail(slurm, a), _detail(slurm, b)
    assert gres_indices(da, "shard") == gres_indices(db, "shard") == (0,)
    c = slurm.sbatch("--gres=gpu:1", *sub)
    _wait_running(slurm, [c])
    assert gres_indices(_detail(slurm, c)[0], "gpu") == (1,)
    # Both GPUs busy (one as shards): a further whole GPU and a shard both wait.
    d = slurm.sbatch("--gres=gpu:1", *sub)
    e = slurm.sbatch("--gres=shard:1", *sub)
    time.sleep(6)  # a few scheduling passes (sched_min_interval, bf_interval=5)
    assert slurm.state(d) == slurm.state(e) == "PENDING"


# --- the daemon's backend enacting pairs (SlurmBackend.act) --------------------------


def _pair(round_index, jobs):
    """{job: (gpu type, node, partner or None)} -> the round's placement (one GPU each)."""
    return RoundPlacement(
        round_index,
        0.0,
        {
            j: JobPlacement(j, t, (NodeSlice(node, 1),), partner)
            for j, (t, node, partner) in jobs.items()
        },
    )


def _observed(b):
    return {o.job.id: o for o in b.observe().jobs}


def _shard_gpu(slurm, job_id):
    (detail,) = _detail(slurm, job_id)
    return gres_indices(detail, "shard")


def _start_pair(slurm, tmp_path):
    a, b_ = (managed(slurm, tmp_path, n) for n in ("a", "b"))
    b = backend(slurm)
    b.observe()
    res = b.act(_pair(0, {a: ("v100", "v100-1", b_), b_: ("v100", "v100-1", a)}))
    assert sorted(res.started) == sorted([a, b_]) and not res.failed, res
    _wait_running(slurm, [a, b_])
    return b, a, b_


def _not_from_text(b, slurm, jobs):
    """Jobs that just started on shards are read as JSON (the GPU index they sit on is
    only there), where the same record asking whole GPUs is built from its text."""
    assert b.view is not None
    types = node_gpu_types(b.view.nodes.values())
    rows = b.transport.reader.listed._rows
    users = {j.user_id: j.user for _, j in rows.values() if j.user_id is not None}
    at = {name: i for i, name in enumerate(LISTING_FIELDS)}
    gpu = ("gres:" if slurm.release == "22.05" else "gres/") + "gpu:1"

    def with_value(record, field, value):
        return (*record[: at[field]], value, *record[at[field] + 1 :])

    sharing = b.transport.cli_format.node_sharing_field
    for job in jobs:
        record, sj = rows[job]
        assert "shard" in record[at["tres_per_node"]] and sj.gpu_slices[0].indices
        before = (with_value(record, "start_time", "N/A"), sj)  # as it waited
        assert job_from_listing(record, before, users, types, sharing) is None
        whole = with_value(record, "tres_per_node", gpu)
        assert job_from_listing(whole, before, users, types, sharing) is not None


def test_a_pair_shares_one_gpu_and_keeps_its_lease(slurm_shards, tmp_path):
    slurm = slurm_shards
    b, a, b_ = _start_pair(slurm, tmp_path)
    assert _shard_gpu(slurm, a) == _shard_gpu(slurm, b_) != ()  # what Slurm reports
    obs = _observed(b)
    assert (obs[a].partner, obs[b_].partner) == (b_, a)
    assert obs[a].nodes == obs[b_].nodes == (NodeSlice("v100-1", 1),)
    _not_from_text(b, slurm, [a, b_])
    before = b.transport.commands.total
    res = b.act(_pair(1, {a: ("v100", "v100-1", b_), b_: ("v100", "v100-1", a)}))
    assert sorted(res.kept) == sorted([a, b_]) and b.transport.commands.total == before
    # The node's two GPUs: one shared by the pair, one free for a whole-GPU job.
    (node,) = [n for n in b.observe().nodes if n.name == "v100-1"]
    assert node.gpus_held_unmanaged == 0


def test_one_of_a_pair_preempted_leaves_the_other_running(slurm_shards, tmp_path):
    slurm = slurm_shards
    b, a, b_ = _start_pair(slurm, tmp_path)
    b.observe()
    res = b.act(_pair(1, {a: ("v100", "v100-1", None)}))
    assert res.preempted == (b_,) and res.kept == (a,) and not res.failed, res
    # no start needs b_'s shards: the act did not wait for it to leave
    assert b.transport.commands.counts["wait"] == 0
    deadline = time.monotonic() + 30
    while slurm.show(b_)["JobState"] != "SPECIAL_EXIT":
        assert time.monotonic() < deadline, slurm.why(b_)
        time.sleep(0.2)
    assert slurm.state(a) == "RUNNING" and _shard_gpu(slurm, a) != ()


def test_a_job_moves_from_shared_to_whole_gpu_and_back(slurm_shards, tmp_path):
    slurm = slurm_shards
    b, a, b_ = _start_pair(slurm, tmp_path)
    b.observe()
    res = b.act(_pair(1, {a: ("k80", "k80-1", None)}))  # b_ preempted, a alone
    assert res.moved == (a,) and res.preempted == (b_,) and not res.failed, res
    slurm.wait_state(a, "RUNNING")
    # Alone on a whole GPU: all the shards of one GPU of k80-1 (2 of its 4).
    assert slurm.show(a)["NodeList"] == "k80-1" and len(_shard_gpu(slurm, a)) == 1
    (node,) = [n for n in b.observe().nodes if n.name == "k80-1"]
    assert node.gpus_held_unmanaged == 0
    b.observe()
    res = b.act(_pair(2, {a: ("v100", "v100-1", b_), b_: ("v100", "v100-1", a)}))
    assert res.moved == (a,) and res.started == (b_,) and not res.failed, res
    _wait_running(slurm, [a, b_], timeout=60)
    assert _shard_gpu(slurm, a) == _shard_gpu(slurm, b_) != ()
    obs = _observed(b)
    assert (obs[a].partner, obs[b_].partner) == (b_, a)


def test_a_new_pair_starts_in_the_act_that_stops_the_pair_before_it(slurm_shards, tmp_path):
    """Pair (a, b) on v100-1 stopped, pair (c, d) placed there in the same round: c and
    d start once a and b have exited (the act waits for them), not a round later, and
    share one GPU (started beside a stopping job, Slurm's first fit would split them)."""
    slurm = slurm_shards
    b, a, b_ = _start_pair(slurm, tmp_path)
    c, d = (managed(slurm, tmp_path, n) for n in ("c", "d"))
    b.observe()
    res = b.act(_pair(1, {c: ("v100", "v100-1", d), d: ("v100", "v100-1", c)}))
    assert sorted(res.preempted) == sorted([a, b_]) and not res.failed, res
    assert sorted(res.started) == sorted([c, d]), res
    _wait_running(slurm, [c, d])
    assert _shard_gpu(slurm, c) == _shard_gpu(slurm, d) != ()
    assert slurm.show(a)["JobState"] == slurm.show(b_)["JobState"] == "SPECIAL_EXIT"
