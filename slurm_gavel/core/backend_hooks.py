"""The optional hooks a backend may offer beyond ClusterBackend's observe() and act().

The round needs only observe() and act() (cluster_model.ClusterBackend); the daemon
does more with a backend that can: tell it which jobs a restarted daemon managed,
keep up between rounds, end preempted jobs' graces on time, give held jobs back to
Slurm, write each job's reason to its AdminComment, read Slurm's PrivateData, and
count what a round cost. Each capability is a small protocol here: the members that
only make sense together are one protocol (a backend that can tell when a grace
ends must also enforce it), the rest one each, since a backend may offer any of
them alone (the simulator: only private_data).

The daemon checks its backend once, when it is built (BackendHooks.of), as a
scheduler framework validates its plugins: the record says which protocols the
backend implements, and the daemon calls the hooks through it, never by probing
names. A backend that has some of a protocol's names but not all, a method that is
not callable with the daemon's arguments, or an attribute of the wrong type is a
BackendHookError then, naming each hook, not a surprise mid-round.

CONTRIBUTING.md ("A backend") says when the daemon calls each hook.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, get_origin, get_type_hints, runtime_checkable

from slurm_gavel.core.run_ends import RunEnd
from slurm_gavel.domain.model import JobId

# ---- after a restart ---------------------------------------------------------------------


@runtime_checkable
class Resumable(Protocol):
    def resume(self, job_ids: Iterable[JobId]) -> None:
        """The jobs a restarted daemon managed before (its saved state): the backend
        reads how those it no longer lists ended."""
        ...


# ---- between rounds ----------------------------------------------------------------------


@runtime_checkable
class BetweenRoundsUpkeep(Protocol):
    def between_rounds(self) -> None:
        """Upkeep off the round's path (the Slurm backend: its periodic full read)."""
        ...


@runtime_checkable
class GraceEnforcement(Protocol):
    def grace_due_in(self) -> float | None:
        """Seconds until the earliest preempted job's grace ends; None when none runs."""
        ...

    def enforce_grace(self) -> tuple[list[JobId], dict[JobId, str]]:
        """Requeue-hold the preempted jobs still running after their grace: (the jobs
        held, the jobs that failed -> why)."""
        ...


# ---- after a round -----------------------------------------------------------------------


@runtime_checkable
class HeldJobGiveBack(Protocol):
    @property
    def refused_held(self) -> dict[JobId, str]:
        """Held jobs the last observe saw claimed by a comment the grammar refuses ->
        why: the daemon gives them back."""
        ...

    def give_back(self, reasons: Mapping[JobId, str]) -> dict[JobId, str]:
        """Release held jobs no round can place to Slurm's own scheduling, the reason
        in their comment; returns those that failed -> why."""
        ...


@runtime_checkable
class AdminCommentWriter(Protocol):
    def set_admin_comments(self, texts: Mapping[JobId, str]) -> dict[JobId, str]:
        """Each job's AdminComment to the daemon's reason; returns those that failed ->
        why. Raises NotImplementedError where the backend cannot write it at all."""
        ...


# ---- at start ----------------------------------------------------------------------------


@runtime_checkable
class PrivateDataReader(Protocol):
    def private_data(self) -> str | None:
        """Slurm's PrivateData ("none", "jobs,usage"), None when it cannot be read now;
        may raise (NotImplementedError: the backend has no way to read it)."""
        ...


# ---- what a round's metrics and log lines add --------------------------------------------


@runtime_checkable
class CommandCounter(Protocol):
    @property
    def commands_issued(self) -> int:
        """Slurm commands run so far, retries included."""
        ...


@runtime_checkable
class CheckpointWaitTimes(Protocol):
    @property
    def checkpoint_waits(self) -> dict[JobId, float]:
        """Seconds the last act waited on each job it signalled, until it left."""
        ...


@runtime_checkable
class BackendWarnings(Protocol):
    @property
    def warnings(self) -> list[str]:
        """What the last observe found wrong in the cluster's data (a malformed
        comment), one sentence each."""
        ...


@runtime_checkable
class RunEndReports(Protocol):
    @property
    def run_ends(self) -> list[RunEnd]:
        """The managed jobs' runs the last observe found ended since the one before, by
        what ended them (core/run_ends.py): what the daemon's run watch counts."""
        ...


@runtime_checkable
class InterruptibleWaits(Protocol):
    def stop_waiting(self) -> None:
        """The daemon is stopping (SIGTERM): end the act's waits now (a preempted job's
        grace), so that the round ends, is logged and saved instead of being killed
        unlogged; the jobs waited for are left to the next act. Called from the signal
        handler: it only sets a flag."""
        ...


# Every optional hook protocol, in the order BackendHookError names their problems.
HOOK_PROTOCOLS: tuple[type, ...] = (
    Resumable,
    BetweenRoundsUpkeep,
    GraceEnforcement,
    HeldJobGiveBack,
    AdminCommentWriter,
    PrivateDataReader,
    CommandCounter,
    CheckpointWaitTimes,
    BackendWarnings,
    RunEndReports,
    InterruptibleWaits,
)


class BackendHookError(TypeError):
    """A backend offers a hook in a shape the daemon cannot call (BackendHooks.of)."""


@dataclass(frozen=True)
class BackendHooks:
    """Which optional hooks a backend offers: each field the backend itself, typed as
    the protocol it implements, or None. Built once by of(); the daemon calls hooks
    only through it."""

    resumable: Resumable | None = None
    upkeep: BetweenRoundsUpkeep | None = None
    grace: GraceEnforcement | None = None
    give_back: HeldJobGiveBack | None = None
    admin_comments: AdminCommentWriter | None = None
    private_data: PrivateDataReader | None = None
    command_counter: CommandCounter | None = None
    checkpoint_timer: CheckpointWaitTimes | None = None
    findings: BackendWarnings | None = None
    run_ends: RunEndReports | None = None
    waits: InterruptibleWaits | None = None

    @staticmethod
    def of(backend: object) -> BackendHooks:
        """The hooks `backend` offers; BackendHookError listing every hook whose shape
        is wrong (some of a protocol's names but not all, a method the daemon cannot
        call with its arguments, an attribute of the wrong type)."""
        problems = [p for proto in HOOK_PROTOCOLS for p in shape_problems(backend, proto)]
        if problems:
            raise BackendHookError(
                f"backend {type(backend).__name__}: optional hooks in the wrong shape "
                "(CONTRIBUTING.md, A backend): " + "; ".join(problems)
            )
        b = backend
        return BackendHooks(
            resumable=b if isinstance(b, Resumable) else None,
            upkeep=b if isinstance(b, BetweenRoundsUpkeep) else None,
            grace=b if isinstance(b, GraceEnforcement) else None,
            give_back=b if isinstance(b, HeldJobGiveBack) else None,
            admin_comments=b if isinstance(b, AdminCommentWriter) else None,
            private_data=b if isinstance(b, PrivateDataReader) else None,
            command_counter=b if isinstance(b, CommandCounter) else None,
            checkpoint_timer=b if isinstance(b, CheckpointWaitTimes) else None,
            findings=b if isinstance(b, BackendWarnings) else None,
            run_ends=b if isinstance(b, RunEndReports) else None,
            waits=b if isinstance(b, InterruptibleWaits) else None,
        )

    def commands_issued(self) -> int | None:
        """Slurm commands the backend has run so far; None where it does not count."""
        c = self.command_counter
        return c.commands_issued if c is not None else None

    def checkpoint_waits(self) -> dict[JobId, float]:
        """A copy of the last act's waits per signalled job; none where the backend
        does not wait (the simulator)."""
        t = self.checkpoint_timer
        return dict(t.checkpoint_waits) if t is not None else {}

    def ended_runs(self) -> list[RunEnd]:
        """The last observe's ended runs; none where the backend cannot tell."""
        r = self.run_ends
        return list(r.run_ends) if r is not None else []

    def warnings(self) -> Sequence[str]:
        """The last observe's findings; none where the backend reports none."""
        f = self.findings
        return (f.warnings or ()) if f is not None else ()


def hook_members(proto: type) -> dict[str, Any]:
    """A hook protocol's members: name -> its function (a method) or property."""
    return {
        name: value
        for name, value in vars(proto).items()
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    }


def shape_problems(backend: object, proto: type) -> list[str]:
    """What is wrong with how `backend` offers `proto`'s hooks; [] when it offers all
    of them in the right shape, or none."""
    members = hook_members(proto)
    present = [name for name in members if hasattr(backend, name)]
    if not present:
        return []
    if len(present) < len(members):
        missing = [name for name in members if name not in present]
        return [
            f"{', '.join(present)} without {', '.join(missing)} "
            f"({proto.__name__} needs {', '.join(_expected(members[n], n) for n in members)})"
        ]
    problems = []
    for name, member in members.items():
        value = getattr(backend, name)
        if isinstance(member, property):
            why = _attribute_problem(value, member)
        else:
            why = _method_problem(value, member)
        if why is not None:
            problems.append(f"{name} {why} ({proto.__name__}: {_expected(member, name)})")
    return problems


def _method_problem(value: object, member: Any) -> str | None:
    if not callable(value):
        return f"is of type {type(value).__name__}, not a method"
    arity = len(inspect.signature(member).parameters) - 1  # less self
    try:
        inspect.signature(value).bind(*([None] * arity))
    except ValueError:  # no signature to read (a builtin): trust it
        return None
    except TypeError:
        return f"cannot be called with {arity} argument{'s' if arity != 1 else ''}"
    return None


def _attribute_problem(value: object, member: property) -> str | None:
    hint = get_type_hints(member.fget)["return"]
    kind = get_origin(hint) or hint  # dict[JobId, str] -> dict
    if isinstance(value, kind):
        return None
    return f"is of type {type(value).__name__}, expected {kind.__name__}"


def _expected(member: Any, name: str) -> str:
    """How the protocol declares a hook, for the error: give_back(reasons: ...) -> ..."""
    if isinstance(member, property):
        return f"{name}: {member.fget.__annotations__['return']}"
    params = list(inspect.signature(member).parameters.values())[1:]
    args = ", ".join(f"{p.name}: {p.annotation}" for p in params)
    return f"{name}({args}) -> {member.__annotations__['return']}"
