"""Pure parts of the demo (slurm_gavel_dev/demo.py): the job set, the daemon config, what
the jobs' output says, the progress line and the final table. No Slurm, no I/O
besides reading text handed in."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Job types with very different GPU preferences in Gavel's table (steps/s on
# k80/p100/v100): ResNet-50 and CycleGAN run 7-9x faster on a V100 than on a K80;
# Recommendation runs best on a P100 and worst on a V100; A3C and the Transformer
# sit in between. Steps are sized so each job takes 25-35 s on its best GPU.
DEFAULT_JOBS = (
    "Recommendation (batch size 2048)=400;ResNet-50 (batch size 64)=120;A3C=200;"
    "CycleGAN=120;Recommendation (batch size 2048)=400;ResNet-50 (batch size 64)=120;"
    "A3C=200;CycleGAN=120"
)
DEFAULT_TOPOLOGY = "v100:1x2,p100:1x2,k80:1x2"
# --moldable: types whose table rows at 2 GPUs run faster than at 1 on every type (4 jobs
# on 6 GPUs: two grow to 2 GPUs at the start), each 20-25 s at 1 GPU on a v100.
MOLDABLE_JOBS = (
    "ResNet-50 (batch size 64)=100;Transformer (batch size 128)=120;"
    "ResNet-50 (batch size 64)=100;Transformer (batch size 128)=120"
)
MOLDABLE_RANGE = "1-2"

# family (job type prefix) -> (sbatch script in workloads/sbatch/, short label)
SCRIPTS = {
    "ResNet-50": ("resnet50", "r50"), "ResNet-18": ("resnet18", "r18"),
    "Transformer": ("transformer", "tfm"), "LM": ("lm", "lm"),
    "Recommendation": ("recommendation", "rec"), "CycleGAN": ("cyclegan", "gan"),
    "A3C": ("a3c", "a3c"),
}  # fmt: skip

EMULATE_LINE = re.compile(
    r"^\[slurm-gavel emulate\] restart (?P<restart>\d+) "
    r"node (?P<node>\S+) gpu (?P<gpu>\S+):"
)

# A moldable job's run on more than one GPU says how many (workloads/emulate.py).
ON_GPUS = re.compile(r": .* on (?P<gpus>\d+) GPUs at \S+ steps/s = table ")

# A paced job sharing its GPU says so (workloads/emulate_pairs.py), naming its partner.
PAIRED_LINE = re.compile(r"^\[slurm-gavel emulate\] job (\d+) paired with job (\d+) ")


@dataclass(frozen=True)
class DemoJob:
    label: str  # "r50-2": short type and submission order
    job_type: str
    steps: int
    script: str  # workloads/sbatch/<script>.sbatch


def parse_jobs(text: str) -> list[DemoJob]:
    """``TYPE=STEPS;TYPE=STEPS;...`` -> the job set, in submission order."""
    jobs: list[DemoJob] = []
    for i, part in enumerate(p.strip() for p in text.split(";") if p.strip()):
        job_type, sep, steps = part.rpartition("=")
        if not sep or not steps.strip().isdigit() or int(steps) < 1:
            raise ValueError(f"--jobs: cannot read {part!r}; write TYPE=STEPS;TYPE=STEPS")
        job_type = job_type.strip()
        family = next((f for f in SCRIPTS if job_type == f or job_type.startswith(f + " (")), None)
        if family is None:
            raise ValueError(
                f"--jobs: {job_type!r} is not a reference workload ({', '.join(SCRIPTS)})"
            )
        script, short = SCRIPTS[family]
        jobs.append(DemoJob(f"{short}-{i + 1}", job_type, int(steps), script))
    if not jobs:
        raise ValueError("--jobs: no job given")
    return jobs


def scaled_table(table_json: dict[str, Any], factor: float) -> dict[str, Any]:
    """A throughput table (to_json form) with every figure multiplied by ``factor``: the
    daemon's view of the emulated speeds, so its measured throughputs agree with it."""

    def nested(d: dict[str, Any]) -> dict[str, Any]:
        return {
            jt: {sf: {g: v * factor for g, v in row.items()} for sf, row in by_sf.items()}
            for jt, by_sf in d.items()
        }

    out = dict(table_json)
    out["source"] = f"{table_json.get('source', '')} (x {factor:g}: the demo's emulated speeds)"
    out["throughputs"] = nested(table_json.get("throughputs") or {})
    out["unconsolidated"] = nested(table_json.get("unconsolidated") or {})
    out["pairs"] = [
        {**p, "throughput": {g: [a * factor, b * factor] for g, (a, b) in p["throughput"].items()}}
        for p in table_json.get("pairs") or []
    ]
    return out


def daemon_config(
    *,
    policy: str,
    round_seconds: float,
    state_dir: str,
    progress_dir: str,
    table: str,
    grace_seconds: float,
    stay_credit_seconds: float = 0.0,
    restart_aware: bool = False,
) -> str:
    """The YAML the demo's `slurm-gavel run` reads (keys of conf/gavel.yaml)."""
    return "\n".join([
        "# Written by the demo (slurm_gavel_dev/demo.py); keys as in conf/gavel.yaml.",
        f"policy: {policy}",
        f"round_seconds: {round_seconds:g}",
        "partitions: [gpu]",
        f"throughput_table: {json.dumps(table)}",
        f"checkpoint: {{signal: USR1, grace_seconds: {grace_seconds:g}, requeue_exit_code: 99}}",
        "preemption_overhead_seconds: 5",
        f"stay_credit_seconds: {stay_credit_seconds:g}",
        f"restart_aware: {'true' if restart_aware else 'false'}",
        f"state_dir: {json.dumps(state_dir)}",
        f"progress_dir: {json.dumps(progress_dir)}",
        "metrics_port: 0",
        "backend: cli",
        "log_format: json",
        "",
    ])  # fmt: skip


def baseline_script(text: str) -> str:
    """The sbatch script without its ``#SBATCH --gavel-*`` lines: submitted like that, the
    job is a plain Slurm job (no type, type-blind --gpus=1), which Slurm places alone."""
    return "".join(
        line for line in text.splitlines(keepends=True) if not line.startswith("#SBATCH --gavel-")
    )


@dataclass
class JobRun:
    """What one job's output file says."""

    gpus: list[str] = field(default_factory=list)  # GPU type of each run, in order
    counts: list[int] = field(default_factory=list)  # GPUs of each run (moldable: varies)
    nodes: list[str] = field(default_factory=list)
    behind_s: float | None = None  # how far the emulation fell behind (final summary)
    partners: list[str] = field(default_factory=list)  # job ids it shared a GPU with
    finished: bool = False


def parse_output(text: str) -> JobRun:
    run = JobRun()
    for line in text.splitlines():
        m = EMULATE_LINE.match(line)
        pair = PAIRED_LINE.match(line)
        if pair:
            if pair.group(2) not in run.partners:
                run.partners.append(pair.group(2))
        elif m:
            run.gpus.append(m.group("gpu"))
            run.nodes.append(m.group("node"))
            on = ON_GPUS.search(line)
            run.counts.append(int(on.group("gpus")) if on else 1)
        elif line.startswith('{"job_type"'):
            try:
                summary = json.loads(line)
            except json.JSONDecodeError:
                continue
            run.finished = True
            if summary.get("emulation_behind_s") is not None:
                run.behind_s = float(summary["emulation_behind_s"])
    return run


def gpu_path(gpus: list[str], counts: list[int] | None = None) -> str:
    """``[k80, k80, v100]`` -> ``k80>v100`` (consecutive runs on one type collapse); with
    each run's GPU count, a run on more than one is ``v100x2``."""
    out: list[str] = []
    for i, g in enumerate(gpus):
        n = counts[i] if counts is not None and i < len(counts) else 1
        run = g if n == 1 else f"{g}x{n}"
        if not out or out[-1] != run:
            out.append(run)
    return ">".join(out) or "-"


@dataclass
class Outcome:
    """One job in one phase (gavel or Slurm alone)."""

    job_id: str
    state: str = "PENDING"
    submitted: float = 0.0
    ended: float | None = None
    restarts: int = 0
    run: JobRun = field(default_factory=JobRun)

    @property
    def jct(self) -> float | None:
        return None if self.ended is None else self.ended - self.submitted


def progress_line(
    round_index: int,
    elapsed: float,
    states: dict[str, str],
    placed: dict[str, str],
    labels: dict[str, str],
    counts: dict[str, int] | None = None,
) -> str:
    """``round 3   41s  done 2/10 running 6 pending 2 | v100: r50-2 gan-4 | p100: ...``.

    ``states``: job id -> Slurm state; ``placed``: job id -> GPU type it runs on (or is
    starting on); ``counts``: job id -> its GPUs there, shown where more than one
    (``r50-2x2``). "pending": waiting in the queue (managed jobs: held)."""
    done = sum(s == "COMPLETED" for s in states.values())
    running = sum(s in ("RUNNING", "COMPLETING") for s in states.values())
    waiting = sum(
        s in ("PENDING", "SPECIAL_EXIT", "REQUEUED", "REQUEUE_HOLD") for s in states.values()
    )
    by_type: dict[str, list[str]] = {}
    for job_id, gpu in sorted(placed.items(), key=lambda kv: labels.get(kv[0], kv[0])):
        if states.get(job_id) != "COMPLETED":
            n = (counts or {}).get(job_id, 1)
            label = labels.get(job_id, job_id) + (f"x{n}" if n > 1 else "")
            by_type.setdefault(gpu, []).append(label)
    where = " | ".join(f"{t}: {' '.join(js)}" for t, js in sorted(by_type.items(), reverse=True))
    return (
        f"round {round_index:>3} {elapsed:5.0f}s  done {done}/{len(states)} "
        f"running {running} pending {waiting}" + (f" | {where}" if where else "")
    )


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals and len(vals) == len(xs) else None


def final_table(
    jobs: list[DemoJob], gavel: list[Outcome], slurm: list[Outcome] | None, policy: str
) -> str:
    w = max(len(j.job_type) for j in jobs)
    head = (
        f"{'job':<7} {'type':<{w}}  {'gavel: GPU types':<16} {'restarts':>8} "
        f"{'JCT s':>6}  {'Slurm alone: GPU':<16} {'JCT s':>6}"
    )
    lines = [head, "-" * len(head)]
    for i, j in enumerate(jobs):
        g = gavel[i]
        s = slurm[i] if slurm else None
        gstate = "" if g.state == "COMPLETED" else f" {g.state}"
        sstate = "" if s is None or s.state == "COMPLETED" else f" {s.state}"
        lines.append(
            f"{j.label:<7} {j.job_type:<{w}}  {gpu_path(g.run.gpus, g.run.counts):<16} "
            f"{g.restarts:>8} "
            f"{_fmt(g.jct):>6}{gstate}  "
            f"{(gpu_path(s.run.gpus) if s else 'not run'):<16} {_fmt(s.jct if s else None):>6}"
            f"{sstate}"
        )
    lines.append("-" * len(head))
    g_avg, g_max = _mean([o.jct for o in gavel]), _max([o.jct for o in gavel])
    lines.append(
        f"gavel ({policy}): average JCT {_fmt(g_avg)} s, last job done after "
        f"{_fmt(g_max)} s, {sum(o.restarts for o in gavel)} restarts"
    )
    if slurm:
        s_avg, s_max = _mean([o.jct for o in slurm]), _max([o.jct for o in slurm])
        lines.append(
            f"Slurm alone (FIFO, type-blind): average JCT {_fmt(s_avg)} s, "
            f"last job done after {_fmt(s_max)} s"
        )
        if g_avg and s_avg and g_max and s_max:
            lines.append(
                f"gavel / Slurm alone: average JCT x{g_avg / s_avg:.2f}, "
                f"makespan x{g_max / s_max:.2f} (below 1: gavel is faster)"
            )
    behind = [o.run.behind_s for o in [*gavel, *(slurm or [])] if o.run.behind_s is not None]
    if behind and max(behind) > 1.0:
        lines.append(
            f"note: the CPU could not keep up with the emulated speed in some run "
            f"(up to {max(behind):.0f} s behind); those jobs ran slower than the table"
        )
    return "\n".join(lines)


def _max(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals and len(vals) == len(xs) else None


def results_json(
    jobs: list[DemoJob], gavel: list[Outcome], slurm: list[Outcome] | None
) -> dict[str, Any]:
    def one(o: Outcome) -> dict[str, Any]:
        return {
            "job_id": o.job_id,
            "state": o.state,
            "jct_s": o.jct,
            "restarts": o.restarts,
            "gpu_types": o.run.gpus,
            "gpu_counts": o.run.counts,
            "nodes": o.run.nodes,
            "emulation_behind_s": o.run.behind_s,
        }

    return {
        "jobs": [
            {
                "label": j.label,
                "job_type": j.job_type,
                "steps": j.steps,
                "gavel": one(gavel[i]),
                "slurm_alone": one(slurm[i]) if slurm else None,
            }
            for i, j in enumerate(jobs)
        ]
    }


def moldable_comparison(rigid: Any, moldable: dict[str, Any]) -> str:
    """`--simulate --moldable`: max_min_fairness on the trace rigid against moldable, from
    the two simulator summaries (the rigid run's is a list, one per policy)."""
    mmf = next(r for r in (rigid if isinstance(rigid, list) else [rigid])
               if r["policy"] == "max_min_fairness")  # fmt: skip
    m = moldable["moldable"]
    ratio = moldable["avg_jct_s"] / mmf["avg_jct_s"]
    by = ", ".join(
        f"{n} on {c} GPU{'s' if c != '1' else ''}" for c, n in m["starts_by_count"].items()
    )
    return "\n".join([
        f"[demo] moldable: {m['jobs']} of {moldable['jobs']} jobs may run on n/2..2n GPUs "
        "(the table's counts), the count chosen at each (re)start",
        f"  (re)starts by GPU count: {by}; mean {m['mean_gpus_at_start']:.2f} GPUs at a start "
        f"against their scale factors' {m['mean_scale_factor']:.2f}",
        f"  max_min_fairness average JCT {mmf['avg_jct_s'] / 3600:.2f} h rigid -> "
        f"{moldable['avg_jct_s'] / 3600:.2f} h moldable (x{ratio:.2f}); "
        f"makespan {mmf['makespan_s'] / 3600:.1f} -> {moldable['makespan_s'] / 3600:.1f} h; "
        f"restarts {mmf['preemptions']} -> {moldable['preemptions']}",
    ])  # fmt: skip
