"""The optional backend hooks (core/backend_hooks.py): which a backend offers, checked
once, and a clear error for a hook in the wrong shape."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.backend_hooks import (
    HOOK_PROTOCOLS,
    BackendHookError,
    BackendHooks,
    hook_members,
)
from slurm_gavel.core.run_ends import RunEnd, RunEndKind
from slurm_gavel.domain.throughputs import load_table

ROOT = Path(__file__).resolve().parents[2]

# The hooks the daemon calls, with the Slurm backend's names (CONTRIBUTING.md).
HOOK_NAMES = {
    "resume",
    "between_rounds",
    "grace_due_in",
    "enforce_grace",
    "give_back",
    "set_admin_comments",
    "private_data",
    "checkpoint_waits",
    "commands_issued",
    "warnings",
    "refused_held",
    "run_ends",
    "stop_waiting",
}


class Bare:
    """observe and act only (not called here)."""


class Every:
    """Every hook, in the Slurm backend's shapes (plain attributes and a property)."""

    def __init__(self) -> None:
        self.refused_held: dict[str, str] = {"9": "job 9: bad comment"}
        self.warnings: list[str] = ["job 7: unknown key"]
        self.checkpoint_waits: dict[str, float] = {"3": 1.5}
        self.run_ends: list[RunEnd] = [RunEnd("5", RunEndKind.CHECKPOINTED)]
        self.resumed: list[list[str]] = []

    def resume(self, job_ids: Iterable[str]) -> None:
        self.resumed.append(list(job_ids))

    def between_rounds(self) -> None:
        pass

    def grace_due_in(self) -> float | None:
        return None

    def enforce_grace(self) -> tuple[list[str], dict[str, str]]:
        return [], {}

    def give_back(self, reasons: Mapping[str, str]) -> dict[str, str]:
        return {}

    def stop_waiting(self) -> None:
        pass

    def set_admin_comments(self, texts: Mapping[str, str]) -> dict[str, str]:
        return {}

    def private_data(self) -> str | None:
        raise NotImplementedError("slurmrestd does not publish it")  # called later, not here

    @property
    def commands_issued(self) -> int:
        return 12


def test_the_protocols_declare_the_thirteen_hooks_the_daemon_calls():
    names = [n for proto in HOOK_PROTOCOLS for n in hook_members(proto)]
    assert sorted(names) == sorted(HOOK_NAMES)  # each once


def test_contributing_documents_every_hook():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("### A backend", 1)[1].split("\n### ", 1)[0]
    missing = [n for n in sorted(HOOK_NAMES) if not re.search(rf"`{n}\b", section)]
    assert not missing, f"CONTRIBUTING.md, A backend, does not name: {missing}"


def test_a_backend_without_hooks_has_none():
    hooks = BackendHooks.of(Bare())
    assert hooks == BackendHooks()
    assert hooks.commands_issued() is None
    assert hooks.checkpoint_waits() == {}
    assert tuple(hooks.warnings()) == ()


def test_a_backend_with_every_hook_is_called_through_the_record():
    backend = Every()
    hooks = BackendHooks.of(backend)
    assert all(getattr(hooks, f) is backend for f in vars(hooks))
    assert hooks.commands_issued() == 12
    waits = hooks.checkpoint_waits()
    assert waits == {"3": 1.5} and waits is not backend.checkpoint_waits  # a copy
    assert list(hooks.warnings()) == ["job 7: unknown key"]
    assert hooks.ended_runs() == [RunEnd("5", RunEndKind.CHECKPOINTED)]
    assert hooks.resumable is not None
    hooks.resumable.resume(iter(["1", "2"]))
    assert backend.resumed == [["1", "2"]]


def test_the_record_reads_attribute_hooks_when_asked_not_when_built():
    backend = Every()
    hooks = BackendHooks.of(backend)
    backend.warnings = []
    backend.checkpoint_waits = {"4": 2.0}
    assert list(hooks.warnings()) == [] and hooks.checkpoint_waits() == {"4": 2.0}


def test_the_simulator_offers_only_private_data():
    sim = SimulatedCluster(parse_cluster_spec("v100:1x2"), [], load_table())
    hooks = BackendHooks.of(sim)
    assert hooks.private_data is sim
    assert [f for f in vars(hooks) if getattr(hooks, f) is not None] == ["private_data"]


def test_optional_parameters_beyond_the_daemons_arguments_are_fine():
    class Extra(Bare):
        def give_back(self, reasons, *, dry_run=False):  # type: ignore[no-untyped-def]
            return {}

        refused_held: ClassVar[dict[str, str]] = {}

        def resume(self, *job_ids):  # type: ignore[no-untyped-def]
            pass

    hooks = BackendHooks.of(Extra())
    assert hooks.give_back is not None and hooks.resumable is not None


def wrong(backend: object) -> str:
    with pytest.raises(BackendHookError) as e:
        BackendHooks.of(backend)
    assert isinstance(e.value, TypeError)
    return str(e.value)


def test_half_a_protocol_is_refused_with_what_it_lacks():
    class GraceDueOnly(Bare):
        def grace_due_in(self):  # type: ignore[no-untyped-def]
            return None

    why = wrong(GraceDueOnly())
    assert why.startswith("backend GraceDueOnly: optional hooks in the wrong shape")
    assert "grace_due_in without enforce_grace" in why
    assert "enforce_grace() -> tuple[list[JobId], dict[JobId, str]]" in why

    class GiveBackOnly(Bare):
        def give_back(self, reasons):  # type: ignore[no-untyped-def]
            return {}

    assert "give_back without refused_held" in wrong(GiveBackOnly())


def test_a_method_the_daemon_cannot_call_is_refused():
    class NoArgument(Bare):
        def set_admin_comments(self):  # type: ignore[no-untyped-def]
            return {}

    why = wrong(NoArgument())
    assert "set_admin_comments cannot be called with 1 argument" in why
    assert "set_admin_comments(texts: Mapping[JobId, str]) -> dict[JobId, str]" in why

    class NotCallable(Bare):
        between_rounds = True

    assert "between_rounds is of type bool, not a method" in wrong(NotCallable())


def test_an_attribute_of_the_wrong_type_is_refused():
    class CountAsMethod(Bare):
        def commands_issued(self) -> int:
            return 3

    assert "commands_issued is of type method, expected int" in wrong(CountAsMethod())

    class WarningsAsText(Bare):
        warnings = "job 7: unknown key"

    why = wrong(WarningsAsText())
    assert "warnings is of type str, expected list" in why
    assert "(BackendWarnings: warnings: list[str])" in why


def test_every_problem_is_named_at_once():
    class Several(Bare):
        resume = None
        checkpoint_waits: ClassVar[list[float]] = [1.0]

        def private_data(self, extra):  # type: ignore[no-untyped-def]
            return None

    why = wrong(Several())
    assert "resume is of type NoneType, not a method" in why
    assert "checkpoint_waits is of type list, expected dict" in why
    assert "private_data cannot be called with 0 arguments" in why
