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

A moldable job may come back on another number of GPUs (job/world.py): with
``GavelCallback(global_batch=256, micro_batch=32)`` the callback sets the trainer's
``accumulate_grad_batches`` so that ``micro x world x accumulation`` stays the global
batch (``keep_global_batch=False`` opts out), records the world size in the checkpoint
(the callback's state) and, on a resume at another count, says so and calls
``on_world_size_change`` hooks (``callback.world_size``, ``previous_world_size``).

Outside Slurm (no ``SLURM_JOB_ID``) the callback neither saves nor exits and
``ckpt_path()`` is None; a declared batch still sets the accumulation.
docs/frameworks/lightning.md has a complete sbatch script.
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
from slurm_gavel.job.world import (
    WORLD_KEY,
    BatchPlan,
    Hook,
    WorldRecord,
    WorldTracker,
    parse_record,
)

CHECKPOINT_NAME = "gavel-last.ckpt"


class GavelCallback(pl.Callback):
    """Checkpoint on the signal, exit for requeue-hold, resume with ``ckpt_path``."""

    def __init__(
        self,
        *,
        enabled: bool | None = None,
        env: Mapping[str, str] | None = None,
        checkpoint_dir: str | Path | None = None,
        global_batch: int | None = None,
        micro_batch: int | None = None,
        keep_global_batch: bool = True,
        accumulation_steps: int = 1,
        on_world_size_change: Hook | None = None,
    ) -> None:
        self.world = WorldTracker(
            global_batch,
            micro_batch,
            keep_global_batch=keep_global_batch,
            accumulation_steps=accumulation_steps,
            on_change=on_world_size_change,
        )
        self._record: WorldRecord | None = None  # the checkpoint's, until train start
        self._last_step = -1  # global_step at the previous batch end
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

    # ---- world size ----------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        return self.world.current

    @property
    def previous_world_size(self) -> int | None:
        return self.world.previous

    @property
    def batch(self) -> BatchPlan | None:
        return self.world.batch

    def on_world_size_change(self, hook: Hook) -> Hook:
        """Register ``hook(change)`` for a resume at another world size (see GavelJob)."""
        return self.world.add_hook(hook)

    def state_dict(self) -> dict[str, Any]:
        return {WORLD_KEY: self.world.record()}  # in the checkpoint's callback states

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Untrusted: a bad record stops the fit with CheckpointWorldError.
        self._record = parse_record(state_dict.get(WORLD_KEY), None, "(Lightning checkpoint)")

    def _plan(self, trainer: pl.Trainer) -> None:
        self.world.start(trainer.world_size)
        plan = self.world.batch
        if plan is None:
            return
        if trainer.accumulate_grad_batches not in (1, plan.accumulation_steps):
            warn(
                f"GavelCallback: accumulate_grad_batches={trainer.accumulate_grad_batches} "
                f"replaced by {plan.accumulation_steps} (global batch {plan.global_batch})"
            )
        trainer.accumulate_grad_batches = plan.accumulation_steps

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._plan(trainer)
        if not self.active:
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
        self._last_step = trainer.global_step
        if self._record is not None:  # resumed: the checkpoint's world is known now
            say = warn if trainer.is_global_zero else (lambda _: None)
            self.world.restored(self._record, trainer.global_step, say)
            self._record = None
        loader_batch = getattr(trainer.train_dataloader, "batch_size", None)
        plan = self.world.batch
        if plan is not None and isinstance(loader_batch, int) and loader_batch != plan.micro_batch:
            warn(
                f"GavelCallback: the training DataLoader's batch_size={loader_batch} is not "
                f"micro_batch={plan.micro_batch}: the global batch is not {plan.global_batch}"
            )

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
        # Between the micro batches of one accumulated step the gradients are not in the
        # checkpoint: stop only once an optimizer step is complete (global_step moved).
        stepped = trainer.global_step != self._last_step
        self._last_step = trainer.global_step
        if stepped:
            self.progress.step_done()
        stop = trainer.strategy.reduce_boolean_decision(self._requested, all=False)
        last = 0 < trainer.max_steps <= trainer.global_step
        if stop and stepped and not last:  # a signal during the last step: just finish
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
