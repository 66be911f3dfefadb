"""slurm_gavel.job: the library used INSIDE training jobs managed by slurm-gavel.

* :class:`GavelJob` / :func:`managed_steps` wrap the training loop: on the checkpoint
  signal (SIGUSR1) they finish the step, save an atomic checkpoint and exit 99 so Slurm
  requeues and holds the job; after a requeue they resume from the newest valid one.
* Progress (steps, steps/s) goes to ``$GAVEL_PROGRESS_DIR/<uid>/<job id>.json`` for the
  daemon (the daemon makes that folder for the user; the library never does).
* Checkpoint folders are private (0700, refused if someone else can write them) and
  checkpoints load without running code unless ``allow_pickle=True``.
* Multi-rank jobs (torch.distributed): the ranks stop on one step; rank 0 saves, or
  with ``GavelJob(..., sharded=True)`` every rank saves its shard through
  torch.distributed.checkpoint (FSDP; job/sharded.py).
* The world size may change between runs (a moldable job): ``job.world_size``,
  ``job.previous_world_size`` and ``on_world_size_change`` hooks say so, and a declared
  ``global_batch``/``micro_batch`` keeps the global batch through the accumulation
  steps (``job.batch``; job/world.py).
* Outside Slurm everything is a no-op. torch is imported only when a checkpoint is
  written or read, so jobs without torch can use the library.

It needs only the Python standard library (3.9+) and ships on its own as the
``slurm-gavel-job`` distribution (jobpkg/), so training environments need not install
the scheduler. See docs/user-guide.md.
"""

from slurm_gavel.job._version import __version__
from slurm_gavel.job.checkpoint import (
    Checkpoint,
    CheckpointDirError,
    UnsafeCheckpointError,
    load_latest,
    read_checkpoint,
    save_checkpoint,
)
from slurm_gavel.job.env import JobEnv, read_env
from slurm_gavel.job.loop import GavelJob, managed_steps
from slurm_gavel.job.progress import ProgressReporter, read_report, report_path
from slurm_gavel.job.ranks import exit_ranks
from slurm_gavel.job.world import (
    BatchPlan,
    BatchPlanError,
    CheckpointWorldError,
    WorldChange,
    plan_batch,
)

__all__ = [
    "BatchPlan",
    "BatchPlanError",
    "Checkpoint",
    "CheckpointDirError",
    "CheckpointWorldError",
    "GavelJob",
    "JobEnv",
    "ProgressReporter",
    "UnsafeCheckpointError",
    "WorldChange",
    "__version__",
    "exit_ranks",
    "load_latest",
    "managed_steps",
    "plan_batch",
    "read_checkpoint",
    "read_env",
    "read_report",
    "report_path",
    "save_checkpoint",
]
