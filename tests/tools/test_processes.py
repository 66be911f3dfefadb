"""slurm_gavel_dev.processes.stop: SIGTERM first, SIGKILL after the timeout, always reaped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from slurm_gavel_dev.processes import stop

IGNORES_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"  # noqa: E501


def test_a_child_that_exits_on_sigterm_is_stopped_by_it():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop(p, timeout=30)
    assert p.returncode == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout():
    p = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline()  # its handler is set
    t0 = time.monotonic()
    stop(p, timeout=0.5)
    assert p.returncode == -signal.SIGKILL and time.monotonic() - t0 < 30
    p.stdout.close()


def test_a_child_that_already_exited_is_left_alone():
    p = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    p.wait()
    stop(p)
    assert p.returncode == 3
