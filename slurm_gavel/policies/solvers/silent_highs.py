"""HiGHS instances that never write to stdout.

`slurm-gavel allocate --json`, `simulate --json -` and every table print on stdout, so
the solver must not. Two things make HiGHS print there:

- its log, when ``output_flag`` (or ``log_to_console``) is on, which is HiGHS's default:
  every instance made here has both off before it is given a model;
- its banner ("Running HiGHS 1.16.0 ... Copyright ..."), which highspy >= 1.16 prints
  from C++ to file descriptor 1 (Python's ``redirect_stdout`` cannot catch it) the
  first time a ``highspy.Highs`` is made in a process: the constructor enables
  highspy's callbacks before any option can be set, and HiGHS writes its header then,
  once per process. cvxpy's HiGHS interface makes such an instance too (the reference
  path). :func:`absorb_banner`, run when this module is imported, makes that first
  instance with descriptor 1 pointed at /dev/null, so no later instance prints it.

Every module of this package that makes a HiGHS instance imports this one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from typing import Any

import highspy

_lock = threading.Lock()
_absorbed = False


def _flush_c_stdio() -> None:
    """Flush the C library's stdout buffer (a pipe is fully buffered in C)."""
    with contextlib.suppress(OSError, AttributeError):  # no C library: nothing buffered there
        ctypes.CDLL(None).fflush(None)


def absorb_banner() -> None:
    """Make this process's first ``highspy.Highs`` with descriptor 1 on /dev/null.

    Idempotent and thread-safe; a no-op after the first call. With highspy releases
    that print no banner it costs one instance (well under a millisecond).
    """
    global _absorbed
    if _absorbed:
        return
    with _lock:
        if _absorbed:
            return
        try:
            saved = os.dup(1)
        except OSError:  # descriptor 1 is closed: nothing can reach stdout anyway
            highspy.Highs()
            _absorbed = True
            return
        try:
            if sys.stdout is not None:
                sys.stdout.flush()  # what Python printed before goes where it belongs
            _flush_c_stdio()
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
            finally:
                os.close(devnull)
            try:
                highspy.Highs()
            finally:
                _flush_c_stdio()  # the banner, if buffered, goes to /dev/null too
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _absorbed = True


def silence(h: Any) -> Any:
    """Turn off HiGHS's log on `h` (a ``highspy.Highs`` or ``_Highs``); returns `h`."""
    h.setOptionValue("output_flag", False)
    h.setOptionValue("log_to_console", False)
    return h


def new_highs() -> highspy.Highs:
    """A ``highspy.Highs`` with its log off; the banner was absorbed at import."""
    absorb_banner()
    h: highspy.Highs = silence(highspy.Highs())
    return h


absorb_banner()
