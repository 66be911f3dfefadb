"""Plots: every PNG has its data beside it as CSV, and the CSV agrees with the summary;
the comparison figure puts the policies on shared axes (checked on the Figure object)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.cli import main
from slurm_gavel.commands.report import plot as report_plot
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate import plots
from slurm_gavel.simulate.engine import SimulationOptions, simulate
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.traces import save_trace

TABLE = load_table()
SPEC = "v100:1x4,p100:1x4,k80:1x4"
POLICIES = ["max_min_fairness", "slurm_fifo"]
TYPES = ("v100", "p100", "k80")


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """`simulate --plot` of a small generated trace, two policies, and its summaries."""
    d = tmp_path_factory.mktemp("sim")
    trace = d / "small.csv"
    save_trace(generate_trace(40, 900.0, TABLE, seed=2, multi_gpu=True), trace)
    argv = ["simulate", "--trace", str(trace), "--cluster", SPEC, "--no-progress"]
    argv += [a for p in POLICIES for a in ("--policy", p)]
    out = d / "s.json"
    assert main([*argv, "--plot", str(d / "plots"), "--json", str(out), "--no-wall-time"]) == 0
    return d / "plots", json.loads(out.read_text())


def test_every_png_has_its_csv(simulated):
    d, _ = simulated
    pngs = sorted(p.stem for p in d.glob("*.png"))
    assert pngs == ["comparison", "jct_cdf", *(f"utilisation_{p}" for p in POLICIES)]
    assert sorted(p.stem for p in d.glob("*.csv")) == pngs
    for stem in pngs:
        assert (d / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_jct_cdf_csv_holds_the_summary_jcts(simulated):
    d, summaries = simulated
    rows = _csv(d / "jct_cdf.csv")
    for s in summaries:
        mine = [r for r in rows if r["policy"] == s["policy"]]
        assert {r["job"]: float(r["jct_s"]) for r in mine} == s["jct_s"]
        mean = sum(float(r["jct_s"]) for r in mine) / len(mine)
        assert mean == pytest.approx(s["avg_jct_s"], abs=1e-3)
        assert float(mine[-1]["fraction_of_jobs"]) == 1.0
        assert [float(r["jct_s"]) for r in mine] == sorted(s["jct_s"].values())


def test_utilisation_csv_spans_the_makespan_and_averages_to_the_summary(simulated):
    d, summaries = simulated
    for s in summaries:
        rows = _csv(d / f"utilisation_{s['policy']}.csv")
        assert float(rows[0]["from_h"]) == 0.0
        assert float(rows[-1]["to_h"]) * 3600 == pytest.approx(s["makespan_s"], abs=1e-3)
        for t in TYPES:
            mean = sum(float(r[f"{t}_pct"]) for r in rows) / len(rows) / 100
            assert mean == pytest.approx(s["utilization_by_type"][t], abs=1e-4)


def test_comparison_csv_shares_the_bins_and_keeps_each_policys_utilisation(simulated):
    d, summaries = simulated
    rows = _csv(d / "comparison.csv")
    by_policy = {p: [r for r in rows if r["policy"] == p] for p in POLICIES}
    bins = [(r["from_h"], r["to_h"]) for r in by_policy[POLICIES[0]]]
    longest = max(s["makespan_s"] for s in summaries)
    assert float(bins[-1][1]) * 3600 == pytest.approx(longest, abs=1e-3)
    for s in summaries:
        mine = by_policy[s["policy"]]
        assert [(r["from_h"], r["to_h"]) for r in mine] == bins
        for t in TYPES:
            busy_h = sum(float(r[f"{t}_pct"]) / 100 * (float(r["to_h"]) - float(r["from_h"]))
                         for r in mine)  # fmt: skip
            assert busy_h * 3600 / s["makespan_s"] == pytest.approx(
                s["utilization_by_type"][t], abs=1e-4
            )


def test_comparison_figure_has_shared_axes_and_names_trace_and_cluster():
    jobs = generate_trace(30, 900.0, TABLE, seed=4, multi_gpu=True)
    nodes = parse_cluster_spec(SPEC, TABLE)
    opts = SimulationOptions(record_wall_time=False, progress=False)
    runs = [(r.summary, r.metrics.timeline) for r in
            (simulate(jobs, nodes, TABLE, p, opts) for p in [*POLICIES, "isolated"])]  # fmt: skip
    fig, header, rows = plots.comparison_figure(runs, "trace: t.csv; cluster: " + SPEC)
    try:
        axes = fig.axes
        assert len(axes) == 3
        assert all(axes[0].get_shared_x_axes().joined(axes[0], ax) for ax in axes[1:])
        assert all(axes[0].get_shared_y_axes().joined(axes[0], ax) for ax in axes[1:])
        assert {ax.get_xlim() for ax in axes} == {axes[0].get_xlim()}
        assert {ax.get_ylim() for ax in axes} == {(0.0, 105.0)}
        longest = max(s["makespan_s"] for s, _ in runs) / 3600
        assert axes[0].get_xlim() == pytest.approx((0.0, longest))
        assert "t.csv" in fig.get_suptitle() and SPEC in fig.get_suptitle()
        for ax, (s, _) in zip(axes, runs, strict=True):
            assert ax.get_title().startswith(s["policy"] + ":")
            assert len(ax.get_lines()) == len(TYPES)
        assert header == ["policy", "from_h", "to_h", *(f"{t}_pct" for t in TYPES)]
        assert len(rows) == 3 * plots.BINS
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_sweep_csv_holds_the_summary_jcts(tmp_path):
    d, out = tmp_path / "plots", tmp_path / "sweep.json"
    argv = ["simulate", "--generate", "12", "--sweep-rates", "2,6", "--policy", "isolated"]
    assert main([*argv, "--plot", str(d), "--json", str(out), "--no-progress"]) == 0
    points = json.loads(out.read_text())
    rows = _csv(d / "jct_vs_rate.csv")
    assert [(float(r["rate_jobs_per_hour"]), float(r["avg_jct_s"])) for r in rows] == [
        (p["rate_jobs_per_hour"], p["avg_jct_s"]) for p in points
    ]


@pytest.mark.hostile(inputs=1)
def test_a_hostile_job_id_stays_one_cell_and_never_a_formula(tmp_path):
    evil = '=HYPERLINK("http://x","a,b")\n"'
    rate = TABLE.throughput("A3C", 1, "v100")
    jobs = [
        Job(evil, "A3C", 1, total_steps=rate * 600.0),
        Job("ok", "A3C", 1, total_steps=rate * 900.0),
    ]
    trace = tmp_path / "t.csv"
    save_trace(jobs, trace)
    argv = ["simulate", "--trace", str(trace), "--cluster", "v100:1x1", "--policy", "fifo"]
    assert main([*argv, "--plot", str(tmp_path / "p"), "--no-progress"]) == 0
    rows = _csv(tmp_path / "p" / "jct_cdf.csv")
    assert [r["job"] for r in rows] == ["'" + evil, "ok"]


def test_simulate_plot_without_matplotlib_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails: not installed
    argv = ["simulate", "--generate", "3", "--policy", "fifo", "--no-progress"]
    assert main([*argv, "--plot", str(tmp_path / "p")]) == 2
    assert "pip install 'slurm-gavel[sim]'" in capsys.readouterr().err


@pytest.mark.hostile(inputs=1)
def test_report_csvs_match_the_report_and_quote_hostile_groups(tmp_path):
    evil = "@SUM(1+1)\r\n,x"
    group = {"jobs": 2, "finished": 1, "jct_s": {"mean": 7200.0}}
    report = {
        "by": "user",
        "groups": [
            {**group, "group": evil, "gpu_hours": {"v100": 1.5}},
            {**group, "group": "alice", "gpu_hours": {"k80": 2.0, "v100": 0.25}},
        ],
        "jobs": [{"job_id": "7", "rho": 1.2}, {"job_id": "8", "rho": 0.6},
                 {"job_id": "9", "rho": None}],
    }  # fmt: skip
    written = report_plot(report, tmp_path)
    assert sorted(p.name for p in written) == ["gpu_hours.png", "jct.png", "rho_cdf.png"]
    jct = _csv(tmp_path / "jct.csv")
    assert [(r["user"], float(r["mean_jct_s"])) for r in jct] == [("'" + evil, 7200.0),
                                                                  ("alice", 7200.0)]  # fmt: skip
    hours = _csv(tmp_path / "gpu_hours.csv")
    assert [(r["k80_gpu_hours"], r["v100_gpu_hours"]) for r in hours] == [
        ("0.0", "1.5"),
        ("2.0", "0.25"),
    ]
    rho = _csv(tmp_path / "rho_cdf.csv")
    assert [(r["job"], float(r["rho"]), float(r["fraction_of_jobs"])) for r in rho] == [
        ("8", 0.6, 0.5),
        ("7", 1.2, 1.0),
    ]


def test_paper_experiment_plots_have_their_csv(tmp_path, monkeypatch):
    """benchmarks/paper_experiments.py's figures (EXPERIMENTS.md) get their data too."""
    import importlib.util

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "paper_experiments.py"
    spec = importlib.util.spec_from_file_location("paper_experiments", script)
    assert spec is not None and spec.loader is not None
    paper = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "paper_experiments", paper)  # for its dataclasses
    spec.loader.exec_module(paper)

    def point(exp: str, x: float, policy: str, hours: float) -> dict:
        key = "makespan_s" if exp == "static" else "avg_jct_s"
        return {"experiment": exp, "x": x, "policy": policy, "preemption_overhead_s": 0,
                "window": [4000, 5000], "summary": {key: hours * 3600}}  # fmt: skip

    results = {
        "a": point("single", 5.6, "max_min_fairness", 30.0),
        "b": point("single", 2.0, "max_min_fairness", 20.0),
        "c": point("static", 700, "fifo", 500.0),
    }
    written = paper.plots(results, tmp_path)
    assert [p.name for p in written] == ["single_gpu_jct_vs_rate.png", "static_makespan.png"]
    single = _csv(tmp_path / "single_gpu_jct_vs_rate.csv")
    assert [(r["jobs_per_hour"], r["avg_jct_h"], r["gavel_avg_jct_h"]) for r in single] == [
        ("2.0", "20.0", ""),
        ("5.6", "30.0", str(paper.GAVEL[("single", 5.6)]["max_min_fairness"])),
    ]
    (static,) = _csv(tmp_path / "static_makespan.csv")
    assert (static["policy"], static["jobs"], static["makespan_h"]) == ("fifo", "700", "500.0")
