"""`slurm-gavel simulate`: run policies on a trace over a simulated cluster, side by side."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.commands.jsonout import add_json_option, to_stdout, write_json
from slurm_gavel.commands.plotting import require_matplotlib
from slurm_gavel.commands.simulate_settings import (
    add_settings_options,
    apply_config,
    config_line,
    overhead_overrides,
)
from slurm_gavel.commands.simulate_table import format_comparison
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.daemon.scheduler_config import scheduler_config
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError
from slurm_gavel.policies import policy_names
from slurm_gavel.simulate import array, moldable_trace
from slurm_gavel.simulate.array import ArrayOptions, RunOutput
from slurm_gavel.simulate.engine import SimulationOptions, SimulationResult
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.job_trace import traced_ids, write_lines
from slurm_gavel.simulate.parallel import Run, resolve_workers, run_all, run_one
from slurm_gavel.simulate.slurm_baseline import BASELINES
from slurm_gavel.simulate.traces import load_trace
from slurm_gavel.simulate.true_rows import (
    draw_true_rows,
    load_true_rows,
    trace_with_rows_csv,
)
from slurm_gavel.simulate.window import Window, apply_window, parse_window

# A wheel ships conf/examples as slurm_gavel/examples (pyproject.toml); a checkout has it
# at the top.
_EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
if not (_EXAMPLES / "trace.csv").exists():
    _EXAMPLES = Path(__file__).resolve().parents[2] / "conf" / "examples"
DEFAULT_TRACE = _EXAMPLES / "trace.csv"
DEFAULT_CLUSTER = "v100:3x4,p100:3x4,k80:3x4"
DEFAULT_POLICIES = ["max_min_fairness", "slurm_fifo"]
HOUR = 3600.0


SUMMARY = "simulate scheduling policies on a job trace"


ROW_SPREAD_HELP = (
    "every job gets its own true row: each cell of its type's row times exp(N(0, SIGMA)), "
    "drawn with --seed (a trace's own throughput_<gpu type> figures are kept; "
    "--save-trace writes generated jobs' rows as those columns)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Replay a job trace (the CSV of docs/design.md section 2.3, or Gavel's .trace) or a
    generated one on a simulated heterogeneous cluster, once per policy, and compare
    JCT, makespan, utilisation, restarts and finish-time fairness. Without
    --trace/--generate it replays the shipped example trace on the default --cluster."""
    _add_trace_options(p)
    p.add_argument(
        "--policy",
        action="append",
        metavar="P",
        help=(
            "policy to simulate; repeat to compare (the first is the reference). Default: "
            f"{' and '.join(DEFAULT_POLICIES)}. One of: "
            f"{', '.join([*policy_names(), *BASELINES])}"
        ),
    )
    p.add_argument(
        "--knowledge",
        action="append",
        choices=[k.value for k in Knowledge if k is not Knowledge.TABLE],
        metavar="K",
        help=(
            "what the scheduler knows of each job's true speeds (the trace's "
            "throughput_<gpu type> columns): learned (default: its type's row, replaced "
            "by the job's own rate on a type once it has run there 30 s), oracle (the "
            "true rows), type-blind (no speeds: every type equally fast for every job); "
            "repeat to compare, each with every --policy"
        ),
    )
    p.add_argument(
        "--measurement-noise",
        type=_non_negative("--measurement-noise"),
        default=0.0,
        metavar="SIGMA",
        help=(
            "the measurement model: each run's reported rate is its true rate times "
            "exp(SIGMA * N(0, 1)), drawn once per run (0.1: about 10 %% off; default 0: exact)"
        ),
    )
    p.add_argument(
        "--startup-delay",
        type=_non_negative("--startup-delay"),
        default=0.0,
        metavar="S",
        help=(
            "seconds every run (the first one too) holds its GPUs before it makes progress "
            "or reports, before any restore overhead: interpreter, imports, data loading "
            "(default 0)"
        ),
    )
    add_settings_options(p)
    _add_output_options(p)
    _add_submit_options(p)


def _non_negative(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: not a number") from None
        if not (math.isfinite(v) and v >= 0.0):
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: must be a finite number >= 0")
        return v

    return parse


def _add_trace_options(p: argparse.ArgumentParser) -> None:
    """What is replayed: the trace (given or generated) and the cluster."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", metavar="FILE", help="trace CSV (or Gavel .trace)")
    src.add_argument("--generate", type=int, metavar="N", help="generate a trace of N jobs")
    p.add_argument(
        "--interarrival",
        type=float,
        default=2400.0,
        metavar="S",
        help="mean seconds between arrivals of generated jobs (default 2400)",
    )
    p.add_argument("--multi-gpu", action="store_true", help="generated jobs use 1/2/4/8 GPUs")
    p.add_argument(
        "--size-first",
        action="store_true",
        help=(
            "with --multi-gpu: draw each job's size first, then a job type the table has at "
            "that size (Gavel's default generator: ~1.9 GPUs per job instead of ~1.65)"
        ),
    )
    p.add_argument("--row-spread", type=float, metavar="SIGMA", help=ROW_SPREAD_HELP)
    p.add_argument("--save-trace", metavar="FILE", help="write the generated trace as CSV")
    p.add_argument(
        "--moldable",
        action="store_true",
        help=(
            "not Gavel: trace jobs of n GPUs that give no range may run at n/2..2n GPUs "
            "(the table's counts), chosen at each (re)start (a trace's scale_factor "
            "MIN-MAX is a range of its own)"
        ),
    )
    p.add_argument(
        "--moldable-share",
        type=float,
        default=1.0,
        metavar="F",
        help="with --moldable: only a share F of the jobs, drawn with --seed (default 1)",
    )
    p.add_argument(
        "--moldable-up-only",
        action="store_true",
        help="with --moldable: n..2n GPUs, never fewer than the trace's n",
    )
    p.add_argument(
        "--moldable-grow",
        type=int,
        default=2,
        metavar="K",
        help="with --moldable: up to K x n GPUs instead of 2n (default 2)",
    )
    p.add_argument(
        "--cluster",
        default=DEFAULT_CLUSTER,
        metavar="SPEC",
        help=f"TYPE:NODESxGPUS,... (default {DEFAULT_CLUSTER})",
    )


def _add_output_options(p: argparse.ArgumentParser) -> None:
    """What is measured and how it is reported."""
    add_json_option(p, "the summary (a list for more than one policy)")
    p.add_argument(
        "--plot",
        metavar="DIR",
        help=(
            "write PNG plots into DIR, each with its data as CSV beside it: jct_cdf, "
            "utilisation_POLICY, comparison (the policies on shared axes); with "
            "--sweep-rates, jct_vs_rate (needs matplotlib: the [sim] extra)"
        ),
    )
    p.add_argument(
        "--sweep-rates",
        metavar="R1,R2,...",
        help="sweep input rates (jobs/hour) with --generate N jobs each; plots JCT vs rate",
    )
    p.add_argument(
        "--measure-jobs",
        metavar="FIRST:END",
        help=(
            "JCT metrics over jobs FIRST..END-1 (arrival order) only, and stop once they "
            "have all finished: Gavel's window is 4000:5000 of a longer continuous trace"
        ),
    )
    p.add_argument(
        "--trace-job",
        metavar="ID",
        action="append",
        default=[],
        help=(
            "write this job's decisions as JSON lines (its run's type, nodes and count, "
            "allocation, protection, restarts; a line when one changes), to "
            "--trace-job-out; repeat for more jobs"
        ),
    )
    p.add_argument(
        "--trace-job-out",
        metavar="FILE",
        default="-",
        help="where --trace-job writes (default: - for stderr)",
    )
    p.add_argument(
        "--no-wall-time",
        action="store_true",
        help="leave wall-clock fields null so the JSON is byte-identical between runs",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help=(
            "run the simulations (every --policy times every --knowledge, or every point "
            "of --sweep-rates) in N processes at once; 0: one per CPU this process may "
            "use (default 1: one after the other). The results are the same either way"
        ),
    )
    bar = p.add_mutually_exclusive_group()
    bar.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="show a progress bar on stderr (default: only when stderr is a terminal)",
    )
    bar.add_argument(
        "--no-progress", dest="progress", action="store_false", help="never show the progress bar"
    )


def _add_submit_options(p: argparse.ArgumentParser) -> None:
    """Running the simulations as a Slurm job array (simulate/array.py)."""
    g = p.add_argument_group(
        "running the simulations on Slurm",
        "--submit runs each simulation (the runs --workers would start) as a task of one "
        "Slurm job array, waits for it and prints the same table and JSON as --workers 1. "
        "Every node must see the working directory, --submit-dir and the interpreter at "
        "the same paths; the tasks inherit this environment (sbatch's default).",
    )
    g.add_argument("--submit", action="store_true", help="run the simulations as a Slurm job array")
    g.add_argument(
        "--submit-dir",
        default=".",
        metavar="DIR",
        help=(
            "a folder every node sees: the array's own folder (task script, logs, results) "
            "is made in it and removed once the results are gathered (default: .)"
        ),
    )
    g.add_argument(
        "--submit-python",
        default="",
        metavar="PATH",
        help="the interpreter the tasks run (default: this one, by its path)",
    )
    g.add_argument("--submit-partition", metavar="P", help="sbatch --partition (a,b: either)")
    g.add_argument("--submit-account", metavar="A", help="sbatch --account")
    g.add_argument("--submit-qos", metavar="Q", help="sbatch --qos")
    g.add_argument("--submit-time", metavar="T", help="sbatch --time: each task's limit")
    g.add_argument(
        "--submit-throttle",
        type=int,
        metavar="N",
        help="at most N tasks at once (sbatch --array=...%%N)",
    )
    g.add_argument(
        "--submit-timeout",
        type=float,
        metavar="S",
        help="cancel the array and fail if it has not finished after S seconds",
    )
    g.add_argument(
        "--submit-task",
        nargs=2,
        metavar=("DIR", "INDEX"),
        help=(
            "what --submit's array tasks run (set by it, not by hand): only simulation "
            "INDEX (0 first), its result written into DIR, no table"
        ),
    )


def _array_options(args: argparse.Namespace) -> ArrayOptions | None:
    """--submit's settings, checked before anything runs; None without --submit (or in a
    task, which runs its one simulation here)."""
    if not args.submit or args.submit_task is not None:
        return None
    if args.workers != 1:
        raise InputError(
            "--submit runs each simulation as an array task of its own: leave out --workers"
        )
    if args.plot:
        require_matplotlib()  # before the array runs, not after
    return array.check_options(
        ArrayOptions(
            folder=Path(args.submit_dir),
            python=args.submit_python,
            partition=args.submit_partition,
            account=args.submit_account,
            qos=args.submit_qos,
            time_limit=args.submit_time,
            throttle=args.submit_throttle,
            timeout_s=args.submit_timeout,
        )
    )


def _check_policies(names: list[str]) -> None:
    known = [*policy_names(), *BASELINES]
    for n in names:
        if n not in known:
            raise InputError(f"--policy '{n}': unknown; choose one of: {', '.join(known)}")


def run(args: argparse.Namespace) -> int:
    cfg, settings, plugins = apply_config(args)
    table = load_table(args.table)
    nodes = parse_cluster_spec(args.cluster, table)
    policies = args.policy or list(DEFAULT_POLICIES)
    _check_policies(policies)
    workers = resolve_workers(args.workers)  # a bad --workers fails before any run
    submit = _array_options(args)
    if args.size_first and not args.multi_gpu:
        raise InputError("--size-first draws multi-GPU sizes: give it with --multi-gpu")
    default_knowledge = Knowledge.LEARNED if cfg is None else cfg.learning.knowledge
    knowledge = [Knowledge(k) for k in dict.fromkeys(args.knowledge or [default_knowledge])]
    opts = SimulationOptions(
        settings=settings,
        plugins=plugins,
        measurement_noise=args.measurement_noise,
        startup_seconds=args.startup_delay,
        overhead_by_job_type=overhead_overrides(args.overhead_for),
        seed=args.seed,
        record_wall_time=not args.no_wall_time,
        progress=args.progress,
        report_knowledge=bool(args.knowledge),
    )
    if cfg is not None:
        opts = replace(opts, daemon=scheduler_config(cfg, table))
        _text(args).write(config_line(args, cfg, settings, plugins))
    window = parse_window(args.measure_jobs) if args.measure_jobs else None
    if args.sweep_rates:
        return _run_sweep(args, policies, nodes, table, opts, window, workers, submit)

    if args.generate is not None:
        jobs = generate_trace(
            args.generate,
            args.interarrival,
            table,
            seed=args.seed,
            multi_gpu=args.multi_gpu,
            size_first=args.size_first,
        )
        source = f"generated: {args.generate} jobs, mean inter-arrival {args.interarrival:g} s"
        title = f"trace: {args.generate} generated jobs (seed {args.seed})"
        true_rows = {}
        if args.row_spread is not None:
            types = list(dict.fromkeys(n.gpu_type for n in nodes))
            true_rows = draw_true_rows(jobs, table, types, args.row_spread, args.seed)
            source += f", own rows spread {args.row_spread:g}"
        if args.save_trace and args.submit_task is None:  # the submitter's file
            Path(args.save_trace).write_text(trace_with_rows_csv(jobs, true_rows))
    else:
        path = Path(args.trace) if args.trace else DEFAULT_TRACE
        if not path.exists() and not args.trace:
            raise InputError(f"the default trace {path} is missing; give --trace FILE")
        jobs = load_trace(path, table)
        true_rows = load_true_rows(path)
        source, title = str(path), f"trace: {path.name}"
        if args.row_spread is not None:
            # every job its own true row (a public trace has none): drawn around its
            # type's row, except where the trace gives the job's own figures
            types = list(dict.fromkeys(n.gpu_type for n in nodes))
            drawn = draw_true_rows(jobs, table, types, args.row_spread, args.seed)
            given = len(true_rows)
            true_rows = {j: true_rows.get(j, row) for j, row in drawn.items()}
            source += f", own rows spread {args.row_spread:g} ({given} given by the trace)"

    if args.moldable:
        if not 0.0 < args.moldable_share <= 1.0:
            raise InputError(f"--moldable-share {args.moldable_share}: give a share 0 < F <= 1")
        shrink = not args.moldable_up_only
        if args.moldable_grow < 1:
            raise InputError(f"--moldable-grow {args.moldable_grow}: give a whole number >= 1")
        grow = args.moldable_grow
        jobs = moldable_trace.with_ranges(jobs, table, args.moldable_share, args.seed, shrink, grow)
        top = "2n" if grow == 2 else ("n" if grow == 1 else f"{grow}n")
        rule = f"n/2..{top}" if shrink else f"n..{top}"
        source += f"; moldable: {rule} GPUs, share {args.moldable_share:g}"
    if window is not None:
        opts = replace(opts, stop_when_completed=window.ids(jobs))
        source += f"; measured: jobs {window.first}-{window.end - 1}"
    if true_rows or args.knowledge:
        source += f"; {len(true_rows)} job(s) with their own throughput rows"
    if args.trace_job:
        opts = replace(opts, trace_jobs=traced_ids(args.trace_job, jobs))
    runs = [
        Run(jobs, nodes, table, policy, replace(opts, knowledge=k), true_rows)
        for policy in policies
        for k in knowledge
    ]
    results = _execute(args, runs, workers, submit)
    if results is None:  # an array task: its result is written
        return 0
    summaries = [r.summary for r in results]
    if window is not None:
        summaries = [apply_window(s, jobs, window) for s in summaries]
        _warn_exhausted(summaries)
    _text(args).write(f"trace: {source}; cluster: {args.cluster}\n")
    _text(args).write(format_comparison(summaries))
    for s in summaries:
        line = moldable_trace.summary_line(s)
        if line is not None:
            _text(args).write(line)
    if args.trace_job:
        write_lines(args.trace_job_out, [line for r in results for line in r.job_trace])
    if args.json:
        write_json(args.json, summaries[0] if len(summaries) == 1 else summaries)
    if args.plot:
        require_matplotlib()
        from slurm_gavel.simulate import plots

        timelines = [(s, r.timeline) for s, r in zip(summaries, results, strict=True)]
        plots.write_all(Path(args.plot), f"{title}; cluster: {args.cluster}", timelines)
        _text(args).write(f"plots (PNG, and their data as CSV) written to {args.plot}/\n")
    return 0


def _warn_exhausted(summaries: list[dict[str, Any]]) -> None:
    for s in summaries:
        w = s["measure_window"]
        if w["trace_exhausted"]:
            sys.stderr.write(
                f"warning: {s['policy']}: the trace's last job arrived before the measured "
                f"jobs {w['first']}-{w['end'] - 1} finished; the load fell off during the "
                "window (JCTs optimistic): generate more jobs\n"
            )


def _run_sweep(
    args: argparse.Namespace,
    policies: list[str],
    nodes: Any,
    table: Any,
    opts: SimulationOptions,
    window: Window | None,
    workers: int,
    submit: ArrayOptions | None,
) -> int:
    from slurm_gavel.simulate.sweep import parse_rates, sweep_points, sweep_runs

    if args.generate is None:
        raise InputError("--sweep-rates needs --generate N (jobs per rate)")
    rates = parse_rates(args.sweep_rates)
    rated = sweep_runs(
        rates,
        policies,
        args.generate,
        nodes,
        table,
        opts,
        multi_gpu=args.multi_gpu,
        size_first=args.size_first,
        window=window,
    )
    results = _execute(args, [run for _, run in rated], workers, submit)
    if results is None:  # an array task: its result is written
        return 0
    points = sweep_points(rated, [r.summary for r in results], window)
    if window is not None:
        _warn_exhausted([p.summary for p in points])
    lines = [f"{'rate/h':>7}  {'policy':<28}  {'avg JCT h':>9}  {'util':>5}  {'restarts':>8}"]
    for p in points:
        s = p.summary
        lines.append(
            f"{p.rate_jobs_per_hour:>7g}  {p.policy:<28}  {(s['avg_jct_s'] or 0) / HOUR:>9.2f}  "
            f"{s['utilization']:>5.2f}  {s['preemptions']:>8}"
        )
    _text(args).write("\n".join(lines) + "\n")
    if args.json:
        write_json(args.json, [p.summary for p in points])
    if args.plot:
        require_matplotlib()
        from slurm_gavel.simulate import plots

        where = (
            f"{args.generate} generated jobs per rate (seed {args.seed}); cluster: {args.cluster}"
        )
        plots.jct_vs_rate(points, where, Path(args.plot) / "jct_vs_rate.png")
        _text(args).write(f"plot written to {args.plot}/jct_vs_rate.png (data: jct_vs_rate.csv)\n")
    return 0


def _execute(
    args: argparse.Namespace, runs: list[Run], workers: int, submit: ArrayOptions | None
) -> list[RunOutput] | None:
    """Every run's output in run order: here (one by one or --workers), or as a Slurm
    job array (--submit). In an array task (--submit-task DIR INDEX): run INDEX alone,
    its result written into DIR, and None."""
    if args.submit_task is not None:
        _run_task(args.submit_task[0], args.submit_task[1], runs)
        return None
    if submit is not None:
        argv = list(getattr(args, "argv", None) or [])
        if argv[:1] != ["simulate"]:
            raise InputError("--submit: run it as `slurm-gavel simulate ... --submit`")
        policies = [r.policy for r in runs]
        return array.run_array(argv[1:], policies, submit, notify=sys.stderr.write)
    return [RunOutput.of(r) for r in _run_all(runs, workers, args.progress)]


def _run_task(folder: str, index: str, runs: list[Run]) -> None:
    """One array task: run ``index`` of the runs, its result written into `folder`."""
    where = Path(folder)
    if not where.is_dir():
        raise InputError(f"--submit-task {folder!r}: no such folder on this node")
    if not index.isdigit() or int(index) >= len(runs):
        raise InputError(f"--submit-task index {index!r}: this command has runs 0..{len(runs) - 1}")
    i = int(index)
    run = replace(runs[i], options=replace(runs[i].options, progress=False))
    array.write_output(where, i, RunOutput.of(run_one(run)))


def _run_all(runs: list[Run], workers: int, progress: bool | None) -> list[SimulationResult]:
    """The runs, one after the other or (--workers) in parallel; in parallel a bar
    counts finished runs (when shown), where each run would have shown its own."""
    show = sys.stderr.isatty() if progress is None else progress
    if workers <= 1 or len(runs) <= 1 or not show:
        return run_all(runs, workers)
    from tqdm import tqdm

    with tqdm(total=len(runs), desc="runs", unit="run", file=sys.stderr, leave=False) as bar:
        return run_all(runs, workers, on_done=lambda _: bar.update(1))


def _text(args: argparse.Namespace) -> TextIO:
    """Where the tables go: stderr while the JSON takes stdout (--json, --json -)."""
    return sys.stderr if to_stdout(args) else sys.stdout
