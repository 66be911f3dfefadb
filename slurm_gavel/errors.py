"""Error kinds the CLI and the daemon turn into one-line messages (never tracebacks).

* :class:`InputError` - something the user gave is wrong (a file, a flag, a job
  comment). The message names the field and the fix. Exit code 2.
* :class:`SolveError` - the input was valid but no allocation could be computed
  (solver failure, infeasible SLOs). Exit code 3.

InputError lives in the job library (slurm_gavel/job/_errors.py), which must import
without the rest of the package; it is the same class here.
"""

from slurm_gavel.job._errors import InputError

__all__ = ["InputError", "SolveError"]


class SolveError(RuntimeError):
    """Valid input, but the policy could not produce an allocation."""

    exit_code = 3
