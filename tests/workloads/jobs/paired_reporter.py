"""A paced job that keeps a progress report as slurm_gavel.job does and names its GPU
partner in it, or with ``unnamed`` leaves ``partner`` null as a real job does (no
torch: the chroot releases' jobs have python3 and the standard library only). Paced at
FACTOR x its table rate alone, FACTOR x its pair cell while Slurm shows it sharing a GPU
(workloads/emulate_pairs.py); reports every second into SPOOL/<uid>/<job id>.json.
Exits 99 on SIGUSR1 (the daemon's checkpoint signal).

    python3 paired_reporter.py JOB_TYPE SECONDS FACTOR SPOOL [unnamed]
"""

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from slurm_gavel.job.progress import ProgressReporter
from workloads import emulate, emulate_pairs

job_type, seconds, factor, spool = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
named = sys.argv[5:] != ["unnamed"]
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(99))
emu = emulate.emulation_for(job_type, 1, factor)
watch = emulate_pairs.watch_for(job_type, 1, emu.gpu_type, factor, emu.rate, os.environ)
progress = ProgressReporter(
    os.environ["SLURM_JOB_ID"],
    job_type,
    Path(spool),
    interval=1.0,
    restart_count=int(os.environ.get("SLURM_RESTART_COUNT") or 0),
)
print(emu.describe(job_type, os.environ.get("SLURMD_NODENAME", "-"), "0"), flush=True)
pacer = emulate.Pacer(emu.rate)
pacer.begin()
emulate_pairs.follow(watch, pacer, progress if named else None)
end = time.monotonic() + seconds
while time.monotonic() < end:
    pacer.step_done()
    progress.step_done()
    emulate_pairs.follow(watch, pacer, progress if named else None)
progress.write("finished")
