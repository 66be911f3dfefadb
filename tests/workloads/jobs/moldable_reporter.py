"""A moldable managed job without torch (the chroot releases' jobs have python3 and the
standard library only): paces its steps to the table's rate for its job type at the GPU
count its run was given (workloads/emulate.py: run_scale, emulation_for), writes
progress reports every second, checkpoints its step count and exits 99 on SIGUSR1 (the
daemon's checkpoint signal), resumes from it. Its `start` lines are rated_reporter.py's.

    GAVEL_SCALE=MIN-MAX python3 moldable_reporter.py JOB_TYPE STEPS SPOOL_DIR STATE_DIR
"""

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from slurm_gavel.job.progress import ProgressReporter
from workloads import emulate

job_type, steps = sys.argv[1], int(sys.argv[2])
spool, state = Path(sys.argv[3]), Path(sys.argv[4])
job = os.environ["SLURM_JOB_ID"]
ckpt = state / f"{job}.step"
start = int(ckpt.read_text()) if ckpt.exists() else 0
emu = emulate.emulation_for(job_type, emulate.run_scale(os.environ), 1.0)
restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
reporter = ProgressReporter(job, None, spool, interval=1.0, restart_count=restart,
                            start_step=start)  # fmt: skip


def stop(*_: object) -> None:
    ckpt.write_text(str(reporter.steps))
    reporter.write("preempted")
    sys.exit(99)


signal.signal(signal.SIGUSR1, stop)
with open(state / f"{job}.log", "a") as log:
    log.write(f"start {restart} {emu.gpu_type}x{emu.gpus} {emu.rate} {start}\n")
pacer = emulate.Pacer(emu.rate)
pacer.begin()
while reporter.steps < steps:
    pacer.step_done()
    reporter.step_done()
reporter.write("done")
with open(state / f"{job}.log", "a") as log:
    log.write(f"done {reporter.steps}\n")
