"""The base of the user-input errors, here so that the job library needs nothing else.

The job package (distribution ``slurm-gavel-job``) installs without the scheduler, whose
own InputError (slurm_gavel.errors) is a separate class: neither imports the other's.
"""


class InputError(ValueError):
    """Bad input; the message names the field and how to fix it."""

    exit_code = 2
