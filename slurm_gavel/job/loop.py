"""The training-loop wrapper: checkpoint on the signal, exit for requeue, resume on restart.

Like Gavel's GavelIterator, but for Slurm: the daemon preempts a job by sending it
the checkpoint signal (SIGUSR1 by default); the wrapper lets the current step finish,
saves model, optimizer, step count and RNG states, and exits with the requeue-hold
code (99) so Slurm keeps the job held in the queue. When the daemon starts it again,
``SLURM_RESTART_COUNT`` is > 0 and the wrapper loads the newest valid checkpoint.

    from slurm_gavel.job import GavelJob

    with GavelJob(model, optimizer) as job:
        for step in job.steps(10_000):     # starts at the restored step after a restart
            train_one_step(step)

Outside Slurm (no SLURM_JOB_ID) ``steps`` is a plain ``range`` and nothing is saved,
unless ``enabled=True`` is passed.

Multi-rank jobs (torch.distributed initialised before the loop starts): the ranks agree
on one stop step, rank 0 saves, all exit together and resume from the same step
(job/ranks.py). With ``sharded=True`` every rank saves its own shard through
torch.distributed.checkpoint instead (FSDP-style sharded state, job/sharded.py).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, NoReturn, TypeVar

from slurm_gavel.job.checkpoint import capture_rng, save_checkpoint, warn
from slurm_gavel.job.env import JobEnv, read_env
from slurm_gavel.job.progress import ProgressReporter
from slurm_gavel.job.ranks import (
    RANK_RNG_KEY,
    RankGroup,
    RankMismatchError,
    hard_exit_at_interpreter_exit,
    world_size_now,
)
from slurm_gavel.job.resume import load_plain, load_shards, restore_world
from slurm_gavel.job.sharded import SoloGroup, save_sharded
from slurm_gavel.job.world import WORLD_KEY, BatchPlan, Hook, WorldTracker

T = TypeVar("T")


def _state_of(obj: Any) -> Any:
    return obj.state_dict() if hasattr(obj, "state_dict") else obj


class GavelJob:
    """Checkpoint/resume/progress for one training loop. Also a context manager.

    ``model`` and ``optimizer`` (and any ``**stateful`` objects with
    ``state_dict``/``load_state_dict``, e.g. an LR scheduler or a GradScaler) are
    saved and restored; other ``**stateful`` values must be plain data (numbers,
    strings, lists, dicts, tuples, tensors) and are returned by :meth:`restored`
    after a resume. Other objects load only with ``allow_pickle=True`` (full
    unpickling: whoever can write the checkpoint folder can then run code as you).
    The checkpoint folder is made mode 0700 and refused when another user owns it or
    group/others can write it (:class:`~slurm_gavel.job.checkpoint.CheckpointDirError`).

    ``sharded=True``: every rank saves its shard with torch.distributed.checkpoint
    into one directory per step (for FSDP and other state split across ranks; the
    model and optimizer go through ``get_state_dict``/``set_state_dict``). Without
    it, rank 0 saves one plain ``torch.load``-able file (data-parallel training).

    The world size may change between runs (a moldable job, job/world.py):
    ``job.world_size`` is this run's, ``job.previous_world_size`` the checkpoint's, and
    ``on_world_size_change`` (or :meth:`on_world_size_change`) is called on a resume at
    another count. Declare ``global_batch`` and ``micro_batch`` and ``job.batch`` gives
    the accumulation steps that keep the global batch (``keep_global_batch=False``:
    ``accumulation_steps`` is kept instead). On another count, each rank's RNG streams
    are reseeded (:func:`~slurm_gavel.job.world.reseed_rank`) instead of restored.
    """

    def __init__(
        self,
        model: Any = None,
        optimizer: Any = None,
        *,
        enabled: bool | None = None,
        checkpoint_every: int | None = None,
        env: Mapping[str, str] | None = None,
        checkpoint_dir: str | Path | None = None,
        allow_pickle: bool | None = None,
        sharded: bool = False,
        global_batch: int | None = None,
        micro_batch: int | None = None,
        keep_global_batch: bool = True,
        accumulation_steps: int = 1,
        on_world_size_change: Hook | None = None,
        **stateful: Any,
    ) -> None:
        self.world = WorldTracker(
            global_batch,
            micro_batch,
            keep_global_batch=keep_global_batch,
            accumulation_steps=accumulation_steps,
            on_change=on_world_size_change,
        )
        self.env: JobEnv = read_env(env)
        self.active = self.env.in_slurm if enabled is None else enabled
        self.objects: dict[str, Any] = {
            k: v
            for k, v in {"model": model, "optimizer": optimizer, **stateful}.items()
            if v is not None
        }
        self.checkpoint_dir = (
            Path(checkpoint_dir) if checkpoint_dir is not None else self.env.checkpoint_dir
        )
        if self.active and self.checkpoint_dir is None:
            self.checkpoint_dir = Path("gavel-checkpoints")
        self.checkpoint_every = checkpoint_every
        # Full unpickling on load runs code from the file: off unless asked for
        # (GAVEL_CHECKPOINT_ALLOW_PICKLE=1), for stateful values that are not plain data.
        self.allow_pickle = (
            self.env.checkpoint_allow_pickle if allow_pickle is None else allow_pickle
        )
        self.sharded = sharded
        self.step = 0
        self._restored_values: dict[str, Any] = {}
        self._requested = False
        self._old_handler: Any = None
        self._resumed = False
        self._group: RankGroup | None = None  # found on resume (torch.distributed)
        self.progress = ProgressReporter.for_job(self.env, active=self.active)
        if self.active:
            self._install_handler()

    # ---- signal --------------------------------------------------------------------

    def _install_handler(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            warn("GavelJob created outside the main thread: no checkpoint signal handler")
            return
        self._old_handler = signal.signal(self.env.checkpoint_signal, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only set a flag: the step in flight finishes, the loop checkpoints after it.
        self._requested = True

    @property
    def checkpoint_requested(self) -> bool:
        return self._requested

    def request_checkpoint(self) -> None:
        """Ask for checkpoint-and-exit after the current step (as the signal does)."""
        self._requested = True

    # ---- world size ----------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        """This run's number of ranks (1 without a torch.distributed group)."""
        return self.world.current if self._resumed else world_size_now()

    @property
    def previous_world_size(self) -> int | None:
        """The number of ranks of the run that wrote the checkpoint resumed from (or None)."""
        return self.world.previous

    @property
    def batch(self) -> BatchPlan | None:
        """The batch plan (global/micro batch, accumulation steps) of this run, if declared."""
        return self.world.batch

    @property
    def accumulation_steps(self) -> int:
        """Micro batches per rank per optimizer step (1 without a declared batch)."""
        return self.world.batch.accumulation_steps if self.world.batch else 1

    def on_world_size_change(self, hook: Hook) -> Hook:
        """Register ``hook(change)`` for a resume at another world size; a decorator too.

        Called on every rank once the checkpoint is loaded (``change.previous``,
        ``change.current``, ``change.step``, ``change.batch``); registered after that
        resume, it is called at once.
        """
        return self.world.add_hook(hook)

    # ---- resume ------------------------------------------------------------------------

    def resume(self) -> int:
        """Load the newest valid checkpoint when the job was requeued; returns the step.

        Called by :meth:`steps`/:meth:`iterate` on first use; call it yourself to know
        the start step earlier (e.g. to skip data). Idempotent.
        """
        if self._resumed:
            return self.step
        self._resumed = True
        if self.active:
            self._join_ranks()
        self.world.start(self._group.world_size if self._group else world_size_now())
        if self.active and self.env.resuming and self.checkpoint_dir is not None:
            self._load()
        if self._group is not None:
            low, high = self._group.step_range(self.step)
            if low != high:
                raise RankMismatchError(
                    f"the ranks resumed at different steps ({low}..{high}): the checkpoint "
                    f"folder {self.checkpoint_dir} must be on a file system every node sees "
                    f"(--gavel-checkpoint-dir)"
                )
        return self.step

    def _join_ranks(self) -> None:
        """Find the job's process group; only rank 0 then writes progress reports."""
        self._group = RankGroup.current()
        if self._group is not None and self._group.rank != 0:
            self.progress.folder = None

    def _load(self) -> None:
        assert self.checkpoint_dir is not None
        if self.sharded:
            group = self._group or SoloGroup()
            names = list(self.objects)
            stateful = self._stateful({})
            got = load_shards(group, self.checkpoint_dir, names, stateful, self.allow_pickle)
        else:
            got = load_plain(self.checkpoint_dir, self.objects, self.allow_pickle)
        if got is None:
            kind = "complete sharded" if self.sharded else "valid"
            warn(
                f"restart {self.env.restart_count} but no {kind} checkpoint in "
                f"{self.checkpoint_dir}: starting from step 0"
            )
            return
        self._restored_values.update(got.values)
        self.step = self.progress.start_step = self.progress.steps = got.step
        warn(f"resumed from {got.path} at step {got.step}")
        restore_world(self.world, got, self._group.rank if self._group is not None else 0)

    def _stateful(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return {
            k: o for k, o in self.objects.items() if hasattr(o, "state_dict") and k not in values
        }

    def restored(self, name: str, default: Any = None) -> Any:
        """A plain (non-state_dict) value restored from the checkpoint, else ``default``."""
        return self._restored_values.get(name, default)

    # ---- checkpoint ----------------------------------------------------------------------

    def checkpoint(self, **values: Any) -> Path | None:
        """Save now (no exit). Plain ``values`` replace the stateful ones of that name.

        In a multi-rank job every rank must call it at the same step (a collective):
        rank 0 writes the file, with every rank's RNG states; the others get None.
        With ``sharded=True`` every rank writes its shard and gets the directory.
        """
        if not self.active or self.checkpoint_dir is None:
            return None
        if not self._resumed:  # called before the loop: find the ranks (else all save as 0)
            self._join_ranks()
            self.world.start(self._group.world_size if self._group else world_size_now())
        group = self._group
        if self.sharded:
            solo = group or SoloGroup()
            plain = {k: o for k, o in self.objects.items() if not hasattr(o, "state_dict")}
            plain.update(values)
            extra = {"step": self.step, "rng": solo.gather(capture_rng()), "values": plain}
            extra[WORLD_KEY] = self.world.record()
            return save_sharded(solo, self.checkpoint_dir, self.step, self._stateful(values), extra)
        if group is None:
            return save_checkpoint(self.checkpoint_dir, self.step, self._state(values))
        rank_rng = group.gather(capture_rng())
        path: Path | None = None
        error: BaseException | None = None
        if group.rank == 0:
            state = self._state(values)
            state[RANK_RNG_KEY] = rank_rng
            try:
                path = save_checkpoint(self.checkpoint_dir, self.step, state)
            except Exception as e:  # told to the other ranks first, raised below
                error = e
        # Nobody goes on (or exits for requeue) before the file is complete, and a
        # failed save stops every rank instead of leaving them in the next collective.
        if not group.all(error is None):
            if error is not None:
                raise error
            raise RankMismatchError(f"rank 0 could not save the checkpoint at step {self.step}")
        return path

    def _state(self, values: dict[str, Any]) -> dict[str, Any]:
        state = {name: _state_of(obj) for name, obj in self.objects.items()}
        state.update(values)
        state[WORLD_KEY] = self.world.record()
        return state

    def _stop_requested(self) -> bool:
        """Whether to checkpoint and exit now: the same answer on every rank."""
        if self._group is None:
            return self._requested
        return self._group.any(self._requested)

    def checkpoint_and_exit(self) -> NoReturn:
        """Save, report, and exit with the requeue-hold code so Slurm holds the job."""
        path = self.checkpoint()
        self.progress.write("checkpointed")
        where = "" if self._group is None else f"rank {self._group.rank}: "
        warn(f"{where}checkpoint {path} at step {self.step}; exiting {self.env.requeue_exit_code}")
        sys.stdout.flush()
        if self._group is not None:
            self._group.shutdown()
            # gloo can abort a rank in the interpreter's teardown (exit 134: the job
            # FAILED, not held); once the stack has unwound, leave before it.
            hard_exit_at_interpreter_exit(self.env.requeue_exit_code)
        raise SystemExit(self.env.requeue_exit_code)

    def _after_step(self, last: bool) -> None:
        self.step += 1
        self.progress.step_done()
        # A signal that lands during the last step is ignored: the work is done, and
        # exiting for requeue would cost a restart that only reloads and finishes.
        if self._stop_requested() and not last:
            self.checkpoint_and_exit()
        if self.checkpoint_every and self.step % self.checkpoint_every == 0:
            self.checkpoint()

    # ---- loops -------------------------------------------------------------------------

    def steps(self, total: int | None = None) -> Iterator[int]:
        """Yield step numbers from the resumed step up to ``total`` (GAVEL_TOTAL_STEPS)."""
        total = self.env.total_steps if total is None else total
        if total is None:
            raise ValueError("steps(): give total steps (or set GAVEL_TOTAL_STEPS)")
        self.resume()
        if self._stop_requested():  # signalled during set-up: nothing new but the step
            self.checkpoint_and_exit()
        while self.step < total:
            yield self.step
            self._after_step(last=self.step + 1 >= total)
        self.progress.write("finished")

    def iterate(self, batches: Iterable[T]) -> Iterator[T]:
        """Yield items of ``batches``; each item is one step (wraps a data loader).

        The data loader's position is not saved: after a resume it starts over, with
        the RNG states restored (use :meth:`resume`'s step to skip ahead if it matters).
        When ``batches`` has a length (a map-style DataLoader, a list), a signal during
        its last item lets the job finish, as in :meth:`steps`; an iterable without
        one cannot say which item is last, so there the job still exits for requeue.
        """
        self.resume()
        if self._stop_requested():
            self.checkpoint_and_exit()
        try:
            last_index = len(batches) - 1  # type: ignore[arg-type]
        except TypeError:  # no __len__, or an IterableDataset's DataLoader refusing one
            last_index = -1
        for i, item in enumerate(batches):
            yield item
            self._after_step(last=i == last_index)
        self.progress.write("finished")

    # ---- context manager ----------------------------------------------------------------

    def close(self) -> None:
        if self._old_handler is not None:
            signal.signal(self.env.checkpoint_signal, self._old_handler)
            self._old_handler = None

    def __enter__(self) -> GavelJob:
        self.resume()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def managed_steps(
    total: int, model: Any = None, optimizer: Any = None, **kwargs: Any
) -> Iterator[int]:
    """Function form: ``for step in managed_steps(n, model, opt): ...`` (see GavelJob)."""
    job = GavelJob(model, optimizer, **kwargs)
    try:
        yield from job.steps(total)
    finally:
        job.close()
