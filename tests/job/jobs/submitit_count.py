"""A submitit Checkpointable counting steps, for tests/job/test_submitit_on_slurm.py."""

import os
import time
from pathlib import Path

from slurm_gavel.job.submitit import GavelCheckpointable


class Count(GavelCheckpointable):
    def __init__(self) -> None:
        self.done = 0

    def __call__(self, total: int, out: str) -> int:
        restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
        with open(Path(out) / "log", "a") as log:
            print(f"start restart={restarts} done={self.done}", file=log, flush=True)
        while self.done < total:
            time.sleep(0.1)
            self.done += 1
            (Path(out) / "step").write_text(f"{self.done}\n")
        return self.done
