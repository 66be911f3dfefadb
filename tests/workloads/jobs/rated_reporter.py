"""A managed job without torch (the chroot releases' jobs have python3 and the standard
library only): paces its steps to its own speed on the node's GPU type
(GAVEL_EMULATE_RATES, workloads/emulate.py), or without them to the table's rate for
its type (GAVEL_JOB_TYPE) at the GPU count its run was given (a moldable job's range in
GAVEL_SCALE: emulate.run_scale); writes progress reports every second with
slurm_gavel.job's ProgressReporter, checkpoints its step count and exits 99 on SIGUSR1
(the daemon's checkpoint signal), resumes from it. Each run logs
`start RESTART WHERE RATE STEP`, WHERE the GPU type (`v100x2` for a table-paced run:
type and count).

    python3 rated_reporter.py STEPS SPOOL_DIR STATE_DIR
"""

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from slurm_gavel.job.progress import ProgressReporter
from workloads import emulate

steps, spool, state = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
job = os.environ["SLURM_JOB_ID"]
ckpt = state / f"{job}.step"
start = int(ckpt.read_text()) if ckpt.exists() else 0
if os.environ.get(emulate.ENV_RATES):
    emu = emulate.emulation_for_rates(emulate.rates_from(os.environ[emulate.ENV_RATES]))
    where = emu.gpu_type
else:
    emu = emulate.emulation_for(os.environ["GAVEL_JOB_TYPE"], emulate.run_scale(os.environ), 1.0)
    where = f"{emu.gpu_type}x{emu.gpus}"
restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
reporter = ProgressReporter(job, None, spool, interval=1.0, restart_count=restart,
                            start_step=start)  # fmt: skip


def stop(*_: object) -> None:
    ckpt.write_text(str(reporter.steps))
    reporter.write("preempted")
    sys.exit(99)


signal.signal(signal.SIGUSR1, stop)
with open(state / f"{job}.log", "a") as log:
    log.write(f"start {restart} {where} {emu.rate} {start}\n")
pacer = emulate.Pacer(emu.rate)
pacer.begin()
while reporter.steps < steps:
    pacer.step_done()
    reporter.step_done()
reporter.write("done")
with open(state / f"{job}.log", "a") as log:
    log.write(f"done {reporter.steps}\n")
