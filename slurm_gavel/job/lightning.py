"""PyTorch Lightning under slurm-gavel: :class:`GavelCallback` takes over from
``SLURMEnvironment``'s auto-requeue.

Lightning's ``SLURMEnvironment`` (on by default under Slurm) saves ``hpc_ckpt_*.ckpt``
on SIGUSR1 and runs ``scontrol requeue`` itself: the job comes back un-held and
bypasses the daemon. This callback instead:

* turns that auto-requeue off (and with it Lightning's SIGTERM bypass), and installs
  the checkpoint-signal handler (``GAVEL_CHECKPOINT_SIGNAL``, default USR1) itself;
* after every training batch asks all ranks whether any was signalled
  (``strategy.reduce_boolean_decision``), so every rank stops at the same step;
* saves with ``trainer.save_checkpoint`` (every rank calls it, global rank 0 writes)
  to a temporary name in the job's private checkpoint folder, renamed to
  ``gavel-last.ckpt`` once complete, and exits with the requeue-hold code (99);
* after the requeue, :meth:`GavelCallback.ckpt_path` names that file for
  ``trainer.fit(..., ckpt_path=...)``: Lightning restores the model, optimizers,
  schedulers, loops and ``global_step``.

    from slurm_gavel.job.lightning import GavelCallback

    gavel = GavelCallback()
    trainer = L.Trainer(max_steps=10_000, callbacks=[gavel])
    trainer.fit(model, data, ckpt_path=gavel.ckpt_path())

Outside Slurm (no ``SLURM_JOB_ID``) the callback does nothing and ``ckpt_path()`` is
None. docs/frameworks/lightning.md has a complete sbatch script.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import lightning.pytorch as pl  # the `lightning` package (pip install lightning), 2.x
from lightning.fabric.plugins.environments import SLURMEnvironment

from slurm_gavel.job.checkpoint import CheckpointDirError, open_private_dir, warn
from slurm_gavel.job.env import JobEnv, read_env
from slurm_gavel.job.progress import ProgressReporter
from slurm_gavel.job.ranks import RankGroup, hard_exit_at_interpreter_exit

CHECKPOINT_NAME = "gavel-last.ckpt"


class GavelCallback(pl.Callback):
    """Checkpoint on the signal, exit for requeue-hold, resume with ``ckpt_path``."""

    def __init__(
        self,
        *,
        enabled: bool | None = None,
        env: Mapping[str, str] | None = None,
        checkpoint_dir: str | Path | None = None,
    ) -> None:
        self.env: JobEnv = read_env(env)
        self.active = self.env.in_slurm if enabled is None else enabled
        folder = Path(checkpoint_dir) if checkpoint_dir is not None else self.env.checkpoint_dir
        self.checkpoint_dir: Path = folder if folder is not None else Path("gavel-checkpoints")
        self._requested = False
        self._old_handler: Any = None
        self.progress = ProgressReporter.for_job(self.env, active=self.active)

    # ---- resume ------------------------------------------------------------------------

    def ckpt_path(self) -> str | None:
        """The checkpoint to resume from after a requeue (for ``fit(ckpt_path=...)``).

        None on a first run, outside Slurm, or when no checkpoint was saved (a warning
        says so). The folder must be the job's own (:class:`CheckpointDirError`
        otherwise) and the file a regular file of the job's user, not a symlink.
        """
        if not (self.active and self.env.resuming):
            return None
        fd = open_private_dir(self.checkpoint_dir, create=False)
        if fd is None:
            warn(f"restart {self.env.restart_count} but no {self.checkpoint_dir}: from step 0")
            return None
        try:
            st = os.stat(CHECKPOINT_NAME, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            warn(f"restart {self.env.restart_count} but no {CHECKPOINT_NAME}: from step 0")
            return None
        finally:
            os.close(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise CheckpointDirError(
                f"{self.checkpoint_dir / CHECKPOINT_NAME} is not a regular file of yours: remove it"
            )
        return str(self.checkpoint_dir / CHECKPOINT_NAME)

    # ---- Lightning hooks ---------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or not self.active:
            return
        environment = getattr(
            getattr(trainer, "_accelerator_connector", None), "cluster_environment", None
        )
        if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
            # Lightning registers its handlers after this hook; off, it neither
            # requeues the job itself nor ignores SIGTERM.
            environment.auto_requeue = False
        if threading.current_thread() is threading.main_thread():
            self._old_handler = signal.signal(self.env.checkpoint_signal, self._on_signal)
        else:
            warn("GavelCallback: fit() outside the main thread: no checkpoint signal handler")
        if not trainer.is_global_zero:
            self.progress.folder = None  # one report per job, from rank 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._requested = True  # acted on after the batch in flight

    def request_checkpoint(self) -> None:
        """Checkpoint and exit after the current batch, as the signal does."""
        self._requested = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.progress.start_step = self.progress.steps = trainer.global_step

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if not self.active:
            return
        self.progress.step_done()
        stop = trainer.strategy.reduce_boolean_decision(self._requested, all=False)
        last = 0 < trainer.max_steps <= trainer.global_step
        if stop and not last:  # a signal during the last step: just finish
            self._checkpoint_and_exit(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.active:
            self.progress.write("finished")

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._old_handler is not None:
            signal.signal(self.env.checkpoint_signal, self._old_handler)
            self._old_handler = None

    # ---- checkpoint --------------------------------------------------------------------

    def save(self, trainer: pl.Trainer) -> Path:
        """Save now (every rank must call it): temp file, renamed when complete."""
        final = self.checkpoint_dir / CHECKPOINT_NAME
        tmp = self.checkpoint_dir / f".{CHECKPOINT_NAME}.{self.env.job_id or os.getpid()}.tmp"
        if trainer.is_global_zero:
            fd = open_private_dir(self.checkpoint_dir, create=True)
            assert fd is not None
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # a leftover of a run killed mid-save
        trainer.save_checkpoint(str(tmp))  # a collective; global rank 0 writes
        if trainer.is_global_zero:
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fchmod(fd, 0o600)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
            dfd = os.open(self.checkpoint_dir, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)  # the rename itself durable
            finally:
                os.close(dfd)
        trainer.strategy.barrier("gavel-checkpoint")
        return final

    def _checkpoint_and_exit(self, trainer: pl.Trainer) -> None:
        path = self.save(trainer)
        self.progress.write("checkpointed")
        code = self.env.requeue_exit_code
        warn(f"rank {trainer.global_rank}: checkpoint {path} at step {trainer.global_step}; "
             f"exiting {code}")  # fmt: skip
        sys.stdout.flush()
        if RankGroup.current() is not None:  # DDP: gloo can abort a rank in the teardown
            hard_exit_at_interpreter_exit(code)
        raise SystemExit(code)
