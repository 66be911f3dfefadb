"""The simulation loop: the scheduler's round against a SimulatedCluster.

Round timing follows Gavel's simulator: a round lasts `round_seconds`, or ends
early when every job placed in it has finished; jobs arriving mid-round wait for
the next round; an empty cluster jumps to the next arrival. The Slurm baseline
is event-driven instead (Slurm schedules on every submission and completion),
so it is not penalised by rounds it would not have.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.plugin_settings import SIMULATOR_PLUGINS, PluginSettings
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_plugins import pipeline_for
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS, RoundSettings
from slurm_gavel.core.scheduler import placement_is_stable, run_round
from slurm_gavel.core.scheduler_state import SchedulerState, copy_state
from slurm_gavel.domain.cluster_model import Node
from slurm_gavel.domain.model import GpuType, Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.simulate import moldable_trace
from slurm_gavel.simulate.collector import MetricsCollector
from slurm_gavel.simulate.job_trace import JobTracer
from slurm_gavel.simulate.slurm_baseline import BASELINES
from slurm_gavel.simulate.true_rows import Rows, complete_rows


@dataclass(frozen=True)
class SimulationOptions:
    settings: RoundSettings = SIMULATOR_DEFAULTS
    # The round plugins' settings (simulate --config: the config's, with the command
    # line's options over them).
    plugins: PluginSettings = SIMULATOR_PLUGINS
    # Per-job-type preemption overhead, over settings.preemption_overhead_seconds.
    overhead_by_job_type: Mapping[str, float] = field(default_factory=dict)
    seed: int = 0
    record_wall_time: bool = True  # False: wall-clock fields are null (byte-identical output)
    progress: bool | None = None  # None: a bar on stderr when it is a terminal
    # Jump over rounds that provably repeat the placement (same results, faster).
    skip_stable_rounds: bool = True
    # Stop once every one of these jobs has completed (Gavel's measurement window,
    # jobs 4000-5000 of a continuous trace): later jobs only load the cluster.
    stop_when_completed: frozenset[str] | None = None
    # PolicyOptions.second_stage (False: Gavel's single max-min LP, for ablations)
    second_stage: bool = True
    # The round config the daemon would run (simulate --config: the one builder,
    # daemon/scheduler_config.py): the round runs exactly it, with the simulation's
    # policy, settings, plugins' settings, seed and knowledge. None: SchedulerConfig's
    # defaults, which are the daemon's for everything a config file leaves out.
    daemon: SchedulerConfig | None = None
    # The measurement model (backends/simulated.py): each run's reported rate is off by
    # a lognormal factor of this spread, and every run starts up for startup_seconds
    # (no progress, no report) before its restore overhead. 0, 0: exact reports.
    measurement_noise: float = 0.0
    startup_seconds: float = 0.0
    # What the scheduler knows of the jobs' true rows (the trace's throughput_* columns):
    # LEARNED (measures them as jobs run), ORACLE (told them), TYPE_BLIND (no speeds).
    # Jobs without a true row run at their type's row, which is also their prior, so a
    # trace without the columns replays the same under LEARNED and ORACLE.
    knowledge: Knowledge = Knowledge.LEARNED
    # Put "knowledge" in the summary (and the table) also without true rows: it was asked.
    report_knowledge: bool = False
    # `--trace-job`: these jobs' decisions round by round (job_trace.py); reads only
    trace_jobs: frozenset[str] = frozenset()
    # Every this many rounds (0: never), the scheduler's state goes through the daemon's
    # JSON form before the round (scheduler_state.copy_state), as across a daemon restart:
    # no cache, memo or solver object survives. Results must not change (the
    # differential tests, tests/simulate/test_restart_replay.py).
    reload_state_every: int = 0


@dataclass
class SimulationResult:
    summary: dict[str, Any]
    metrics: MetricsCollector
    job_trace: list[dict[str, Any]] = field(default_factory=list)  # --trace-job lines


def simulate(
    jobs: Iterable[Job],
    nodes: Iterable[Node],
    table: ThroughputTable,
    policy: str,
    options: SimulationOptions | None = None,
    true_rows: Mapping[str, Mapping[GpuType, float]] | None = None,
) -> SimulationResult:
    """Run ``policy`` on the jobs; ``true_rows`` (job id -> steps/s per GPU type, e.g.
    the trace's throughput_* columns) are how fast those jobs really are."""
    opts = options or SimulationOptions()
    job_list = list(jobs)
    node_list = list(nodes)
    wall0 = time.perf_counter()
    types = list(dict.fromkeys(n.gpu_type for n in node_list))
    truth: Rows = complete_rows(job_list, true_rows or {}, table, types)
    backend = SimulatedCluster(
        node_list,
        job_list,
        table,
        preemption_overhead_seconds=opts.settings.preemption_overhead_seconds,
        overhead_by_job_type=opts.overhead_by_job_type,
        true_rows=truth,
        measurement_noise=opts.measurement_noise,
        startup_seconds=opts.startup_seconds,
        seed=opts.seed,
    )
    base = opts.daemon if opts.daemon is not None else SchedulerConfig(table=table)
    config = replace(
        base,
        table=table,
        policy=policy,
        settings=opts.settings,
        plugins=opts.plugins,
        policy_options=replace(base.policy_options, seed=opts.seed, second_stage=opts.second_stage),
        baseline=BASELINES.get(policy),
        # Without true rows every job runs at its type's row, which is its prior: nothing
        # to learn or be told, so the round skips the per-job bookkeeping (3-10 % of a
        # 1,000-job run) and schedules exactly as it would with it.
        knowledge=opts.knowledge
        if truth or opts.knowledge is Knowledge.TYPE_BLIND
        else Knowledge.TABLE,
        given_rows=truth if opts.knowledge is Knowledge.ORACLE else {},
        restart_seconds_by_job_type=opts.overhead_by_job_type,
    )
    capacity: dict[GpuType, int] = {}
    for n in node_list:
        capacity[n.gpu_type] = capacity.get(n.gpu_type, 0) + n.usable_gpus
    metrics = MetricsCollector(table, capacity, true_rows=truth)
    state = SchedulerState()
    event_driven = config.baseline is not None
    pipeline = pipeline_for(config)  # (run_round chooses the same each round)
    bar = _progress_bar(len(job_list), policy, opts.progress)
    unfinished = 0
    waiting = set(opts.stop_when_completed) if opts.stop_when_completed else None
    tracer = JobTracer(opts.trace_jobs, policy, str(opts.knowledge)) if opts.trace_jobs else None
    while not backend.done():
        if backend.active_count() == 0:
            nxt = backend.next_arrival_time()
            if nxt is not None and nxt > backend.clock:
                backend.advance(nxt)  # idle cluster: jump to the next arrival
        every = opts.reload_state_every
        if every > 0 and state.round_index > 0 and state.round_index % every == 0:
            state = copy_state(state)
        state, report = run_round(state, backend, config)
        metrics.reallocations += int(report.reallocated)
        metrics.solve_seconds += report.solve_seconds
        metrics.mechanism_seconds += report.mechanism_seconds
        running = backend.running()
        metrics.on_round(backend.clock, backend.busy_gpu_seconds)
        if tracer is not None:
            tracer.on_round(backend.clock, state, backend.progress_of(tracer.ids))

        end = backend.clock + opts.settings.round_seconds
        nxt_arrival = backend.next_arrival_time()
        if not running:
            if nxt_arrival is None:
                # nothing runs, nothing will arrive: the rest can never be placed
                unfinished = backend.active_count()
                metrics.on_round_end(backend.clock, backend.busy_gpu_seconds)
                break
            end = max(backend.clock, nxt_arrival) if event_driven else end
        elif event_driven:
            candidates = [end, backend.next_completion_time() or end]
            if nxt_arrival is not None:
                candidates.append(nxt_arrival)
            end = min(candidates)
        else:
            if opts.skip_stable_rounds and placement_is_stable(state, report, pipeline):
                # (a job's first report changes its row, not the allocation: the
                # next arrival or completion reallocates with it, round_jobs.py)
                end = _skip_to(backend, opts, state, nxt_arrival)
            end = min(end, backend.last_completion_of_running())
        backend.advance(end)
        metrics.on_round_end(backend.clock, backend.busy_gpu_seconds)
        if backend.completions:
            if tracer is not None:
                tracer.on_completions(
                    (c.job.id, c.finish_time, c.restarts, c.job.arrival_time)
                    for c in backend.completions
                )
            for c in backend.completions:
                metrics.on_completion(c)
                if waiting is not None:
                    waiting.discard(c.job.id)
            if bar is not None:
                bar.update(len(backend.completions))
            backend.completions.clear()
            if waiting is not None and not waiting:
                break
    if bar is not None:
        bar.close()
    wall = time.perf_counter() - wall0 if opts.record_wall_time else None
    summary = metrics.summary(
        policy, backend.busy_gpu_seconds, wall, unfinished, backend.restart_gpu_seconds
    )
    molds = moldable_trace.summarise(job_list, backend.counts_at_start)
    if molds is not None:
        summary["moldable"] = molds
    if truth or opts.report_knowledge:
        rows = state.plugins.learned_rows
        learned = config.knowledge is Knowledge.LEARNED  # (not without true rows)
        summary["knowledge"] = {
            "mode": str(opts.knowledge),
            "jobs_with_true_rows": len(truth),
            # LEARNED with true rows: cells learned from the jobs' reports, and jobs that
            # finished (or were left) without one: they ran on their prior all along
            "cells_measured": rows.cells_measured if learned else None,
            "jobs_never_measured": rows.finished_unmeasured + len(rows.seen - rows.measured.keys())
            if learned
            else None,
        }
    return SimulationResult(summary, metrics, [] if tracer is None else tracer.lines)


def _skip_to(
    backend: SimulatedCluster,
    opts: SimulationOptions,
    state: SchedulerState,
    next_arrival: float | None,
) -> float:
    """The round boundary at or after the next event (arrival, completion or a due
    reallocation): the first round whose decision could differ."""
    events = [e for e in (next_arrival, backend.next_completion_time()) if e is not None]
    settings = opts.settings
    if settings.reallocate_every_seconds is not None and state.allocation_time is not None:
        events.append(state.allocation_time + settings.reallocate_every_seconds)
    if settings.min_reallocation_interval_seconds > 0 and state.allocation_time is not None:
        # a job-set change held back by the interval is acted on then (an extra
        # event only shortens a jump, so this may be conservative, never wrong)
        events.append(state.allocation_time + settings.min_reallocation_interval_seconds)
    r = settings.round_seconds
    if not events:
        return backend.clock + r
    first = min(events)
    k = max(1, math.ceil((first - backend.clock) / r - 1e-9))
    return backend.clock + k * r


def _progress_bar(total: int, policy: str, enabled: bool | None) -> Any:
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=policy, unit="job", file=sys.stderr, leave=False)
