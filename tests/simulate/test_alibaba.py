"""`trace alibaba` (simulate/alibaba.py): GPU pods in a window as jobs, fractional pods,
the node list as a cluster spec, and hostile rows named with their line."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.cli import main
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.alibaba import alibaba_cluster, alibaba_jobs, parse_gpu_map
from slurm_gavel.simulate.traces import TraceError, load_trace

TABLE = load_table()
HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)
PODS = (
    "p0,1000,100,1,1000,,LS,Running,100,5100,200\n"
    "p1,1000,100,0,0,,BE,Succeeded,150,900,150\n"  # CPU only
    "p2,1000,100,1,460,,BE,Succeeded,300,1300,300\n"  # a fraction of a GPU
    "p3,1000,100,8,1000,V100M32,Burstable,Failed,400,4000,410\n"
    "p4,1000,100,1,1000,,LS,Pending,500,9000,\n"  # never scheduled
    "p5,1000,100,2,1000,,LS,Running,99999,100000,99999\n"  # after the window
)
NODES = (
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,1,1,8,V100M32\nn1,1,1,8,V100M16\nn2,1,1,2,P100\nn3,1,1,2,T4\n"
    "n4,1,1,8,G2\nn5,1,1,8,G2\nn6,1,1,0,\n"
)


def _jobs(text=HEADER + PODS, **kw):
    return alibaba_jobs(text, "pods.csv", TABLE, 0.0, 24.0, **kw)


def test_gpu_pods_in_the_window_become_jobs():
    jobs, skipped = _jobs()
    assert [(j.arrival_time, j.scale_factor, j.account) for j in jobs] == [
        (100.0, 1, "LS"),
        (300.0, 1, "BE"),
        (400.0, 8, "Burstable"),
    ]
    durations = (4900.0, 1000.0, 3590.0)
    for j, d in zip(jobs, durations, strict=True):
        assert j.total_steps == round(d * TABLE.throughput(j.job_type, j.scale_factor, "v100"))
    assert skipped.reasons == {"never scheduled (pending when the trace ends)": 1}
    assert sum(skipped.notes.values()) == 1  # p2: a shard candidate, run as 1 GPU
    kept, skipped = _jobs(fractional="skip")
    assert len(kept) == 2 and skipped.total == 2


def test_the_node_list_becomes_a_scaled_cluster_spec_of_table_types():
    spec = alibaba_cluster(NODES, "nodes.csv", TABLE, parse_gpu_map([]), 1.0)
    assert spec == "k80:2x8,p100:2x2,v100:2x8"
    nodes = parse_cluster_spec(spec, TABLE)
    assert sum(n.gpus for n in nodes) == 36
    spec = alibaba_cluster(NODES, "nodes.csv", TABLE, parse_gpu_map(["G2=v100"]), 0.5)
    assert spec == "p100:1x2,v100:2x8"
    with pytest.raises(TraceError, match=r"nodes.csv:2: GPU model 'H800'.*--gpu-map H800=TYPE"):
        alibaba_cluster(NODES.replace("V100M32", "H800"), "nodes.csv", TABLE, {}, 1.0)
    with pytest.raises(TraceError, match="no GPU type 'a100'"):
        alibaba_cluster(NODES, "nodes.csv", TABLE, parse_gpu_map(["G2=a100"]), 1.0)
    with pytest.raises(TraceError, match="--gpu-map 'G2'"):
        parse_gpu_map(["G2"])
    with pytest.raises(TraceError, match="--scale 0"):
        alibaba_cluster(NODES, "nodes.csv", TABLE, parse_gpu_map([]), 0.0)
    with pytest.raises(TraceError, match=r"nodes.csv:2: field 'gpu'"):
        alibaba_cluster(NODES.replace(",8,V100M32", ",-8,V100M32"), "nodes.csv", TABLE, {}, 1)


def test_the_cli_writes_the_trace_and_the_cluster(tmp_path, capsys):
    pods, nodes = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    pods.write_text(HEADER + PODS)
    nodes.write_text(NODES)
    out, spec = tmp_path / "t.csv", tmp_path / "spec"
    argv = ["trace", "alibaba", str(pods), "--nodes", str(nodes), "--scale", "1"]
    assert main([*argv, "--cluster-out", str(spec), "-o", str(out)]) == 0
    assert len(load_trace(out, TABLE)) == 3
    assert spec.read_text() == "k80:2x8,p100:2x2,v100:2x8\n"
    assert "shard candidate" in capsys.readouterr().err


@pytest.mark.parametrize(
    "row, match",
    [
        ("q,1,1,1,1000,,LS,Running,-5,10,0", "pods.csv:2: field 'creation_time': -5"),
        ("q,1,1,1,1000,,LS,Running,nan,10,0", "pods.csv:2: field 'creation_time'.*finite"),
        ("q,1,1,1,1000,,LS,Running,5,1e300,5", "pods.csv:2: field 'deletion_time'"),
        ("q,1,1,1,1000,,LS,Running,5,4,5", "pods.csv:2: field 'deletion_time': 4 is before"),
        ("q,1,1,1,2000,,LS,Running,5,40,5", "pods.csv:2: field 'gpu_milli': 2000"),
        ("q,1,1,-1,1000,,LS,Running,5,40,5", "pods.csv:2: field 'num_gpu': -1"),
        ("q,1,1,x,1000,,LS,Running,5,40,5", "pods.csv:2: field 'num_gpu'.*not a number"),
        (",1,1,1,1000,,LS,Running,5,40,5", "pods.csv:2: field 'name' is empty"),
        ("q,1,1,1,1000,,LS", "pods.csv:2: 7 fields, the header has 11"),
    ],
)
def test_hostile_pod_rows_name_the_line_the_field_and_the_fix(row, match):
    with pytest.raises(TraceError, match=match):
        _jobs(HEADER + row + "\n")


def test_a_duplicate_pod_and_a_foreign_file_are_refused():
    with pytest.raises(TraceError, match=r"pods.csv:3: field 'name': 'p0' appears twice"):
        _jobs(HEADER + PODS.splitlines()[0] + "\n" + PODS.splitlines()[0] + "\n")
    with pytest.raises(TraceError, match="header lacks num_gpu"):
        _jobs("name,qos\nx,LS\n")
    with pytest.raises(TraceError, match="--fractional"):
        _jobs(fractional="half")
