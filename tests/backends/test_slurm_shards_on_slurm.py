"""gres/shard on the real local cluster of each release (up --shards 2): the facts the
admin guide's shard set-up states, checked live (the captures beside them:
tests/backends/data/<release>/shards/, test_slurm_shards.py)."""

from __future__ import annotations

import json
import time

from slurm_gavel.backends.slurm_fields import gres_indices


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


def test_two_shard_jobs_share_a_gpu_and_keep_whole_gpu_jobs_off_it(slurm_shards_session):
    slurm = slurm_shards_session
    slurm.cancel_all()
    try:
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
    finally:
        slurm.cancel_all()
