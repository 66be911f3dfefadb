"""exit_ranks / hard_exit (job/ranks.py): a multi-rank job leaves without the
interpreter's teardown, where torch's gloo can abort a rank (exit 134), yet loses no
buffered output and keeps its exit code. The 2-rank gloo runs: tests/job/test_ranks.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from slurm_gavel.job import exit_ranks


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )


def test_without_a_process_group_it_is_sys_exit() -> None:
    with pytest.raises(SystemExit) as e:
        exit_ranks(3)
    assert e.value.code == 3


def test_hard_exit_flushes_streams_and_logging_and_keeps_the_code() -> None:
    res = run(
        """
        import atexit, logging, sys
        from slurm_gavel.job.ranks import hard_exit
        atexit.register(print, "atexit ran")
        logging.basicConfig(stream=sys.stderr, format="%(message)s")
        logging.warning("logged")
        sys.stdout.write("buffered, no newline")
        hard_exit(99)
        """
    )
    assert res.returncode == 99, res.stderr
    assert res.stdout == "buffered, no newline" and "logged" in res.stderr
    assert "atexit ran" not in res.stdout


def test_the_requeue_exit_lets_the_jobs_finally_blocks_run_first() -> None:
    res = run(
        """
        import atexit
        from slurm_gavel.job.ranks import hard_exit_at_interpreter_exit
        atexit.register(print, "registered before: skipped")
        try:
            hard_exit_at_interpreter_exit(99)
            raise SystemExit(99)
        finally:
            print("finally ran", flush=False)
        """
    )
    assert res.returncode == 99, res.stderr
    assert res.stdout == "finally ran\n"
