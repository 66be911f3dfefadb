"""Jobs of tests/workloads/jobs/rated_reporter.py on a live scenario (the learned rows' Slurm
tests): each paces its steps to its own speed per GPU type (GAVEL_EMULATE_RATES),
reports progress through the daemon's spool and logs a `start` line for each run in a
job-state folder, where it also keeps its checkpointed step.

    jobs = rated_jobs(scenario, "restart_aware: true\\n")  # before the daemon starts
    job = jobs.submit("j0", "v100=20,p100=10,k80=2", steps=400)
    jobs.starts(job)[-1].gpu_type
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

JOB = Path(__file__).resolve().parent / "workloads" / "jobs" / "rated_reporter.py"


class Start(NamedTuple):
    """One run of a job, from its `start` line."""

    restart: int  # SLURM_RESTART_COUNT
    gpu_type: str  # the type it ran on (as the emulation read it from the node)
    rate: float  # its steps/s there
    step: int  # the step it resumed from (0 on its first run)


@dataclass(frozen=True)
class RatedJobs:
    """The spool and job-state folders of a scenario's rated jobs, and their submission."""

    sc: Any  # tests/integration/conftest.py's Scenario
    spool: Path
    state: Path

    def submit(self, name: str, rates: str, steps: int, comment: str = "gavel:") -> str:
        """A managed job (`--comment=<comment>`) on the gpu partition; its output in
        <scenario dir>/<name>.out. Returns its job id."""
        cmd = f"GAVEL_EMULATE_RATES={rates} exec python3 {JOB} {steps} {self.spool} {self.state}"
        out = str(self.sc.dir / f"{name}.out")
        return str(
            self.sc.slurm.sbatch("-p", "gpu", "-o", out, f"--comment={comment}", "--wrap", cmd)
        )

    def starts(self, job: str) -> list[Start]:
        """Each run of the job so far, in order (none before its first start)."""
        log = self.state / f"{job}.log"
        if not log.exists():
            return []
        out = []
        for line in log.read_text().splitlines():
            if line.startswith("start"):
                _, restart, gpu, rate, step = line.split()
                out.append(Start(int(restart), gpu, float(rate), int(step)))
        return out

    def gpu_types(self, job: str) -> list[str]:
        """The GPU type of each run of the job, in order."""
        return [s.gpu_type for s in self.starts(job)]


def rated_jobs(sc: Any, config: str = "") -> RatedJobs:
    """Makes the scenario's spool (0755: the daemon makes each user's folder in it) and
    job-state folders, and appends
    `progress_dir` and config (YAML lines) to the daemon's config: call it before the
    daemon starts."""
    spool = sc.dir / "progress"
    spool.mkdir(mode=0o755)
    state = sc.dir / "jobstate"
    state.mkdir()
    with sc.daemon.config.open("a") as f:
        f.write(f"progress_dir: {spool}\n{config}")
    return RatedJobs(sc, spool, state)
