"""gres/shard as real Slurm reports it (captures: tests/backends/data/<release>/shards/,
tools/local-cluster --shards 2; scenario.txt in each). What the daemon must read to
check that the two jobs of a pair share a GPU: the GPU index of each job's shards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_captures import scenario as captured_scenario

from slurm_gavel.backends.slurm.fields import gres_indices, shard_gres
from slurm_gavel.backends.slurm.from_json import parse_jobs, parse_nodes
from slurm_gavel.backends.slurm.records import GpuSlice

DATA = Path(__file__).parents[1] / "data"
CAPTURES = {
    "22.05": ("squeue-t-all.json", "sinfo.json"),
    "24.11": ("squeue-t-all.v0.0.42.json", "scontrol-nodes.v0.0.42.json"),
    "26.05": ("squeue-t-all.v0.0.45.json", "scontrol-nodes.v0.0.45.json"),
}


def scenario(release: str) -> dict[str, str]:
    return captured_scenario(DATA / release / "shards")


def load(release: str, which: int) -> dict:
    return json.loads((DATA / release / "shards" / CAPTURES[release][which]).read_text())


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_two_shard_jobs_report_the_same_gpu_index(release):
    ids = scenario(release)
    raw = {str(j["job_id"]): j for j in load(release, 0)["jobs"]}
    detail = {k: raw[ids[k]]["gres_detail"] for k in ("a", "b", "c", "m")}
    # a and b asked shard:1 each on v100-1: Slurm packed both on GPU 0 (first fit).
    assert gres_indices(detail["a"][0], "shard") == (0,)
    assert gres_indices(detail["b"][0], "shard") == (0,)
    # c asked a whole GPU after them: GPU 0 is taken by shards, so it got GPU 1.
    assert gres_indices(detail["c"][0], "gpu") == (1,)
    assert gres_indices(detail["c"][0], "shard") == ()
    # m, a held managed job updated to Gres=shard:k80:1 the daemon's way, ran on GPU 0.
    assert gres_indices(detail["m"][0], "shard") == (0,)
    # d (a whole GPU) and e (a shard) wait: no GPU of v100-1 is whole and no shard is
    # left; f (3 shards, 2 per GPU) waits for ever: a job's shards come from one GPU.
    for k in ("d", "e", "f"):
        assert raw[ids[k]]["gres_detail"] == []
        state = raw[ids[k]]["job_state"]
        assert (state if isinstance(state, str) else state[0]) == "PENDING"


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_shard_jobs_hold_a_slice_of_one_gpu_with_its_index(release):
    """A shard job asks no gpu (its request is a shard request) but holds one GPU's
    shards: the parser gives it a slice of one GPU with the index and the shard count.
    The whole-GPU job beside them (on GPU 1) holds a count, without indices: no reader
    needs them (GpuSlice.indices), and the listing text names none."""
    ids = scenario(release)
    _, jobs = parse_jobs(load(release, 0))
    by_id = {j.job_id: j for j in jobs}
    for k, node in (("a", "v100-1"), ("b", "v100-1"), ("m", "k80-1")):
        assert by_id[ids[k]].gpu_request is None
        assert by_id[ids[k]].gpu_slices == (GpuSlice(node, None, 1, (0,), 1),)
    assert by_id[ids["c"]].gpu_slices == (GpuSlice("v100-1", "v100", 1),)


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_nodes_count_shard_held_gpus_as_busy(release):
    _, nodes = parse_nodes(load(release, 1))
    by_name = {n.name: n for n in nodes}
    assert (by_name["v100-1"].gpus, by_name["v100-1"].gpus_used) == (2, 2)
    assert (by_name["k80-1"].gpus, by_name["k80-1"].gpus_used) == (2, 1)
    assert by_name["v100-1"].shards == by_name["k80-1"].shards == 4


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_node_gres_used_leaves_shard_held_gpus_out_of_the_gpu_count(release):
    """A GPU handed out as shards is not counted in gres_used's gpu entry: the index
    lists tell which GPUs are busy."""
    nodes = {n["name"]: n for n in load(release, 1)["nodes"]}
    used = nodes["v100-1"]["gres_used"]
    assert used.startswith("gpu:v100:1(IDX:1),shard:v100:")
    busy = set(gres_indices(used, "gpu")) | set(gres_indices(used, "shard"))
    assert busy == {0, 1}
    k80 = nodes["k80-1"]["gres_used"]
    assert gres_indices(k80, "gpu") == () and gres_indices(k80, "shard") == (0,)


@pytest.mark.parametrize(
    ("detail", "name", "want"),
    [
        ("shard:1(IDX:0)", "shard", (0,)),
        ("shard:1(1/2,0/2)", "shard", (0,)),
        ("shard:3(0/4,1/4,2/4)", "shard", (1, 2)),
        ("gpu:v100:1(IDX:1),shard:v100:2(2/2,-/2)", "shard", (0,)),
        ("gpu:v100:1(IDX:1),shard:v100:2(2/2,-/2)", "gpu", (1,)),
        ("gpu:v100:3(IDX:0-1,3)", "gpu", (0, 1, 3)),
        ("gpu:k80:0(IDX:N/A)", "gpu", ()),
        ("gpu:v100:1(IDX:1)", "shard", ()),
        ("", "gpu", ()),
        ("shard:1(IDX:x-y)", "shard", ()),
        ("shard:1(junk)", "shard", ()),
    ],
)
def test_gres_indices(detail, name, want):
    assert gres_indices(detail, name) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("gpu:v100:2,shard:v100:4", [("v100", 4)]),
        ("shard:1(IDX:0)", [(None, 1)]),
        ("shard:1(1/2,0/2)", [(None, 1)]),
        ("gres/shard:2", [(None, 2)]),
        ("gres:shard:k80:1", [("k80", 1)]),
        ("gpu:v100:2", []),
        ("shards:2", []),
        ("shard:x", []),
    ],
)
def test_shard_gres(text, want):
    assert shard_gres(text) == want
