"""`slurm-gavel run` with a packed policy on the local cluster with gres/shard
(up --shards 2): the daemon pairs jobs on one GPU, Slurm reports both jobs of a pair
on the same GPU index, and every job completes through the checkpoint protocol."""

from __future__ import annotations

import json
import time

import pytest

from slurm_gavel.backends.slurm.fields import gres_indices
from tests.integration.conftest import FINISHED, new_scenario

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def shared_gpus(slurm) -> set[tuple[str, int]]:
    """(node, GPU index) held as shards by two running jobs at once, as squeue says."""
    flag = "--json" if slurm.release == "22.05" else "--json=v0.0.42"
    doc = json.loads(slurm.cmd("squeue", flag, "-t", "RUNNING").stdout)
    seen: dict[tuple[str, int], int] = {}
    for job in doc["jobs"]:
        state = job["job_state"]
        if (state if isinstance(state, str) else state[0]) != "RUNNING":
            continue
        for detail in job.get("gres_detail") or []:
            for i in gres_indices(detail, "shard"):
                key = (job["nodes"], i)
                seen[key] = seen.get(key, 0) + 1
    return {k for k, n in seen.items() if n == 2}


def packed_scenario(slurm, tmp_path):
    """A scenario on the cluster with shards, cleared of jobs, its daemon set to the
    packed policy."""
    slurm.cancel_all()
    sc = new_scenario(slurm, tmp_path)
    cfg = sc.daemon.config
    cfg.write_text(cfg.read_text().replace("policy: max_min_fairness\n",
                                           "policy: max_min_fairness_packed\n"))  # fmt: skip
    return sc


def test_packed_policy_runs_pairs_on_one_gpu(slurm_shards_session, tmp_path):
    slurm = slurm_shards_session
    sc = packed_scenario(slurm, tmp_path)
    try:
        # 8 one-GPU jobs on 4 GPUs: the packed policy pairs some of them.
        for job_type in ("ResNet-18 (batch size 32)", "A3C") * 4:
            sc.submit(job_type, steps=10)
        sc.daemon.start()
        pairs: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            pairs |= shared_gpus(slurm)
            if all(s in FINISHED for s in sc.states(list(sc.managed)).values()):
                break
            time.sleep(0.5)
        states = sc.wait_finished(list(sc.managed), timeout=5)
        sc.assert_all_completed(states)
        assert pairs, "no two jobs were ever seen on the same GPU's shards"
        assert not sc.daemon.events("round_failed")
        # No placement was refused for its GRES (22.05 refuses gpu <-> shard switches:
        # "Invalid generic resource"). Other refusals are races the next round retries
        # with 4 s rounds: an update of a job Slurm is starting or requeueing (22.05:
        # "Invalid node name specified"), scancel of a job that just ended.
        refused = [
            e for e in sc.daemon.events("action_failed") if "Invalid generic resource" in str(e)
        ]
        assert not refused, refused
    finally:
        sc.daemon.stop()
        slurm.cancel_all()


def _running_on(slurm, node: str, ids: list[str]) -> list[str]:
    out = slurm.cmd("squeue", "-h", "-t", "RUNNING", "-w", node, "-o", "%i", check=False).stdout
    return [j for j in out.split() if j in ids]


def test_a_drained_node_with_a_pair_on_it(slurm_shards_session, tmp_path):
    """A node drained under a pair sharing one of its GPUs: both jobs are checkpointed
    and placed elsewhere (nothing new starts there), and every job completes, each
    run but the last ended by the checkpoint signal."""
    from tests.integration.test_node_outages import assert_checkpoint_protocol, wait_for

    slurm = slurm_shards_session
    sc = packed_scenario(slurm, tmp_path)
    node = None
    try:
        ids = [sc.submit(t, steps=40) for t in ("ResNet-18 (batch size 32)", "A3C") * 3]
        sc.daemon.start()
        pair = wait_for(lambda: shared_gpus(slurm), 90, "two jobs on one GPU's shards")
        node, _ = sorted(pair)[0]
        on_node = _running_on(slurm, node, ids)
        slurm.cmd("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=pairs")
        drained = time.time()
        assert len(on_node) >= 2, on_node
        wait_for(lambda: not _running_on(slurm, node, ids), 60, f"{node} emptied")
        states = sc.wait_finished(ids, timeout=300)
        sc.assert_all_completed(states)
        for j in ids:
            assert_checkpoint_protocol(sc, j)
            late = [s for s in sc.segments(j) if s.node == node and s.start > drained + 5]
            assert not late, (j, late)  # nothing started on the drained node
        for j in on_node:  # the pair's run there ended by the signal, or it was done
            (last,) = [s for s in sc.segments(j) if s.node == node][-1:]
            assert last.how in ("signal", "done"), (j, sc.segments(j))
        # (scancel's "Invalid job id" is a job that ended between observe and act.)
        refused = [
            e
            for e in sc.daemon.events("action_failed")
            if "Invalid" in str(e) and "Kill job error" not in str(e)
        ]
        assert not refused, refused
    finally:
        if node is not None:
            slurm.cmd("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        sc.daemon.stop()
        slurm.cancel_all()
