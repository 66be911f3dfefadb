import json

import pytest

from slurm_gavel.backends.simulated import SimulatedCluster, parse_cluster_spec
from slurm_gavel.cli import main
from slurm_gavel.config import parse_config
from slurm_gavel.daemon import Daemon
from slurm_gavel.metrics import DaemonMetrics
from slurm_gavel.model import Job
from slurm_gavel.throughputs import load_table

TYPES = ["ResNet-50 (batch size 64)", "A3C", "LM (batch size 5)"]


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    """A state directory left by a daemon that ran three rounds and stopped."""
    table = load_table()
    d = tmp_path_factory.mktemp("gavel")
    jobs = [Job(str(i), TYPES[i % 3], 1 + (i == 3), total_steps=1e7) for i in range(1, 7)]
    jobs.append(Job("7", "Not A Table Type"))
    sim = SimulatedCluster(parse_cluster_spec("v100:1x2,k80:1x2"), jobs, table)
    cfg = parse_config({"partitions": ["gpu"], "round_seconds": 60, "state_dir": str(d),
                        "checkpoint": {"grace_seconds": 5}})  # fmt: skip
    daemon = Daemon(cfg, sim, table=table, metrics=DaemonMetrics())
    daemon.start()
    for _ in range(3):
        daemon.round()
        sim.advance(sim.clock + 60)
    daemon.store.release()
    return d, daemon


def test_table_lists_every_managed_job(state_dir, capsys):
    d, daemon = state_dir
    assert main(["status", "--state-dir", str(d)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("daemon not running; round 3, policy max_min_fairness")
    assert out[1] == "usable GPUs: v100 2, k80 2"
    header = out[2].split()
    assert header[:4] == ["JOBID", "TYPE", "GPUS", "STATE"]
    assert "ALLOC" in header and "v100/k80" in header and header[-1] == "RESTARTS"
    table_end = out.index("why not placed:")
    rows = {line.split()[0]: line for line in out[3:table_end]}
    assert sorted(rows, key=int) == [str(i) for i in range(1, 8)]
    assert " skipped " in rows["7"]
    assert out[table_end + 1].startswith("  7: unknown job type 'Not A Table Type'")
    placed = daemon.state.placement
    for job_id, p in placed.items():
        assert f"{p.gpu_type}:{p.nodes[0].node}" in rows[job_id]
        kept = daemon.last_report and job_id in daemon.last_report.result.kept
        assert (" running " if kept else " starting ") in rows[job_id]


def test_json_matches_the_daemons_accounting(state_dir, capsys):
    d, daemon = state_dir
    assert main(["status", "--state-dir", str(d), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["round"] == 3 and view["daemon"]["alive_pid"] is None
    by_id = {j["id"]: j for j in view["jobs"]}
    for job_id, acct in daemon.state.jobs.items():
        assert by_id[job_id]["received_s"] == pytest.approx(acct.received_s)
        assert by_id[job_id]["allocation"] == pytest.approx(
            daemon.state.allocation.fractions.get(job_id, {})
        )
    assert by_id["3"]["scale_factor"] == 2
    # 2 rounds of 60 s credited on 4 GPUs
    assert by_id["7"]["state"] == "skipped" and "unknown job type" in by_id["7"]["reason"]
    total = sum(j["scale_factor"] * sum(j["received_s"].values()) for j in view["jobs"])
    assert total == pytest.approx(2 * 60 * 4)


def test_status_reads_through_the_config(state_dir, tmp_path, capsys):
    d, _ = state_dir
    cfg = tmp_path / "gavel.yaml"
    cfg.write_text(f"partitions: [gpu]\nstate_dir: {d}\n")
    assert main(["status", "--config", str(cfg)]) == 0
    assert "round 3" in capsys.readouterr().out


def test_missing_state_is_one_clear_line(tmp_path, capsys):
    assert main(["status", "--state-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "has not completed a round" in err and err.count("\n") == 1
