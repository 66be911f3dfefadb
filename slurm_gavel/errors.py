"""Error kinds the CLI and the daemon turn into one-line messages (never tracebacks).

* :class:`InputError` - something the user gave is wrong (a file, a flag, a job
  comment). The message names the field and the fix. Exit code 2.
* :class:`SolveError` - the input was valid but no allocation could be computed
  (solver failure, infeasible SLOs). Exit code 3.

The job library (slurm_gavel/job/, distribution slurm-gavel-job) has an InputError of
its own: it installs without the scheduler, and the scheduler takes none of its own
types from it.
"""

from pathlib import Path

__all__ = ["InputError", "SolveError", "read_utf8"]


class InputError(ValueError):
    """Bad input; the message names the field and how to fix it."""

    exit_code = 2


class SolveError(RuntimeError):
    """Valid input, but the policy could not produce an allocation."""

    exit_code = 3


def read_utf8(path: Path, error: type[InputError], *, unreadable: str, save_as: str) -> str:
    """The text of an input file, or `error` naming the file and what is wrong with it:
    "{path}: {unreadable} ({strerror})" when it cannot be read, and the byte and line of
    the first non-UTF-8 byte with "save {save_as}" otherwise (never a traceback)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise error(f"{path}: {unreadable.format(strerror=e.strerror)}") from e
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        at = raw[: e.start].count(b"\n") + 1
        raise error(
            f"{path}: not UTF-8 text (byte {raw[e.start]:#04x} at line {at}); save {save_as}"
        ) from None
