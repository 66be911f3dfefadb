"""The base of the user-input errors, here so that the job library needs nothing else.

:mod:`slurm_gavel.errors` re-exports :class:`InputError`: the CLI and the daemon catch
the same class, and the job package (distribution ``slurm-gavel-job``) stays
installable without the scheduler.
"""


class InputError(ValueError):
    """Bad input; the message names the field and how to fix it."""

    exit_code = 2
