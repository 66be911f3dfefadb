"""A paced job without torch (the chroot releases' jobs have python3 and the standard
library only): the runner's emulation loop -- workloads/emulate.py's pacer and
emulate_pairs' watch, as workloads/trainer.py wires them -- around steps that do no
work. Runs SECONDS, exits 99 on SIGUSR1 (the daemon's checkpoint signal), prints the
emulate lines and a JSON summary.

    python3 paced_probe.py JOB_TYPE SECONDS
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from workloads import emulate, emulate_pairs

job_type, seconds = sys.argv[1], float(sys.argv[2])
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(99))
emu = emulate.emulation_for(job_type, 1, 1.0)
watch = emulate_pairs.watch_for(job_type, 1, emu.gpu_type, 1.0, emu.rate, os.environ)
print(emu.describe(job_type, os.environ.get("SLURMD_NODENAME", "-"), "0"), flush=True)
pacer = emulate.Pacer(emu.rate)
pacer.begin()
emulate_pairs.follow(watch, pacer)
end = time.monotonic() + seconds
while time.monotonic() < end:
    pacer.step_done()
    emulate_pairs.follow(watch, pacer)
if watch is not None:
    watch.finish()
print(json.dumps({"steps": pacer.done, "paired_s": watch.paired_s if watch else None}))
