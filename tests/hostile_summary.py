"""pytest plugin: the hostile-input figure, one line at the end of the test output.

    hostile inputs tried 1234 (56 tests), crashes 0, hangs 0, priority escalations 0,
    jobs stranded 0

Loaded by tests/conftest.py (``pytest_plugins = ["hostile_summary"]``). A test that
feeds the daemon, the job_submit.lua, the SPANK plugin or the job library what a
hostile user could write is marked::

    @pytest.mark.hostile                          # a failure counts as a crash
    @pytest.mark.hostile(guards="escalation")     # ... as a priority escalation
    @pytest.mark.hostile(guards="hang", inputs=7) # ... as a hang; tries 7 inputs

``guards`` says what the test rules out, so what one of its failures means:
crash (an exception or wrong refusal), hang (the daemon or a round did not finish
in time), escalation (a user got more share than the admin allows) or stranded (a
job left held that nobody can release). The inputs a test tries are, first found:
``inputs=`` on the marker, a ``record_property("hostile_inputs", n)`` at run time,
the examples Hypothesis ran (passing + failing, every phase), else 1. Skipped tests
are not counted as tried; the line says how many were skipped, so a figure from a
machine without Slurm cannot pass for one with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

GUARDS = {
    "crash": "crashes",
    "hang": "hangs",
    "escalation": "priority escalations",
    "stranded": "jobs stranded",
}
_HYPOTHESIS_EXAMPLES = re.compile(r"(\d+) passing examples, (\d+) failing examples")


@dataclass
class Tally:
    inputs: int = 0
    tests: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)  # set-up/tear-down errors
    failures: dict[str, list[str]] = field(default_factory=lambda: {g: [] for g in GUARDS})

    def line(self) -> str:
        parts = [f"hostile inputs tried {self.inputs} ({self.tests} tests)"]
        parts += [f"{GUARDS[g]} {len(ids)}" for g, ids in self.failures.items()]
        if self.skipped:
            parts.append(f"{self.skipped} hostile tests skipped (not counted)")
        if self.errors:
            parts.append(f"{len(self.errors)} hostile tests errored (not counted)")
        return ", ".join(parts)


_TALLY = pytest.StashKey[Tally]()
_RESULTS = pytest.StashKey[dict[str, dict[str, bool]]]()
_CONFIG: pytest.Config | None = None  # the session's, for pytest_runtest_logreport


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "hostile(guards='crash', inputs=None): feeds hostile user input; counted in the "
        "hostile-input figure (tests/hostile_summary.py); guards: " + ", ".join(GUARDS),
    )
    config.stash[_TALLY] = Tally()
    global _CONFIG
    _CONFIG = config


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # a misspelt guard fails at collection, not after the run
        mark = _marker(item)
        if mark is not None:
            _guard(mark)


def _marker(item: pytest.Item) -> pytest.Mark | None:
    return item.get_closest_marker("hostile")


def _guard(mark: pytest.Mark) -> str:
    guard = mark.kwargs.get("guards", mark.args[0] if mark.args else "crash")
    if guard not in GUARDS:
        raise pytest.UsageError(
            f"@pytest.mark.hostile(guards={guard!r}): use one of {list(GUARDS)}"
        )
    return str(guard)


def _inputs(item: pytest.Item, mark: pytest.Mark, properties: list[tuple[str, object]]) -> int:
    if mark.kwargs.get("inputs") is not None:
        return int(mark.kwargs["inputs"])
    recorded = [int(v) for k, v in properties if k == "hostile_inputs"]  # type: ignore[call-overload]
    if recorded:
        return sum(recorded)
    stats = getattr(item, "hypothesis_statistics", None)
    if isinstance(stats, str):
        found = _HYPOTHESIS_EXAMPLES.findall(stats)
        if found:
            return sum(int(a) + int(b) for a, b in found)
    return 1


# The report's user properties that carry a hostile test's verdict to where the figure
# is counted: under pytest-xdist (tools/test --quick) a test runs in a worker, and only
# its reports reach the process that prints the summary.
_GUARD_KEY = "hostile_summary_guard"
_INPUTS_KEY = "hostile_summary_inputs"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Where the test runs: its guard on each of its reports, and on its tear-down's the
    inputs it tried (the marker, its recorded property, Hypothesis's statistics)."""
    outcome = yield
    mark = _marker(item)
    if mark is None:
        return
    report = outcome.get_result()
    report.user_properties.append((_GUARD_KEY, _guard(mark)))
    if report.when == "teardown":
        inputs = _inputs(item, mark, list(item.user_properties))
        report.user_properties.append((_INPUTS_KEY, inputs))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Where the summary is printed (the only process, or xdist's controller): each
    hostile test's reports, tallied once its tear-down's arrives."""
    props = dict(report.user_properties)
    guard = props.get(_GUARD_KEY)
    if guard is None or _CONFIG is None:
        return
    results = _CONFIG.stash.setdefault(_RESULTS, {})
    result = results.setdefault(report.nodeid, {"failed": False, "skipped": False, "error": False})
    # An xfail-marked hostile test is a known hole: it counts as a failure. A set-up
    # or tear-down error says nothing about the input: an error, listed apart.
    if report.failed and report.when != "call":
        result["error"] = True
    elif report.failed or hasattr(report, "wasxfail"):
        result["failed"] = True
    if report.skipped and report.when in ("setup", "call"):
        result["skipped"] = True
    if report.when != "teardown":
        return
    del results[report.nodeid]
    tally = _CONFIG.stash[_TALLY]
    if result["error"]:
        tally.errors.append(report.nodeid)
        return
    if result["skipped"] and not result["failed"]:
        tally.skipped += 1
        return
    tally.tests += 1
    tally.inputs += int(props.get(_INPUTS_KEY, 1))
    if result["failed"]:
        tally.failures[str(guard)].append(report.nodeid)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    tally = config.stash.get(_TALLY, None)
    if tally is None or not (tally.tests or tally.skipped or tally.errors):
        return
    terminalreporter.write_sep("=", "hostile inputs")
    terminalreporter.write_line(tally.line())
    for guard, ids in tally.failures.items():
        for nodeid in ids:
            terminalreporter.write_line(f"  {GUARDS[guard]}: {nodeid}")
    for nodeid in tally.errors:
        terminalreporter.write_line(f"  errored: {nodeid}")
