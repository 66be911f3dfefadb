"""Multi-rank jobs: the ranks of one torch.distributed job agree on when to stop.

The checkpoint signal reaches the ranks at different moments (or only some of them),
and a rank that leaves the training loop alone leaves the others hanging in their next
collective. So, when the job has a torch.distributed process group of more than one
rank, :class:`~slurm_gavel.job.loop.GavelJob` asks the group after every step whether
*any* rank was signalled (one all-reduce of one integer, MAX): all ranks get the same
answer at the same step, so they stop on the same step. Then:

* every rank's RNG states are gathered; rank 0 alone writes the checkpoint (the model
  and optimizer of data-parallel training are the same on every rank) with those RNG
  states inside, and tells the others whether it succeeded;
* all ranks exit with the requeue-hold code together;
* on resume every rank reads the same newest checkpoint (the folder must be on a file
  system that every node sees) and restores its own RNG states; the ranks check that
  they all resumed at the same step, and stop with a clear error if not.

torch is only touched when the job itself has imported and initialised
torch.distributed; this module imports nothing else.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
from typing import Any, NoReturn

# The key, inside a checkpoint's state, of the list of every rank's RNG states.
RANK_RNG_KEY = "_gavel_rank_rng"


class RankMismatchError(RuntimeError):
    """The ranks of one job did not resume from, or could not save, the same checkpoint."""


class RankGroup:
    """The job's initialised torch.distributed default process group (world size > 1)."""

    def __init__(self, dist: Any) -> None:
        import torch

        self._dist = dist
        self._torch = torch
        self.rank: int = dist.get_rank()
        self.world_size: int = dist.get_world_size()
        backend = str(dist.get_backend())
        # NCCL reduces CUDA tensors only; gloo/mpi take CPU tensors.
        self._device = (
            torch.device("cuda", torch.cuda.current_device())
            if "nccl" in backend
            else torch.device("cpu")
        )

    @classmethod
    def current(cls) -> RankGroup | None:
        """The group when the job runs one, else None (single process, or no torch)."""
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        if dist.get_world_size() <= 1:
            return None
        return cls(dist)

    def _max(self, values: list[int]) -> list[int]:
        t = self._torch.tensor(values, dtype=self._torch.int64, device=self._device)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.MAX)
        return [int(v) for v in t.tolist()]

    def any(self, flag: bool) -> bool:
        """True on every rank when at least one rank passed True (a collective)."""
        return self._max([int(flag)])[0] > 0

    def all(self, flag: bool) -> bool:
        """True on every rank when every rank passed True (a collective)."""
        return self._max([int(not flag)])[0] == 0

    def step_range(self, step: int) -> tuple[int, int]:
        """(lowest, highest) step over the ranks (a collective)."""
        high, neg_low = self._max([step, -step])
        return -neg_low, high

    def shutdown(self) -> None:
        """Leave the group together before exiting (a collective; errors ignored).

        A rank that exits while its peers still hold connections can abort in gloo's
        teardown ("terminate called without an active exception", exit 134 instead
        of the requeue code); a barrier and destroying the group first make it rare,
        skipping the teardown (:func:`hard_exit`) ends it.
        """
        try:
            self._dist.barrier()
            self._dist.destroy_process_group()
        except Exception:  # exiting anyway: the exit code matters, not the teardown
            pass

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank (a collective)."""
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out


def exit_ranks(code: int = 0) -> NoReturn:
    """End a multi-rank job: the ranks leave the process group together, then each
    process exits with ``code`` without the interpreter's teardown.

    Call it last in a torch.distributed script instead of ``destroy_process_group()``.
    torch 2.13's gloo can abort a rank in the teardown when a peer leaves at another
    moment ("terminate called without an active exception", exit 134): Slurm then
    records a finished job as FAILED. The standard streams and logging handlers are
    flushed first; atexit handlers do not run. Without a group it is ``sys.exit(code)``.
    """
    group = RankGroup.current()
    if group is None:
        sys.exit(code)
    group.shutdown()
    hard_exit(code)


def hard_exit(code: int) -> NoReturn:
    """Flush what Python buffers (streams, logging) and leave with ``code`` at once."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing left to lose
            stream.flush()
    os._exit(code)


def hard_exit_at_interpreter_exit(code: int) -> None:
    """After the stack unwinds (the job's own ``finally`` and ``with`` blocks run), exit
    with ``code`` before the teardown that can abort a rank (see :func:`exit_ranks`).
    Registered last, it runs first of the atexit handlers: the others are skipped."""
    atexit.register(hard_exit, code)


def world_size_now() -> int:
    """The job's number of ranks: torch.distributed's world size once initialised, else 1."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return int(dist.get_world_size())
