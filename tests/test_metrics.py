import socket
import urllib.request

from slurm_gavel.metrics import DaemonMetrics


def sample(m: DaemonMetrics, line_start: str) -> float:
    for line in m.exposition().splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{line_start} not exposed")


def test_gauges_drop_to_zero_instead_of_keeping_stale_values():
    m = DaemonMetrics()
    m.set_jobs({"running": 3, "pending": 2})
    m.set_jobs({"pending": 1})
    assert sample(m, 'gavel_jobs{state="running"}') == 0
    assert sample(m, 'gavel_jobs{state="pending"}') == 1
    m.set_gpus({"v100": 4}, {"v100": 8, "k80": 2})
    m.set_gpus({}, {"v100": 4})
    assert sample(m, 'gavel_gpus_in_use{gpu_type="v100"}') == 0
    assert sample(m, 'gavel_gpus_usable{gpu_type="k80"}') == 0


def test_counters_and_histograms():
    m = DaemonMetrics()
    m.preemptions.inc(2)
    m.count_command_failures({"scontrol": 2, "squeue": 0})
    m.round_duration.observe(0.3)
    m.slurm_commands_per_round.observe(4)
    assert sample(m, "gavel_preemptions_total") == 2
    assert sample(m, 'gavel_slurm_command_failures_total{command="scontrol"}') == 2
    assert 'command="squeue"' not in m.exposition()
    assert sample(m, "gavel_round_duration_seconds_count") == 1
    assert sample(m, 'gavel_slurm_commands_per_round_bucket{le="4.0"}') == 1


def test_two_instances_do_not_share_a_registry():
    a, b = DaemonMetrics(), DaemonMetrics()  # the global registry would raise here
    a.rounds.inc()
    assert sample(b, "gavel_rounds_total") == 0


def test_http_endpoint_serves_the_registry():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = DaemonMetrics()
    m.rounds.inc(5)
    m.serve(port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "gavel_rounds_total 5.0" in body
    assert "python_gc" not in body  # only our registry, not the process collectors


def test_build_info_and_no_created_series():
    from prometheus_client.parser import text_string_to_metric_families

    from slurm_gavel import __version__

    m = DaemonMetrics()
    m.rounds.inc()
    m.round_errors.labels(cause="solver").inc()
    m.round_duration.observe(0.3)
    text = m.exposition()
    families = {f.name: f for f in text_string_to_metric_families(text)}  # strict parse
    (info,) = families["slurm_gavel_build_info"].samples
    assert info.name == "slurm_gavel_build_info"
    assert info.labels == {"version": __version__} and info.value == 1
    assert not [ln for ln in text.splitlines() if "_created" in ln]


def _snapshot(account_a: str):
    from slurm_gavel.backends.base import (
        ClusterSnapshot,
        JobState,
        Node,
        NodeSlice,
        NodeState,
        ObservedJob,
    )
    from slurm_gavel.model import Job

    nodes = (
        Node("n1", "v100", 4, "gpu", gpus_held_unmanaged=1),
        Node("n2", "v100", 4, "gpu"),
        Node("n3", "k80", 8, "old", state=NodeState.DOWN),
    )
    run = JobState.RUNNING
    jobs = (
        # A space-shared pair on n1's GPUs 2: counted once.
        ObservedJob(Job("1", "t", 2, account=account_a), run, "v100", (NodeSlice("n1", 2),), "2"),
        ObservedJob(Job("2", "t", 2, account=account_a), run, "v100", (NodeSlice("n1", 2),), "1"),
        ObservedJob(Job("3", "t", 1, account="b"), run, "v100", (NodeSlice("n2", 1),)),
        ObservedJob(Job("4", "t", 1, account=account_a), JobState.PENDING),
        ObservedJob(Job("5", "t", 1), JobState.PENDING),
    )
    return ClusterSnapshot(time=0.0, nodes=nodes, jobs=jobs)


def test_gpu_and_account_gauges_on_a_known_snapshot_with_a_hostile_account():
    from prometheus_client.parser import text_string_to_metric_families

    hostile = 'a"b\nc\\'
    m = DaemonMetrics()
    m.set_cluster(_snapshot(hostile))
    text = m.exposition()
    assert 'account="a\\"b\\nc\\\\"' in text  # escaped per the exposition format
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)  # strict parse: raises on bad lines
        for s in f.samples
    }

    def gpus(name: str, t: str, p: str) -> float:
        return got[(name, (("gpu_type", t), ("partition", p)))]

    assert gpus("slurm_gavel_gpus_total", "v100", "gpu") == 8
    assert gpus("slurm_gavel_gpus_alloc", "v100", "gpu") == 4  # 1 unmanaged + 2 shared + 1
    assert gpus("slurm_gavel_gpus_idle", "v100", "gpu") == 4
    assert gpus("slurm_gavel_gpus_total", "k80", "old") == 8
    assert gpus("slurm_gavel_gpus_idle", "k80", "old") == 0  # the node is down

    def jobs(acct: str, state: str) -> float:
        return got[("slurm_gavel_account_jobs", (("account", acct), ("state", state)))]

    assert jobs(hostile, "running") == 2 and jobs(hostile, "pending") == 1
    assert jobs("b", "running") == 1 and jobs("", "pending") == 1
    # Label sets that go away drop to 0 instead of keeping stale values.
    m.set_cluster(_snapshot("z"))
    assert sample(m, 'slurm_gavel_account_jobs{account="a\\"b\\nc\\\\",state="running"}') == 0
    assert sample(m, 'slurm_gavel_account_jobs{account="z",state="running"}') == 2
