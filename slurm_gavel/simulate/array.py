"""Several simulations as a Slurm job array: `slurm-gavel simulate --submit`.

A centre sweeping policies over its traces has a cluster to run them on. With
``--submit`` the command's runs (every --policy times every --knowledge, or every
point of --sweep-rates: the runs ``--workers`` would start) become the tasks of one
Slurm job array; the command waits for it and prints the table and JSON that
``--workers 1`` prints, byte for byte (``--no-wall-time`` aside, every field is a pure
function of the inputs, as in simulate/parallel.py).

How a task finds its run: it runs this same command with the same arguments, plus a
hidden ``--submit-task DIR INDEX`` (INDEX is ``SLURM_ARRAY_TASK_ID``). The runs are
built the same way in every process (a generated trace from its seed, a trace read
from its file), so task i computes the submitter's run i without any run being
shipped. The task writes that run's summary, --trace-job lines and utilisation
timeline as ``DIR/run-<i>.json`` (written aside and renamed, so the submitter never
reads half a file) and nothing else: the table, --json, --plot, --save-trace and
--trace-job-out are the submitter's, written once from the results gathered in run
order.

No shell anywhere: the batch script is a Python script (its ``#!`` line the
interpreter the tasks use, by default the one running the command), and the
working directory, the arguments and DIR are Python literals in it (``repr``), so
no value a user gave is ever parsed by a shell or by sbatch's option parser. Every
Slurm command is an argument list; the sbatch options a user may set (partition,
account, QOS, time limit, the ``%N`` throttle) are checked against Slurm's own
syntax first.

The array is an ordinary job: no comment (``SBATCH_COMMENT`` is removed from
sbatch's environment, so a user's default comment cannot make it a managed job) and
no SPANK option, so the gavel daemon never touches it and a cluster without the
plugin runs it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from slurm_gavel.atomic import write_atomic
from slurm_gavel.errors import InputError
from slurm_gavel.simulate.collector import UtilisationTimeline
from slurm_gavel.simulate.engine import SimulationResult

FOLDER_PREFIX = "slurm-gavel-sweep-"
SCRIPT = "task.py"
JOB_NAME = "slurm-gavel-sweep"
FORMAT = 1  # of a task's result file
# States after which a task runs no more (squeue's long names).
DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                  "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED"})  # fmt: skip
# A task that ended in one of these wrote no result: the sweep has failed.
FAILED = DONE - {"COMPLETED"}
# Slurm's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or unlimited.
_TIME = re.compile(r"(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE)", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
# The #! line the kernel reads: no spaces (they split it), at most ~255 bytes in all.
_SHEBANG_MAX = 200


class ArrayError(InputError):
    """The array did not give every run's result: a task failed, was cancelled, or the
    wait timed out. Exit code 1, like a failed run."""

    exit_code = 1


@dataclass(frozen=True)
class RunOutput:
    """What the command reports of one run: its summary, its --trace-job lines and its
    utilisation timeline (for --plot). The same whether the run ran here or in a task."""

    summary: dict[str, Any]
    job_trace: list[dict[str, Any]] = field(default_factory=list)
    timeline: UtilisationTimeline = field(default_factory=UtilisationTimeline)

    @classmethod
    def of(cls, result: SimulationResult) -> RunOutput:
        return cls(result.summary, result.job_trace, result.metrics.timeline)


def output_bytes(out: RunOutput, index: int) -> bytes:
    """A task's result file. JSON writes a float as its shortest repr, which reads back
    to the same float: the table and JSON made from it are those of the run itself."""
    tl = out.timeline
    data = {
        "format": FORMAT,
        "index": index,
        "summary": out.summary,
        "job_trace": out.job_trace,
        "timeline": {"times": tl.times, "ends": tl.ends, "by_type": tl.by_type},
    }
    return (json.dumps(data) + "\n").encode()


def read_output(path: Path, index: int, policy: str) -> RunOutput:
    """Task ``index``'s result file, checked to be that run's (its index, its policy);
    ValueError saying what is wrong otherwise."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise ValueError(f"unreadable result {path}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a result file of this slurm-gavel version")
    summary, trace, tl = data.get("summary"), data.get("job_trace"), data.get("timeline")
    if data.get("index") != index or not isinstance(summary, dict):
        raise ValueError(f"{path}: not task {index}'s result")
    if summary.get("policy") != policy:
        raise ValueError(f"{path}: a run of {summary.get('policy')!r}, not of {policy!r}")
    if not isinstance(trace, list) or not all(isinstance(t, dict) for t in trace):
        raise ValueError(f"{path}: no job trace")
    if not isinstance(tl, dict):
        raise ValueError(f"{path}: no utilisation timeline")
    try:
        timeline = UtilisationTimeline(
            times=_numbers(tl["times"]),
            ends=_numbers(tl["ends"]),
            by_type={str(k): _numbers(v) for k, v in tl["by_type"].items()},
        )
    except (TypeError, ValueError, KeyError, AttributeError):
        raise ValueError(f"{path}: no utilisation timeline") from None
    return RunOutput(summary, trace, timeline)


def _numbers(values: Any) -> list[float]:
    """The numbers as they were written (an int stays an int: the plots' CSV is the
    same as the run's own); TypeError for anything else."""
    if not isinstance(values, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in values
    ):
        raise TypeError("not a list of numbers")
    return values


def result_path(folder: Path, index: int) -> Path:
    return folder / f"run-{index}.json"


def write_output(folder: Path, index: int, out: RunOutput) -> None:
    """The task's side: its result, renamed into place whole (never half a file)."""
    write_atomic(result_path(folder, index), output_bytes(out, index), mode=0o644)


# -- what the user gives ------------------------------------------------------------


@dataclass(frozen=True)
class ArrayOptions:
    """`simulate --submit`'s settings, checked (check_options)."""

    folder: Path = Path(".")  # where the array's own folder is made (shared with the nodes)
    python: str = ""  # the tasks' interpreter ("" = the one running the command)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    throttle: int | None = None  # at most this many tasks at once (--array=...%N)
    timeout_s: float | None = None  # give up (and cancel) after this long
    poll_max_s: float = 5.0  # the longest gap between two squeue calls


def _printable(flag: str, value: str) -> None:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InputError(f"{flag} {value!r}: control characters (a newline?) are not allowed")


def check_options(o: ArrayOptions) -> ArrayOptions:
    """Every value checked against what Slurm accepts, with the fix in the message;
    the interpreter filled in. Nothing is passed to sbatch unchecked."""
    for flag, value in (("--submit-account", o.account), ("--submit-qos", o.qos)):
        if value is not None and not _NAME.fullmatch(value):
            raise InputError(
                f"{flag} {value!r}: a Slurm name is letters, digits and _.+- "
                "(no spaces, quotes, semicolons or other shell characters)"
            )
    if o.partition is not None and not all(_NAME.fullmatch(p) for p in o.partition.split(",")):
        raise InputError(
            f"--submit-partition {o.partition!r}: a partition name is letters, digits and "
            "_.+- (several: comma-separated, e.g. gpu,debug); no spaces, quotes or "
            "semicolons"
        )
    if o.time_limit is not None and not _TIME.fullmatch(o.time_limit):
        raise InputError(
            f"--submit-time {o.time_limit!r}: give Slurm's time format: MINUTES, "
            "HH:MM:SS, DAYS-HH[:MM[:SS]] or UNLIMITED"
        )
    if o.throttle is not None and o.throttle < 1:
        raise InputError(f"--submit-throttle {o.throttle}: give at least 1 task at once")
    if o.timeout_s is not None and not (math.isfinite(o.timeout_s) and o.timeout_s > 0):
        raise InputError(f"--submit-timeout {o.timeout_s}: give seconds > 0")
    # The logs' paths are the folder's absolute path: the working directory's too.
    folder = str(o.folder.absolute())
    _printable("--submit-dir", folder)
    if "%" in folder or "\\" in folder:
        # sbatch reads %-patterns in --output/--error, and a backslash turns them off
        raise InputError(
            f"--submit-dir {folder!r}: Slurm reads '%' and '\\' in its log paths; "
            "choose a folder without them (--submit-dir /some/where)"
        )
    python = o.python or default_python()
    _printable("--submit-python", python)
    if not os.path.isabs(python) or any(c.isspace() for c in python):
        raise InputError(
            f"--submit-python {python!r}: give the interpreter's absolute path, without "
            "spaces (it is the batch script's #! line)"
        )
    if len(python.encode()) > _SHEBANG_MAX:
        raise InputError(
            f"--submit-python {python[:40]!r}...: longer than {_SHEBANG_MAX} bytes, too "
            "long for a #! line; link it from a shorter path"
        )
    return ArrayOptions(
        folder=o.folder, python=python, partition=o.partition, account=o.account,
        qos=o.qos, time_limit=o.time_limit, throttle=o.throttle, timeout_s=o.timeout_s,
        poll_max_s=o.poll_max_s,
    )  # fmt: skip


def default_python() -> str:
    """The interpreter running this command, by the path it was started with (a venv's
    bin/python: resolving its link would lose the venv)."""
    import sys

    return sys.executable or "python3"


# -- the batch script and sbatch's arguments -----------------------------------------


def task_script(python: str, cwd: str, argv: Sequence[str], folder: Path) -> str:
    """The array's batch script: a Python script whose #! line is the interpreter. The
    working directory, the arguments and the folder are Python literals (repr), so
    newlines, quotes or semicolons in them are just characters of a string."""
    return (
        f"#!{python}\n"
        "# slurm-gavel simulate --submit: each task of this array runs one of the\n"
        "# command's simulations (SLURM_ARRAY_TASK_ID) and writes its result here.\n"
        "import os\n"
        "import sys\n"
        "\n"
        f"os.chdir({cwd!r})\n"
        "from slurm_gavel.cli import main\n"
        "\n"
        f"ARGV = {list(argv)!r}\n"
        f"FOLDER = {str(folder)!r}\n"
        'INDEX = os.environ["SLURM_ARRAY_TASK_ID"]\n'
        'sys.exit(main(["simulate", *ARGV, "--submit-task", FOLDER, INDEX]))\n'
    )


def sbatch_argv(o: ArrayOptions, n_runs: int, folder: Path) -> list[str]:
    """sbatch's argument list (never a shell line): one task per run."""
    array = f"0-{n_runs - 1}" + (f"%{o.throttle}" if o.throttle else "")
    argv = [
        "sbatch",
        "--parsable",
        f"--array={array}",
        f"--job-name={JOB_NAME}",
        "--ntasks=1",
        f"--output={folder / 'task-%a.out'}",
        f"--error={folder / 'task-%a.err'}",
    ]
    for opt, value in (("--partition", o.partition), ("--account", o.account),
                       ("--qos", o.qos), ("--time", o.time_limit)):  # fmt: skip
        if value is not None:
            argv.append(f"{opt}={value}")
    return [*argv, str(folder / SCRIPT)]


def sbatch_env(env: Mapping[str, str]) -> dict[str, str]:
    """sbatch's environment: the caller's (the tasks inherit it: PYTHONPATH, a venv's
    variables), without a default comment that could make the array a managed job."""
    return {k: v for k, v in env.items() if k != "SBATCH_COMMENT"}


# -- talking to Slurm ------------------------------------------------------------------


class Slurm(Protocol):
    def submit(self, argv: list[str], env: dict[str, str]) -> str:
        """sbatch; returns the job id (InputError with sbatch's words if refused)."""
        ...

    def task_states(self, job_id: str) -> dict[int, str] | None:
        """Each task's state (squeue's long name) by array index; {} once the job has
        left the queue; None when squeue could not answer (try again)."""
        ...

    def cancel(self, job_id: str) -> None: ...


class SlurmCommands:
    """The real cluster, through its client commands on PATH (argument lists only)."""

    def _run(
        self, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        if shutil.which(argv[0]) is None:
            raise InputError(f"--submit needs Slurm's {argv[0]} on PATH; it is not there")
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)

    def submit(self, argv: list[str], env: dict[str, str]) -> str:
        res = self._run(argv, env)
        job_id = res.stdout.strip().split(";")[0]
        if res.returncode != 0 or not job_id.isdigit():
            said = res.stderr.strip() or res.stdout.strip() or f"exit status {res.returncode}"
            raise InputError(f"sbatch refused the array: {said}")
        return job_id

    def task_states(self, job_id: str) -> dict[int, str] | None:
        argv = ["squeue", "--noheader", "--array", "--states=all", f"--jobs={job_id}",
                "--format=%i %T"]  # fmt: skip
        try:
            res = self._run(argv)
        except subprocess.TimeoutExpired:
            return None
        if res.returncode != 0:
            # A job purged from the controller's memory is "invalid" to squeue.
            return {} if "Invalid job id" in res.stderr else None
        return parse_states(res.stdout, job_id)

    def cancel(self, job_id: str) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError, InputError):
            self._run(["scancel", job_id])


def parse_states(text: str, job_id: str) -> dict[int, str]:
    """squeue's ``%i %T`` lines of one array (``JOB_INDEX STATE``) as index -> state."""
    states: dict[int, str] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) != 2:
            continue
        job, _, index = words[0].partition("_")
        if job == job_id and index.isdigit():
            states[int(index)] = words[1]
    return states


# -- submit, wait, gather -----------------------------------------------------------------


def make_folder(parent: Path) -> Path:
    """A new folder for this array under `parent`: never one a previous sweep wrote in."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=parent)).resolve()
    except OSError as e:
        why = f"cannot make a folder there ({e.strerror})"
        raise InputError(f"--submit-dir {parent}: {why}") from None


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    last = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    # a task's stderr may echo what a user wrote: no terminal escapes from it
    clean = ["".join(c if c.isprintable() else "?" for c in ln[:300]) for ln in last]
    return "".join(f"\n  | {ln}" for ln in clean)


def _failure(folder: Path, job_id: str, index: int, how: str) -> ArrayError:
    err = folder / f"task-{index}.err"
    return ArrayError(
        f"array task {index} of Slurm job {job_id} {how}; its stderr: {err}{_tail(err)}\n"
        f"no table: the sweep is incomplete (the tasks' files are kept in {folder})"
    )


def wait(
    slurm: Slurm,
    job_id: str,
    n_runs: int,
    folder: Path,
    o: ArrayOptions,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[int, str]:
    """Poll squeue until every task has ended; the last states seen. The first task
    seen to fail or be cancelled ends the wait at once: the rest are cancelled (their
    results could make no complete table) and ArrayError names the task.

    squeue lists every task of the array, the pending ones too, until the job leaves
    the controller's memory (MinJobAge after its end). A task cancelled while pending
    is not listed at all: one missing from a listing that still has others, never seen
    running and without a result, left without running."""
    start = answered = clock()
    gap = 0.2
    last: dict[int, str] = {}
    while True:
        states = slurm.task_states(job_id)
        if states is None and clock() - answered > SQUEUE_PATIENCE_S:
            slurm.cancel(job_id)
            raise ArrayError(
                f"squeue has not answered about Slurm job {job_id} for "
                f"{SQUEUE_PATIENCE_S:g} s (is slurmctld up?); cancelled it (the tasks' "
                f"files are kept in {folder})"
            )
        if states is not None:
            answered = clock()
            last.update(states)
            failed = sorted(i for i, s in states.items() if s in FAILED)
            if failed:
                slurm.cancel(job_id)
                raise _failure(folder, job_id, failed[0], f"ended {states[failed[0]]}")
            if states:
                vanished = [
                    i for i in range(n_runs)
                    if i not in states and last.get(i, "PENDING") == "PENDING"
                    and not result_path(folder, i).exists()
                ]  # fmt: skip
                if vanished:
                    slurm.cancel(job_id)
                    raise _failure(folder, job_id, vanished[0], NEVER_RAN)
            if not states or all(s in DONE for s in states.values()):
                return last
        if o.timeout_s is not None and clock() - start >= o.timeout_s:
            slurm.cancel(job_id)
            raise ArrayError(
                f"Slurm job {job_id}: not finished after --submit-timeout {o.timeout_s:g} s; "
                f"cancelled it (the tasks' files are kept in {folder})"
            )
        sleep(gap)
        gap = min(gap * 1.5, o.poll_max_s)


# How long squeue may fail (a controller restarting, overloaded) before the wait ends.
SQUEUE_PATIENCE_S = 600.0
NEVER_RAN = "left the queue without running (cancelled while pending?)"


def gather(
    folder: Path,
    job_id: str,
    policies: Sequence[str],
    states: Mapping[int, str],
    *,
    settle_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[RunOutput]:
    """Every task's result, in run order (the order --workers 1 runs them). A result a
    shared file system has not shown yet is waited for up to `settle_s`; a task
    without one fails the command, never a table with a run left out."""
    deadline = clock() + settle_s
    outs: list[RunOutput] = []
    for i, policy in enumerate(policies):
        path = result_path(folder, i)
        state = states.get(i)
        ran = state != "PENDING"  # it may have written a result not shown here yet
        while ran and not path.exists() and clock() < deadline:
            sleep(0.2)
        if not path.exists():
            how = NEVER_RAN if not ran else f"ended {state or 'unseen'} without a result"
            raise _failure(folder, job_id, i, how)
        try:
            outs.append(read_output(path, i, policy))
        except ValueError as e:
            raise _failure(folder, job_id, i, f"wrote a bad result ({e})") from None
    return outs


def clean(folder: Path, n_runs: int) -> None:
    """Remove the array's files once gathered (only the names it wrote), then its
    folder if nothing else is in it."""
    kinds = (("run", "json"), ("task", "out"), ("task", "err"))
    names = [SCRIPT] + [f"{k}-{i}.{x}" for i in range(n_runs) for k, x in kinds]
    for name in names:
        with contextlib.suppress(OSError):
            (folder / name).unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()


def run_array(
    argv: Sequence[str],
    policies: Sequence[str],
    o: ArrayOptions,
    slurm: Slurm | None = None,
    *,
    notify: Callable[[str], object] = lambda _: None,
    env: Mapping[str, str] | None = None,
) -> list[RunOutput]:
    """Run the command (`argv`, after ``simulate``) as one array task per run (run i's
    policy: ``policies[i]``) and return the runs' outputs in run order."""
    slurm = slurm or SlurmCommands()
    folder = make_folder(o.folder)
    script = folder / SCRIPT
    script.write_text(task_script(o.python, os.getcwd(), argv, folder))
    script.chmod(0o755)
    n = len(policies)
    try:
        job_id = slurm.submit(
            sbatch_argv(o, n, folder), sbatch_env(os.environ if env is None else env)
        )
    except BaseException:
        clean(folder, n)  # nothing ran: nothing to keep
        raise
    notify(f"submitted Slurm job array {job_id}: {n} task(s), files in {folder}\n")
    try:
        states = wait(slurm, job_id, n, folder, o)
    except KeyboardInterrupt:
        slurm.cancel(job_id)  # our own array: nothing should run for a command gone
        raise
    outs = gather(folder, job_id, policies, states)
    clean(folder, n)
    return outs
