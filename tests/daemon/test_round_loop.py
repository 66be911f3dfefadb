"""daemon/loop.DaemonLoop as a component: it owns the loop's state (the stop, reload
and wake events, the failures in a row and their backoff) and sees the daemon only
through LoopHost, so a host that is no Daemon runs it. The loop inside a real Daemon
is tested in test_daemon.py, test_daemon_reload.py and test_stop_mid_act.py."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from slurm_gavel.core.backend_hooks import BackendHooks
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.config_types import Config
from slurm_gavel.daemon.round_loop import DaemonLoop


class Host:
    """A LoopHost whose rounds succeed or fail as told; the stop comes from a round."""

    def __init__(self, results: list[bool], *, round_seconds: float = 0.01) -> None:
        doc = {"partitions": ["gpu"], "round_seconds": round_seconds,
               "checkpoint": {"grace_seconds": 0.001},
               "slurm": {"retry_initial_seconds": 0.01, "retry_max_seconds": 0.04}}  # fmt: skip
        self.config: Config = parse_config(doc)
        self.results = list(results)
        self.calls: list[str] = []
        self.rounds = 0
        self.loop: DaemonLoop | None = None
        self.on_round = lambda: None

    def start(self) -> None:
        self.calls.append("start")

    def round_safely(self) -> bool:
        self.calls.append("round")
        self.rounds += 1
        self.on_round()
        if not self.results:
            assert self.loop is not None
            self.loop.stop()
            return True
        return self.results.pop(0)

    def reload(self) -> bool:
        assert self.loop is not None and not self.loop.reload_requested.is_set()
        self.calls.append("reload")
        self.config = replace(self.config, policy="fifo")
        return True

    def settle_left(self) -> float | None:
        return None

    def round_index(self) -> int:
        return self.rounds

    def release(self) -> None:
        self.calls.append("release")


def loop_of(host: Host) -> DaemonLoop:
    host.loop = DaemonLoop(host, BackendHooks())
    return host.loop


def test_once_runs_one_round_and_its_exit_code_says_how_it_went() -> None:
    for ok, code in ((True, 0), (False, 1)):
        host = Host([ok])
        assert loop_of(host).run(once=True) == code
        assert host.calls == ["start", "round", "release"]


def test_failures_in_a_row_double_the_wait_up_to_the_cap_and_a_success_resets_them(
    daemon_log,
) -> None:
    host = Host([False, False, False, False, True, False])
    loop = loop_of(host)
    assert loop.run() == 0
    retrying = [r.fields for r in daemon_log if getattr(r, "event", None) == "retrying"]
    waits = [(f["failures"], f["in_s"]) for f in retrying]
    assert waits == [(1, 0.01), (2, 0.02), (3, 0.04), (4, 0.04), (1, 0.01)]
    assert loop.consecutive_failures == 0  # the last round (it stopped the loop) worked
    assert host.calls[-1] == "release"


def test_a_reload_asked_during_a_round_is_applied_in_the_wait_after_it() -> None:
    host = Host([True, True], round_seconds=0.05)
    loop = loop_of(host)

    def ask_in_the_first_round() -> None:
        if host.rounds == 1:
            loop.request_reload()

    host.on_round = ask_in_the_first_round
    assert loop.run() == 0
    assert host.calls == ["start", "round", "reload", "round", "round", "release"]
    assert not loop.reload_requested.is_set()


def test_a_stop_ends_the_wait_at_once() -> None:
    host = Host([True, True], round_seconds=30)
    loop = loop_of(host)
    codes: list[int] = []
    t = threading.Thread(target=lambda: codes.append(loop.run()))
    t.start()
    while host.rounds == 0 and t.is_alive():
        t.join(0.01)
    t0 = time.monotonic()
    loop.stop()
    t.join(10)
    assert codes == [0] and time.monotonic() - t0 < 5  # not the 30 s round
    assert host.calls == ["start", "round", "release"]
