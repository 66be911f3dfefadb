"""`slurm-gavel profile`: measure the reference workloads on this machine's device and
merge the figures into a throughput table.

Each measurement runs in fresh processes (slurm_gavel.profiling.worker): one for a job
alone at scale factor 1; N data-parallel ones for scale factor N (one per GPU); two on
the same device, measured over the same window, for a co-located pair. The device's
name comes from NVML (nvidia-ml-py's ``pynvml``), "cpu" when there is no GPU; the table
column is a short key of it ("NVIDIA H100 80GB HBM3" -> "h100") unless --gpu-type says
otherwise. Every measured cell gets a note with the device name and the date; a pair
cell's note (``pair|a|b|1|gpu``) replaces an ``estimate:`` one the daemon wrote when it
learned the cell from paired jobs' reports (pair_cells.py). Without a GPU the figures
are the CPU's: the tool runs (the tests use it so), but they say nothing of any GPU,
and the notes say so.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from slurm_gavel.domain.throughputs import ThroughputTable, pair_note_key
from slurm_gavel.errors import InputError

CPU_CAVEAT = "CPU figures, meaningless as GPU figures (no GPU was visible)"


class ProfileError(InputError):
    """The profiler cannot run as asked (no workloads, a worker failed, bad option)."""


@dataclass(frozen=True)
class Measurement:
    job_type: str
    scale_factor: int
    steps_per_s: float
    steps: int
    partner: str | None = None  # co-located with this job type
    partner_steps_per_s: float | None = None


def gpus() -> list[str]:
    """Names of the visible NVIDIA GPUs (NVML); empty without driver or GPUs."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        return names
    finally:
        pynvml.nvmlShutdown()


def gpu_type_key(device_name: str) -> str:
    """Short table column for a device: "NVIDIA H100 80GB HBM3" -> "h100", "Tesla V100-SXM2-16GB"
    -> "v100", "cpu" -> "cpu"."""
    words = re.sub(r"\b(nvidia|tesla|geforce|quadro)\b", " ", device_name.lower()).split()
    if not words:
        return "cpu"
    return re.split(r"[-_ ]", words[0])[0] or "cpu"


def workloads_path() -> Path:
    """The folder to put on PYTHONPATH so that ``import workloads`` finds them: found as a
    package, the one a wheel ships (slurm_gavel.reference.workloads) or a checkout's
    top-level ``workloads``, never by a path relative to this file."""
    for name in ("slurm_gavel.reference.workloads", "workloads"):
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # slurm_gavel.reference is absent from a checkout
            spec = None
        if spec is not None and spec.origin and (Path(spec.origin).parent / "runner.py").exists():
            return Path(spec.origin).parent.parent
    raise ProfileError(
        "the reference workloads are not installed (neither slurm_gavel.reference.workloads "
        "nor a checkout's workloads/ is importable); install slurm-gavel from its wheel or run "
        "`slurm-gavel profile` from a checkout of slurm-gavel"
    )


def _worker_cmd(job_type: str, seconds: float, device: str, tiny: bool) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "slurm_gavel.profiling.worker",
        "--job-type",
        job_type,
        "--seconds",
        str(seconds),
        "--device",
        device,
    ]
    return [*cmd, "--tiny"] if tiny else cmd


def _run_workers(cmds: list[list[str]], sync: Path | None, timeout: float) -> list[dict]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(workloads_path()), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for c in cmds
    ]
    try:
        if sync is not None:  # start the measured window of all workers together
            deadline = time.monotonic() + timeout
            while not all((sync / f"ready-{i}").exists() for i in range(len(cmds))):
                if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            (sync / "go").touch()
        results = []
        for p, c in zip(procs, cmds, strict=True):
            out, err = p.communicate(timeout=timeout)
            if p.returncode != 0:
                why = err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}"
                raise ProfileError(f"worker `{' '.join(c[3:])}` failed: {why}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def measure_alone(
    job_type: str,
    scale_factor: int,
    *,
    seconds: float,
    device: str,
    tiny: bool = False,
    timeout: float = 900,
) -> Measurement:
    base = _worker_cmd(job_type, seconds, device, tiny)
    if scale_factor == 1:
        alone = _run_workers([base], None, timeout)[0]
        return Measurement(job_type, 1, alone["steps_per_s"], alone["steps"])
    with socket.socket() as s:  # a free port for the process group
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmds = [
        [*base, "--rank", str(r), "--world", str(scale_factor), "--master-port", str(port)]
        for r in range(scale_factor)
    ]
    res = _run_workers(cmds, None, timeout)
    # ranks step in lockstep (all-reduce); the slowest rank is the job's rate
    rank0 = min(res, key=lambda r: r["steps_per_s"])
    return Measurement(job_type, scale_factor, rank0["steps_per_s"], rank0["steps"])


def measure_pair(
    a: str, b: str, *, seconds: float, device: str, tiny: bool = False, timeout: float = 900
) -> Measurement:
    with tempfile.TemporaryDirectory(prefix="gavel-profile-") as d:
        sync = Path(d)
        cmds = [
            [*_worker_cmd(jt, seconds, device, tiny), "--sync-dir", d, "--slot", str(i)]
            for i, jt in enumerate((a, b))
        ]
        ra, rb = _run_workers(cmds, sync, timeout)
    return Measurement(a, 1, ra["steps_per_s"], ra["steps"], b, rb["steps_per_s"])


@dataclass(frozen=True)
class Cell:
    """One measurement: a job type alone at a scale factor, or with a partner at 1."""

    job_type: str
    scale_factor: int = 1
    partner: str | None = None

    def label(self) -> str:
        if self.partner is not None:
            return f"{self.job_type} + {self.partner}"
        return f"{self.job_type} x{self.scale_factor}"


def plan(job_types: Iterable[str], scale_factors: Iterable[int], pairs: bool) -> list[Cell]:
    """Every job type at every scale factor, then (with `pairs`) every unordered pair."""
    types = list(job_types)
    cells = [Cell(jt, sf) for jt, sf in itertools.product(types, scale_factors)]
    if pairs:
        cells += [Cell(a, 1, b) for a, b in itertools.combinations_with_replacement(types, 2)]
    return cells


def measure(cell: Cell, *, seconds: float, device: str, tiny: bool = False) -> Measurement:
    if cell.partner is not None:
        return measure_pair(cell.job_type, cell.partner, seconds=seconds, device=device, tiny=tiny)
    return measure_alone(
        cell.job_type, cell.scale_factor, seconds=seconds, device=device, tiny=tiny
    )


def merge(
    table: ThroughputTable,
    results: Iterable[Measurement],
    *,
    gpu_type: str,
    device_name: str,
    date: str | None = None,
    tiny: bool = False,
) -> ThroughputTable:
    """Write the measurements into ``table`` (in place, and returned) with notes."""
    date = date or time.strftime("%Y-%m-%d", time.gmtime())
    what = "tiny config (tests only), " if tiny else ""
    if device_name == "cpu":
        what += f"{CPU_CAVEAT}, "
    note = f"measured by slurm-gavel profile on {device_name}, {what}{date}"
    for m in results:
        if m.partner is None:
            table.alone.setdefault((m.job_type, m.scale_factor), {})[gpu_type] = m.steps_per_s
            table.set_note(m.job_type, m.scale_factor, gpu_type, note)
            continue
        assert m.partner_steps_per_s is not None
        key, value = (m.job_type, m.partner, 1), (m.steps_per_s, m.partner_steps_per_s)
        if (m.partner, m.job_type, 1) in table.pairs:  # keep the stored orientation
            key, value = (m.partner, m.job_type, 1), (value[1], value[0])
        table.pairs.setdefault(key, {})[gpu_type] = value
        # two workload processes on one device over the same window: measured, so no
        # longer an estimate learned from reports
        table.notes[pair_note_key(*key, gpu_type)] = f"{note}, both jobs on one device at once"
    extra = f"{gpu_type}: slurm-gavel profile on {device_name}, {what}{date}"
    if extra not in table.source:
        table.source = f"{table.source}; {extra}" if table.source else extra
    return table
