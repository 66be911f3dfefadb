"""Moldable jobs in the round (core/moldable/mold_round.py) against the simulated cluster: the
count chosen at a (re)start, run at, kept while running, grown when it pays."""

from __future__ import annotations

from dataclasses import replace

import pytest
from plugin_configs import moldable
from round_series import run_rounds

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.cluster_rows import rows_for
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.moldable.mold_round import MoldMemory, mold_jobs
from slurm_gavel.core.plugin_settings import DAEMON_PLUGINS
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS, SIMULATOR_DEFAULTS
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.cluster_model import (
    ActResult,
    ClusterSnapshot,
    JobState,
    Node,
    NodeSlice,
    ObservedJob,
)
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
R18 = "ResNet-18 (batch size 16)"  # v100 per job: 1 GPU 1x, 2 GPUs 3.1x, 4 GPUs 3.8x
R50 = "ResNet-50 (batch size 64)"  # sublinear: most per GPU at 1
LONG = 1e9


def _config(lp: bool = False, **over):
    settings = replace(SIMULATOR_DEFAULTS, **over)
    return SchedulerConfig(table=TABLE, settings=settings, plugins=moldable(lp=lp))


def _run(jobs, spec, rounds, config=None):
    sim = SimulatedCluster(parse_cluster_spec(spec, TABLE), jobs, TABLE)
    config = config or _config()
    state, reports = run_rounds(sim, config, rounds)
    return sim, state, reports


def test_a_lone_moldable_job_grows_into_the_idle_gpus_and_runs_at_that_count():
    job = Job("m", R18, 1, total_steps=LONG, scale_range=(1, 4))
    sim, _, reports = _run([job], "v100:1x4", 2)
    assert reports[0].placement.jobs["m"].gpus == 4
    assert sim.counts_at_start == {4: 1}
    running = sim._running["m"]
    assert running.rate == TABLE.throughput(R18, 4, "v100")  # the rate at 4 GPUs, not 1


def test_a_rigid_job_of_the_same_kind_stays_at_its_scale_factor():
    job = Job("r", R18, 1, total_steps=LONG)
    sim, _, reports = _run([job], "v100:1x4", 1)
    assert reports[0].placement.jobs["r"].gpus == 1
    assert sim.counts_at_start == {}


def test_under_contention_waiting_jobs_start_at_their_least_count():
    jobs = [Job(f"j{i}", R50, 2, total_steps=LONG, scale_range=(1, 4)) for i in range(6)]
    _, _, reports = _run(jobs, "v100:1x4", 1)
    assert {p.gpus for p in reports[0].placement.jobs.values()} == {1}
    assert len(reports[0].placement.jobs) == 4


def test_a_running_job_keeps_its_count_when_others_arrive():
    first = Job("m", R18, 1, total_steps=LONG, scale_range=(1, 4))
    later = Job("late", R50, 1, total_steps=LONG, arrival_time=400.0)
    _, _, reports = _run([first, later], "v100:1x4", 2)
    assert reports[0].placement.jobs["m"].gpus == 4
    # the round after: m keeps its 4 GPUs (no count change while it runs) or waits
    second = reports[1].placement.jobs
    assert "m" not in second or second["m"].gpus == 4


def test_a_running_job_grows_by_a_restart_once_the_cluster_empties():
    # m grows to the 2 GPUs a rigid 2-GPU job leaves; when that one ends it grows again
    m = Job("m", R18, 1, total_steps=LONG, scale_range=(1, 4))
    short = Job("short", R50, 2, total_steps=TABLE.throughput(R50, 2, "v100") * 300)
    sim, _, reports = _run([short, m], "v100:1x4", 3, _config(preemption_overhead_seconds=60))
    assert reports[0].placement.jobs["m"].gpus == 2
    assert reports[-1].placement.jobs["m"].gpus == 4
    assert sim._active["m"].restarts == 1  # the count change was a restart
    assert sim.counts_at_start == {2: 1, 4: 1}


def test_without_ranges_the_round_sees_the_very_same_jobs():
    jobs = [ObservedJob(Job("a", R50, 1), JobState.PENDING)]
    capacity = {"v100": 4}
    rows = rows_for(None, TABLE, capacity)
    assert mold_jobs(MoldMemory(), jobs, rows, capacity) is jobs


def test_the_molded_job_object_is_reused_while_its_count_holds():
    job = Job("m", R18, 1, total_steps=LONG, scale_range=(1, 4))
    capacity = {"v100": 4}
    rows = rows_for(None, TABLE, capacity)
    memory = MoldMemory()
    a = mold_jobs(memory, [ObservedJob(job, JobState.PENDING)], rows, capacity)[0].job
    b = mold_jobs(memory, [ObservedJob(job, JobState.PENDING)], rows, capacity)[0].job
    assert a.scale_factor == 4 and a is b  # the round's memo compares Jobs by identity


def test_a_count_the_table_lacks_is_never_chosen():
    # A3C has a row for 1 GPU only: a range 1-8 still runs it at 1
    job = Job("a3c", "A3C", 1, total_steps=LONG, scale_range=(1, 8))
    capacity = {"v100": 8}
    rows = rows_for(None, TABLE, capacity)
    out = mold_jobs(MoldMemory(), [ObservedJob(job, JobState.PENDING)], rows, capacity)
    assert out[0].job.scale_factor == 1


def test_a_measured_rate_at_a_count_replaces_the_prior():
    # measured far slower at 4 GPUs than the table says: the next start is smaller
    job = Job("m", R18, 1, total_steps=LONG, scale_range=(1, 4))
    capacity = {"v100": 4}
    rows = rows_for(None, TABLE, capacity)
    memory = MoldMemory()
    running = ObservedJob(
        job,
        JobState.RUNNING,
        gpu_type="v100",
        nodes=(NodeSlice("n0", 4),),
        measured_throughput=TABLE.throughput(R18, 1, "v100") * 0.5,
    )
    mold_jobs(memory, [running], rows, capacity)
    assert memory.measured["m"] == {4: {"v100": TABLE.throughput(R18, 1, "v100") * 0.5}}
    out = mold_jobs(memory, [ObservedJob(job, JobState.HELD)], rows, capacity)
    assert out[0].job.scale_factor == 2


def test_the_joint_lp_time_shares_superlinear_jobs_at_the_larger_count():
    # ResNet-18 runs 3.1x faster on 2 V100s than on 1: two such jobs on 2 GPUs do more
    # each taking turns at 2 GPUs (1.55x) than both at 1 GPU, which least-first picks
    jobs = [Job(f"j{i}", R18, 1, total_steps=LONG, scale_range=(1, 2)) for i in range(2)]
    _, _, least = _run(jobs, "v100:1x2", 1)
    assert sorted(p.gpus for p in least[0].placement.jobs.values()) == [1, 1]
    _, _, joint = _run(jobs, "v100:1x2", 1, _config(lp=True))
    assert [p.gpus for p in joint[0].placement.jobs.values()] == [2]


def test_the_joint_lp_keeps_sublinear_jobs_at_their_least_count():
    jobs = [Job(f"j{i}", R50, 2, total_steps=LONG, scale_range=(1, 4)) for i in range(4)]
    _, _, reports = _run(jobs, "v100:1x4", 1, _config(lp=True))
    assert sorted(p.gpus for p in reports[0].placement.jobs.values()) == [1, 1, 1, 1]


def test_the_joint_lp_runs_a_grown_job_only_on_the_types_it_chose_the_count_for():
    # LM at 2 GPUs: 2x one V100, slower than one P100. Two such jobs on 2 V100s and 2
    # P100s: the LP gives each half its time at 2 V100s and half at 1 P100, so one runs
    # at 2 GPUs, on V100 only (the rigid round must not put it on 2 P100s)
    lm = "LM (batch size 10)"
    jobs = [ObservedJob(Job(f"j{i}", lm, 1, scale_range=(1, 2)), JobState.PENDING) for i in (0, 1)]
    capacity = {"v100": 2, "p100": 2}
    rows = rows_for(None, TABLE, capacity)
    of_type = {"v100": frozenset({"v1"}), "p100": frozenset({"p1"})}
    out = mold_jobs(MoldMemory(), jobs, rows, capacity, joint=True, nodes_of_type=of_type)
    grown = [o for o in out if o.job.scale_factor == 2]
    assert len(grown) == 1 and grown[0].allowed is not None
    assert grown[0].allowed.types == {"v100"} and grown[0].allowed.nodes == {"v1"}
    assert [o.allowed for o in out if o.job.scale_factor == 1] == [None]


class _Held:
    """Slurm as the round sees it, minus the act: the issue's cluster (3 nodes of 2 GPUs,
    one type each), a rigid job running on the v100 node, and the given jobs held. The
    act carries out nothing: what counts is the count the round placed each job at."""

    def __init__(self, jobs):
        self.nodes = (Node("v100-1", "v100", 2), Node("p100-1", "p100", 2),
                      Node("k80-1", "k80", 2))  # fmt: skip
        rigid = Job("r", R18, 2, total_steps=LONG)
        self.jobs = (ObservedJob(rigid, JobState.RUNNING, "v100", (NodeSlice("v100-1", 2),)),
                     *(ObservedJob(j, JobState.HELD) for j in jobs))  # fmt: skip

    def observe(self):
        return ClusterSnapshot(0.0, self.nodes, self.jobs)

    def act(self, placement):
        return ActResult()


def _placed(job, untried: bool = True, **settings):
    knowledge = settings.pop("knowledge", Knowledge.LEARNED)
    molds = replace(DAEMON_PLUGINS.moldable_counts, untried=untried)
    config = SchedulerConfig(table=TABLE, settings=replace(DAEMON_DEFAULTS, **settings),
                             plugins=replace(DAEMON_PLUGINS, moldable_counts=molds),
                             knowledge=knowledge)  # fmt: skip
    _, report = run_round(SchedulerState(), _Held([job]), config)
    assert set(report.placement.jobs) == {"r", job.id}, report.placement  # both run
    return report.placement.jobs[job.id]


@pytest.mark.parametrize("job_type", ["A3C", None], ids=["row-at-1-only", "untyped"])
def test_with_learned_rows_a_job_grows_past_its_rows_into_idle_gpus(job_type):
    """A 1-4 job whose type the table has at 1 GPU only (or of no type) started on 1 GPU
    while GPUs sat idle and nothing waited: nothing said a larger count is faster, and
    nothing could until it ran at one. The daemon's rounds now try the larger count,
    as large as one GPU type holds (2 here)."""
    job = Job("a", job_type or "", 1, total_steps=LONG, scale_range=(1, 4))
    p = _placed(job)
    assert p.gpus == 2, p
    assert _placed(job, untried=False).gpus == 1  # the rule before (and opt-out)


def test_under_the_table_s_rows_alone_a_count_without_a_row_is_never_tried():
    job = Job("a", "A3C", 1, total_steps=LONG, scale_range=(1, 4))
    assert _placed(job, knowledge=Knowledge.TABLE).gpus == 1


def test_known_gains_come_before_untried_counts():
    capacity = {"v100": 8}
    rows = rows_for(None, TABLE, capacity)
    a3c = Job("a", "A3C", 1, total_steps=LONG, scale_range=(1, 8))
    r18 = Job("b", R18, 1, total_steps=LONG, scale_range=(1, 4))
    jobs = [ObservedJob(a3c, JobState.HELD), ObservedJob(r18, JobState.HELD)]
    out = mold_jobs(MoldMemory(), jobs, rows, capacity, untried=True)
    assert [o.job.scale_factor for o in out] == [4, 4]  # R18 to its best row, A3C the rest


def test_a_running_job_never_restarts_for_an_untried_count():
    capacity = {"v100": 8}
    rows = rows_for(None, TABLE, capacity)
    a3c = Job("a", "A3C", 1, total_steps=LONG, scale_range=(1, 8))
    running = ObservedJob(a3c, JobState.RUNNING, "v100", (NodeSlice("n0", 1),), steps_done=1.0)
    out = mold_jobs(MoldMemory(), [running], rows, capacity, restart_cost=lambda o: 1.0,
                    untried=True)  # fmt: skip
    assert out[0].state is JobState.RUNNING and out[0].job.scale_factor == 1
