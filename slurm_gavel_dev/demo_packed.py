"""The demo with a packed policy (`bash tools/demo --policy max_min_fairness_packed`):
its job set, which jobs shared a GPU (from the jobs' own output), the simulator's
prediction for the same job set, and the final table of the three runs (packed,
unpacked, Slurm alone). Pure but for `predict`, which runs the simulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from slurm_gavel.policies import PACKING_POLICIES
from slurm_gavel_dev.demo_report import DemoJob, Outcome, _fmt, _mean, gpu_path

# More jobs than GPUs (8 on 3), of types whose pair cells beat time sharing on some GPU
# type in Gavel's table (Recommendation with A3C or the Transformer on a V100 or P100:
# 1.4-1.7x the work of one job alone), each 35-120 s alone on its best GPU at speed 1.
# The simulator predicts packed < Slurm alone < unpacked average JCT for this set
# (benchmarks/README.md); the unpacked policy time-shares 8 jobs over 3 GPUs.
PACKED_JOBS = (
    "Recommendation (batch size 2048)=900;A3C=400;CycleGAN=150;Transformer (batch size 64)=450;"
    "Recommendation (batch size 2048)=900;A3C=400;CycleGAN=150;Transformer (batch size 64)=450"
)
PACKED_TOPOLOGY = "v100:1x1,p100:1x1,k80:1x1"
SHARDS_PER_GPU = 2  # a pair: half a GPU's shards each (docs/admin-guide.md, shard set-up)
# The restart cost the prediction charges: a tiny job's python + torch start and its
# checkpoint on this kind of machine (the daemon's config says 5 s; measured restarts of
# the demo's jobs take 10-20 s on two shared cores).
PREDICT_OVERHEAD_S = 15.0


def packs(policy: str) -> bool:
    return policy in PACKING_POLICIES


def unpacked_of(policy: str) -> str:
    """The policy the packed one is compared with: itself without space sharing."""
    return policy.removesuffix("_packed") if policy.endswith("_packed") else "max_min_fairness"


def shared_with(outcomes: list[Outcome], labels: list[str]) -> list[str]:
    """Per job, the labels of the jobs it shared a GPU with ('-' for none)."""
    by_id = {o.job_id: lab for o, lab in zip(outcomes, labels, strict=True)}
    return [",".join(by_id.get(p, p) for p in o.run.partners) or "-" for o in outcomes]


def trace_csv(jobs: list[DemoJob], submitted: list[float]) -> str:
    """The job set as a simulator trace: the same types, steps and submission times."""
    t0 = min(submitted)
    rows = ["job_id,arrival_time,job_type,scale_factor,total_steps,priority_weight,slo,account"]
    for i, (j, t) in enumerate(zip(jobs, submitted, strict=True)):
        rows.append(f"{i},{t - t0:.3f},{j.job_type},1,{j.steps},1,,")  # types hold no comma
    return "\n".join(rows) + "\n"


def predict(
    trace: Path,
    table: Path,
    topology: str,
    policies: list[str],
    round_seconds: float,
    out: Path,
    overhead_s: float = PREDICT_OVERHEAD_S,
) -> dict[str, float]:
    """policy -> the simulator's average JCT (s) for the demo's job set."""
    cmd = [
        sys.executable, "-m", "slurm_gavel", "simulate", "--no-progress", "--no-wall-time",
        "--trace", str(trace), "--table", str(table), "--cluster", topology,
        "--round-seconds", f"{round_seconds:g}", "--preemption-overhead", f"{overhead_s:g}",
        *[a for p in policies for a in ("--policy", p)], "--json", str(out),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    rows = json.loads(out.read_text())
    return {
        r["policy"]: float(r["avg_jct_s"]) for r in (rows if isinstance(rows, list) else [rows])
    }


def final_table(
    jobs: list[DemoJob],
    packed: list[Outcome],
    unpacked: list[Outcome],
    slurm: list[Outcome] | None,
    policy: str,
    compare: str,
    predicted: dict[str, float] | None = None,
) -> str:
    """Per job: the packed run's GPU types, restarts, JCT and the jobs it shared a GPU
    with; the unpacked run's JCT; Slurm alone's. Then the averages, and the
    simulator's prediction beside them."""
    w = max(len(j.job_type) for j in jobs)
    shared = shared_with(packed, [j.label for j in jobs])
    sw = max(11, *(len(s) for s in shared))
    head = (
        f"{'job':<7} {'type':<{w}}  {'packed: GPU types':<17} {'restarts':>8} {'JCT s':>6}  "
        f"{'shared GPU with':<{sw}}  {'unpacked JCT s':>14}  {'Slurm alone JCT s':>17}"
    )
    lines = [head, "-" * len(head)]
    for i, j in enumerate(jobs):
        p, u = packed[i], unpacked[i]
        s = slurm[i] if slurm else None
        lines.append(
            f"{j.label:<7} {j.job_type:<{w}}  {gpu_path(p.run.gpus):<17} {p.restarts:>8} "
            f"{_fmt(p.jct):>6}{_state(p)}  {shared[i]:<{sw}}  {_fmt(u.jct):>14}{_state(u)}  "
            f"{_fmt(s.jct if s else None):>17}{_state(s)}"
        )
    lines.append("-" * len(head))
    pred = predicted or {}
    runs = [(f"gavel ({policy})", packed, policy), (f"gavel ({compare})", unpacked, compare)]
    if slurm:
        runs.append(("Slurm alone (FIFO, type-blind)", slurm, "slurm_fifo"))
    for name, outs, key in runs:
        sim = f"; simulator predicts {pred[key]:.0f} s" if key in pred else ""
        lines.append(f"{name}: average JCT {_fmt(_mean([o.jct for o in outs]))} s{sim}")
    pairs = sum(s != "-" for s in shared)
    lines.append(
        f"{pairs} of {len(jobs)} jobs shared a GPU at some point (as Slurm reported to them: "
        "two jobs on shards of one GPU index); a shared job runs at its pair cell of the table"
    )
    return "\n".join(lines)


def _state(o: Outcome | None) -> str:
    return "" if o is None or o.state == "COMPLETED" else f" {o.state}"


def results_json(
    jobs: list[DemoJob], unpacked: list[Outcome], packed: list[Outcome]
) -> dict[str, Any]:
    """What results.json adds for a packed demo: per job, its partners and the unpacked run."""
    shared = shared_with(packed, [j.label for j in jobs])
    return {
        "shared_gpu_with": {j.label: s for j, s in zip(jobs, shared, strict=True)},
        "unpacked": {
            j.label: {
                "job_id": o.job_id,
                "state": o.state,
                "jct_s": o.jct,
                "restarts": o.restarts,
                "gpu_types": o.run.gpus,
            }
            for j, o in zip(jobs, unpacked, strict=True)
        },
    }
