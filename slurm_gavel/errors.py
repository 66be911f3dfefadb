"""Error kinds the CLI and the daemon turn into one-line messages (never tracebacks).

* :class:`InputError` - something the user gave is wrong (a file, a flag, a job
  comment). The message names the field and the fix. Exit code 2.
* :class:`SolveError` - the input was valid but no allocation could be computed
  (solver failure, infeasible SLOs). Exit code 3.
"""


class InputError(ValueError):
    """Bad input; the message names the field and how to fix it."""

    exit_code = 2


class SolveError(RuntimeError):
    """Valid input, but the policy could not produce an allocation."""

    exit_code = 3
