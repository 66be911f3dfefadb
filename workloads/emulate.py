"""Emulated GPU speed for the reference workloads on clusters whose GPUs are fake.

The local test cluster (tools/local-cluster) gives every node empty device files: a
job runs exactly as fast on a "v100" node as on a "k80" one. To make scheduling
decisions visible there, a workload can pace its steps to the throughput that
Gavel *published* for its job type on the node's GPU type (the table shipped in
slurm_gavel/data, or ``GAVEL_EMULATE_TABLE``), times a factor:

    GAVEL_EMULATE_SPEED=1.0   (or the runner's --emulate-gpu-speed 1.0)

makes a "ResNet-50 (batch size 64)" job do 4.39 steps/s on a v100 node and 0.62 on
a k80 node; 0.5 halves both. The GPU type comes from ``GAVEL_EMULATE_GPU_TYPE`` if
set, else from the node's typed GRES (``scontrol show node $SLURMD_NODENAME``), else
from the local cluster's node naming (``v100-1`` -> ``v100``).

A job of a model the table never saw (submitted with ``--gavel`` and no
type) has no table row to pace to; it names its own speed per GPU type instead:

    GAVEL_EMULATE_RATES=v100=20,p100=10,k80=2     (steps/s on each type)

(:func:`rates_from`), so tests can check that the daemon learns each job's own row.

This is an emulation, not a measurement: the step's real work (a tiny model on the
CPU) is done, then the loop sleeps until the emulated rate is met. When the real
work is slower than the emulated rate, the job falls behind and the runner's
summary says by how much (``emulation_behind_s``).
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from slurm_gavel.backends.slurm.fields import gpu_gres
from slurm_gavel.domain.throughputs import load_table

ENV_SPEED = "GAVEL_EMULATE_SPEED"
ENV_GPU_TYPE = "GAVEL_EMULATE_GPU_TYPE"
ENV_TABLE = "GAVEL_EMULATE_TABLE"
ENV_RATES = "GAVEL_EMULATE_RATES"
NOTE = "speed emulated from Gavel's published table; the GPUs here are fake"


def gres_gpu_type(gres: str) -> str | None:
    """``gpu:v100:4(S:0)`` -> ``v100``; None for an untyped or missing GPU GRES."""
    return next((t for t, _ in gpu_gres(gres) if t), None)


def node_gres(
    node: str, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
) -> str | None:
    """The ``Gres=`` field of ``scontrol show node NODE`` (None when Slurm cannot say)."""
    try:
        res = run(
            ["scontrol", "show", "node", "--oneliner", node],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    for tok in res.stdout.split():
        if tok.startswith("Gres="):
            return tok[len("Gres=") :]
    return None


def resolve_gpu_type(
    env: Mapping[str, str],
    known: list[str],
    gres_of: Callable[[str], str | None] = node_gres,
) -> tuple[str, str]:
    """(GPU type, how it was found) for the node this job runs on.

    Raises ValueError naming what was tried when no known type is found."""
    forced = env.get(ENV_GPU_TYPE)
    if forced:
        if forced not in known:
            raise ValueError(f"{ENV_GPU_TYPE}={forced} is not a GPU type of the table {known}")
        return forced, ENV_GPU_TYPE
    node = env.get("SLURMD_NODENAME", "")
    if not node:
        raise ValueError(f"no SLURMD_NODENAME (not in a Slurm job?) and no {ENV_GPU_TYPE}")
    gres = gres_of(node)
    typed = gres_gpu_type(gres) if gres else None
    if typed in known:
        return typed, f"Gres={gres} of node {node}"
    prefix = node.split("-")[0]
    if prefix in known:
        return prefix, f"the name of node {node}"
    raise ValueError(
        f"node {node} (Gres={gres}) has no GPU type of the table {known}; set {ENV_GPU_TYPE}"
    )


@dataclass
class Pacer:
    """Make step k of this run end no earlier than ``start + k / rate``.

    Deadlines are cumulative (not per step), so a step that was slower than 1/rate
    is made up by the next ones when they are faster; ``behind_s`` is how far the
    run's last step ended after its deadline (0 when the emulation kept up)."""

    rate: float  # emulated steps/s
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    start: float | None = None
    done: int = 0
    behind_s: float = 0.0
    slept_s: float = 0.0

    def begin(self) -> None:
        """The run's first step starts now."""
        self.start = self.clock()
        self.done = 0

    def set_rate(self, rate: float) -> None:
        """Steps from now on are due at ``rate``; the deadlines already met stay (the
        job's sharing of its GPU changed: workloads/emulate_pairs.py)."""
        if self.start is not None:
            self.start += self.done / self.rate - self.done / rate
        self.rate = rate

    def step_done(self) -> None:
        now = self.clock()
        if self.start is None:
            self.start = now - 1.0 / self.rate  # no begin(): this step took exactly 1/rate
        self.done += 1
        wait = self.start + self.done / self.rate - now
        if wait > 0:
            self.sleep(wait)
            self.slept_s += wait
            self.behind_s = 0.0
        else:
            self.behind_s = -wait


@dataclass(frozen=True)
class Emulation:
    gpu_type: str
    rate: float  # emulated steps/s = table steps/s x factor
    table_rate: float
    factor: float
    source: str
    gpus: int = 1  # the GPU count whose table row it paces to (a moldable job's run)

    def describe(self, job_type: str, node: str, restart: str) -> str:
        on = f" on {self.gpus} GPUs" if self.gpus > 1 else ""
        return (
            f"[slurm-gavel emulate] restart {restart} node {node} gpu {self.gpu_type}: "
            f"{job_type}{on} at {self.rate:.3g} steps/s = table {self.table_rate:.3g} x "
            f"{self.factor:g} [{NOTE}; GPU type from {self.source}]"
        )


def run_scale(env: Mapping[str, str]) -> int:
    """The GPU count a run paces to: the job's scale (GAVEL_SCALE, the SPANK option's
    SLURM_SPANK_GAVEL_SCALE), or for a moldable job (``MIN-MAX``) the GPUs its run was
    given (SLURM_GPUS_ON_NODE x SLURM_JOB_NUM_NODES; the range's minimum without them)."""
    text = (env.get("GAVEL_SCALE") or env.get("SLURM_SPANK_GAVEL_SCALE") or "1").strip()
    lo, sep, hi = text.partition("-")
    if not sep:
        return _whole(text, "the job's GPU count")
    low, high = _whole(lo, "a range's minimum"), _whole(hi, "a range's maximum")
    per_node, nodes = env.get("SLURM_GPUS_ON_NODE"), env.get("SLURM_JOB_NUM_NODES") or "1"
    if not per_node:
        return low
    got = _whole(per_node, "SLURM_GPUS_ON_NODE") * _whole(nodes, "SLURM_JOB_NUM_NODES")
    if not low <= got <= high:
        raise ValueError(f"the run has {got} GPUs, outside the job's range {low}-{high}")
    return got


def _whole(text: str, what: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= 1_000_000:
        raise ValueError(f"{what} {text!r} is not a whole number of GPUs")
    return int(text)


def factor_from(cli: float | None, env: Mapping[str, str]) -> float | None:
    """The speed factor: the command line's, else GAVEL_EMULATE_SPEED's, else None (off)."""
    if cli is not None:
        value, where = cli, "--emulate-gpu-speed"
    elif env.get(ENV_SPEED):
        where = ENV_SPEED
        try:
            value = float(env[ENV_SPEED])
        except ValueError:
            raise ValueError(f"{ENV_SPEED}={env[ENV_SPEED]!r} is not a number") from None
    else:
        return None
    if not value > 0:
        raise ValueError(f"{where} must be > 0 (got {value})")
    return value


def rates_from(text: str) -> dict[str, float]:
    """``v100=20,k80=2.5`` -> {"v100": 20.0, "k80": 2.5}; ValueError naming the form."""
    out: dict[str, float] = {}
    for part in text.split(","):
        gpu, eq, value = part.strip().partition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = math.nan
        if not eq or not gpu or not math.isfinite(rate) or rate <= 0 or gpu in out:
            raise ValueError(
                f"{ENV_RATES}={text!r}: write GPU_TYPE=STEPS_PER_S,... with each rate a "
                "finite number > 0 and each type once, e.g. v100=20,k80=2"
            )
        out[gpu] = rate
    return out


def emulation_for_rates(
    rates: dict[str, float],
    env: Mapping[str, str] | None = None,
    gres_of: Callable[[str], str | None] = node_gres,
) -> Emulation:
    """The rate this job names for this node's GPU type (GAVEL_EMULATE_RATES)."""
    env = os.environ if env is None else env
    gpu, source = resolve_gpu_type(env, list(rates), gres_of)
    return Emulation(gpu, rates[gpu], rates[gpu], 1.0, source)


def emulation_for(
    job_type: str,
    scale_factor: int,
    factor: float,
    env: Mapping[str, str] | None = None,
    gres_of: Callable[[str], str | None] = node_gres,
) -> Emulation:
    """The emulated rate of this job on this node (ValueError when it cannot be known)."""
    env = os.environ if env is None else env
    table = load_table(env.get(ENV_TABLE) or None)
    row = table.row(job_type, scale_factor)
    gpu, source = resolve_gpu_type(env, list(row), gres_of)
    if not row[gpu] > 0:
        raise ValueError(f"{job_type} cannot run on {gpu} (throughput 0 in the table)")
    return Emulation(gpu, row[gpu] * factor, row[gpu], factor, source, scale_factor)
