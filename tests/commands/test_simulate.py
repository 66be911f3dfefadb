"""`slurm-gavel simulate` from the command line."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from refused_traces import refused_trace

from slurm_gavel.cli import main
from slurm_gavel.core.learned_rows.learned_rows_settings import LearnedRowsSettings
from slurm_gavel.core.learned_rows.row_trust import TrustBounds
from slurm_gavel.core.plugin_settings import SIMULATOR_PLUGINS
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS, RoundSettings
from slurm_gavel.daemon.config import load_config
from slurm_gavel.domain.throughputs import DEFAULT_TABLE
from slurm_gavel.simulate.engine import SimulationOptions

SMALL = ["--generate", "25", "--interarrival", "600", "--no-progress"]


def test_default_runs_the_shipped_trace_with_two_policies(capsys):
    assert main(["simulate", "--no-progress", "--no-wall-time"]) == 0
    out = capsys.readouterr().out
    assert "conf/examples/trace.csv" in out
    rows = [line.split()[0] for line in out.splitlines()[3:5]]
    assert rows == ["max_min_fairness", "slurm_fifo"]
    assert out.splitlines()[3].split()[-1] == "1.000"  # ratio of the first to itself


def test_json_is_a_list_for_several_policies_and_an_object_for_one(tmp_path, capsys):
    out = tmp_path / "s.json"
    args = ["simulate", *SMALL, "--policy", "isolated", "--policy", "slurm_fifo"]
    assert main([*args, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [d["policy"] for d in data] == ["isolated", "slurm_fifo"]
    assert all(d["jobs"] == 25 for d in data)
    assert main(["simulate", *SMALL, "--policy", "isolated", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["policy"] == "isolated"


def test_byte_identical_json_on_rerun(tmp_path):
    outs = []
    for i in range(2):
        out = tmp_path / f"{i}.json"
        argv = ["simulate", *SMALL, "--multi-gpu", "--seed", "7", "--no-wall-time"]
        assert main([*argv, "--json", str(out)]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


# Slow (full tier only: tools/test --help): a whole simulation, 29-64 s.
@pytest.mark.slow
def test_size_first_trace_is_saved_with_gavels_size_mix(tmp_path, capsys):
    out = tmp_path / "trace.csv"
    argv = [
        "simulate",
        "--generate",
        "400",
        "--interarrival",
        "600",
        "--multi-gpu",
        "--size-first",
        "--policy",
        "fifo",
        "--save-trace",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    rows = out.read_text().splitlines()
    col = rows[0].split(",").index("scale_factor")
    sizes = [int(r.split(",")[col]) for r in rows[1:]]
    assert len(sizes) == 400 and sum(s > 1 for s in sizes) / 400 > 0.24  # type-first: ~0.22


def test_plots_are_written(tmp_path, capsys):
    d = tmp_path / "plots"
    assert main(["simulate", *SMALL, "--policy", "max_min_fairness", "--plot", str(d)]) == 0
    for name in ("jct_cdf.png", "utilisation_max_min_fairness.png"):
        assert (d / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_writes_jct_vs_rate(tmp_path, capsys):
    d, out = tmp_path / "plots", tmp_path / "sweep.json"
    argv = ["simulate", "--generate", "15", "--sweep-rates", "2,6", "--policy", "isolated"]
    assert main([*argv, "--plot", str(d), "--json", str(out), "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert [p["rate_jobs_per_hour"] for p in data] == [2.0, 6.0]
    assert (d / "jct_vs_rate.png").stat().st_size > 0


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--policy", "nope"], "--policy 'nope': unknown"),
        (["--cluster", "v100:4"], "TYPE:NODESxGPUS"),
        (["--preemption-overhead", "-1"], "must be >= 0"),
        (["--overhead-for", "LM"], "JOBTYPE=SECONDS"),
        (["--sweep-rates", "1,x", "--generate", "3"], "'x' is not a number"),
        (["--sweep-rates", "1"], "needs --generate"),
        (["--size-first", "--generate", "3"], "give it with --multi-gpu"),
        (["--min-reallocation-interval", "-1"], "--min-reallocation-interval -1.0: must be"),
        (["--min-reallocation-interval", "inf"], "must be a finite number of seconds"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(argv, needle, capsys):
    assert main(["simulate", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_a_bad_trace_names_the_file_line_and_field(tmp_path, capsys):
    p, err = refused_trace(
        tmp_path,
        capsys,
        "job_id,arrival_time,job_type,scale_factor,total_steps,priority_weight,slo,account\n"
        "1,0,Imaginary Net,1,100,1,,\n",
    )
    assert f"{p}:2: field 'job_type'" in err and "\n" not in err.strip()


# ---- --config: the daemon's settings ----------------------------------------------------

SHIPPED = str(Path(__file__).resolve().parents[2] / "conf" / "gavel.yaml")


@pytest.fixture
def seen_options(monkeypatch):
    """The SimulationOptions and policy each simulation ran with (the real simulate runs)."""
    from slurm_gavel.simulate import parallel

    seen: list[tuple[str, SimulationOptions]] = []
    real = parallel.run_one

    def spy(run):
        seen.append((run.policy, run.options))
        return real(run)

    monkeypatch.setattr(parallel, "run_one", spy)
    return seen


def test_config_shipped_gives_the_daemons_settings(seen_options, capsys):
    assert main(["simulate", *SMALL, "--config", SHIPPED]) == 0
    [(policy, opts)] = seen_options
    assert policy == "max_min_fairness"
    assert opts.settings == RoundSettings(
        round_seconds=360.0,
        preemption_overhead_seconds=0.0,  # the simulator's own default is 30
        min_reallocation_interval_seconds=0.0,
    )
    assert opts.plugins.mechanism.stay_credit_seconds == 720.0  # the simulator's own is 0
    # on in the daemon, never here: a simulated job has no rate at a count its table lacks
    untried = load_config(SHIPPED).plugins.moldable_counts.untried
    assert not opts.plugins.moldable_counts.untried and untried
    assert opts.daemon is not None and opts.daemon.policy_options.time_limit is None
    # the daemon's learning section, as the daemon builds it
    assert opts.plugins.learned_rows == LearnedRowsSettings(TrustBounds(), None)
    assert "stay credit 720 s" in capsys.readouterr().out


def test_config_every_setting_reaches_the_simulator(tmp_path, seen_options, capsys):
    table = tmp_path / "table.json"
    table.write_bytes(resources.files("slurm_gavel.data").joinpath(DEFAULT_TABLE).read_bytes())
    cfg = tmp_path / "gavel.yaml"
    cfg.write_text(
        "partitions: [gpu]\n"
        "policy: hierarchical_max_min_fairness\n"
        "round_seconds: 120\n"
        "preemption_overhead_seconds: 12\n"
        "stay_credit_seconds: 240\n"
        "min_reallocation_interval_seconds: 600\n"
        "solver_time_limit_seconds: 7\n"
        "throughput_table: table.json\n"  # relative to the config's folder
        "prices: {v100: 2.5, p100: 1.5, k80: 0.5}\n"
        "weights: {accounts: {physics: 3}}\n"
    )
    assert main(["simulate", *SMALL, "--config", str(cfg)]) == 0
    [(policy, opts)] = seen_options
    assert policy == "hierarchical_max_min_fairness"
    assert opts.settings == RoundSettings(
        round_seconds=120,
        preemption_overhead_seconds=12,
        min_reallocation_interval_seconds=600,
    )
    assert opts.plugins.mechanism.stay_credit_seconds == 240
    assert opts.daemon is not None
    assert opts.daemon.policy_options.time_limit == 7
    assert dict(opts.daemon.prices) == {"v100": 2.5, "p100": 1.5, "k80": 0.5}
    assert dict(opts.daemon.accounts) == {"physics": 3.0}
    # The table named in the config is the one loaded: break it and the run fails.
    table.write_text("{}")
    assert main(["simulate", *SMALL, "--config", str(cfg)]) == 2
    assert "table.json" in capsys.readouterr().err


def test_command_line_options_win_over_the_config(seen_options):
    argv = ["simulate", *SMALL, "--config", SHIPPED, "--stay-credit", "0", "--policy", "fifo"]
    assert main([*argv, "--round-seconds", "60", "--preemption-overhead", "5"]) == 0
    [(policy, opts)] = seen_options
    assert policy == "fifo"
    s = opts.settings
    assert (s.round_seconds, s.preemption_overhead_seconds) == (60, 5)
    assert opts.plugins.mechanism.stay_credit_seconds == 0


def test_without_config_the_simulators_defaults_stay(seen_options):
    assert main(["simulate", *SMALL, "--policy", "isolated"]) == 0
    [(_, opts)] = seen_options
    assert opts.settings == SIMULATOR_DEFAULTS
    assert opts.plugins == SIMULATOR_PLUGINS
    s = opts.settings
    assert (s.round_seconds, s.preemption_overhead_seconds) == (360, 30)
    assert s.min_reallocation_interval_seconds == 0


def test_config_run_equals_the_same_settings_given_as_options(tmp_path):
    # End to end: the summaries are byte-identical, and differ from the defaults'.
    outs = {}
    for name, extra in (
        ("config", ["--config", SHIPPED]),
        (
            "flags",
            ["--policy", "max_min_fairness", "--stay-credit", "720", "--preemption-overhead", "0"],
        ),
        ("defaults", ["--policy", "max_min_fairness"]),
    ):
        out = tmp_path / f"{name}.json"
        argv = ["simulate", *SMALL, "--multi-gpu", "--no-wall-time", "--json", str(out)]
        assert main([*argv, *extra]) == 0
        outs[name] = out.read_bytes()
    assert outs["config"] == outs["flags"]
    assert outs["config"] != outs["defaults"]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("partitions: [gpu]\nstay_credit_seconds: -5\n", "stay_credit_seconds"),
        ("partitions: [gpu]\nround_secnds: 60\n", "round_secnds"),
        ("partitions: [gpu]\npolicy: nope\n", "policy"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_key_and_exit_2(tmp_path, text, needle, capsys):
    cfg = tmp_path / "gavel.yaml"
    cfg.write_text(text)
    assert main(["simulate", *SMALL, "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and str(cfg) in err and "\n" not in err


def test_the_simulation_reads_the_config_the_daemon_runs(tmp_path):
    """--config is the daemon's own builder (daemon/scheduler_config.py): a learning
    section that says `table` makes the simulation schedule by type rows too."""
    cfg = tmp_path / "gavel.yaml"
    cfg.write_text("partitions: [gpu]\nlearning: {knowledge: table}\n")
    out = tmp_path / "s.json"
    argv = ["simulate", "--config", str(cfg), *SMALL, "--row-spread", "0.3", "--json", str(out)]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    doc = doc[0] if isinstance(doc, list) else doc
    assert doc["knowledge"]["mode"] == "table"
