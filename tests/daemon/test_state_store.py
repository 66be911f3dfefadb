import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_gavel.daemon.state_store import StateError, StateLockedError, StateSaveError, StateStore

# A child that takes the lock, says so, then sleeps until killed.
HOLDER = """
import sys, time
from slurm_gavel.daemon.state_store import StateStore
s = StateStore(sys.argv[1]); s.acquire()
print("locked", flush=True)
time.sleep(60)
"""

# A child that saves big states in a loop until SIGKILLed at an arbitrary instant.
WRITER = """
import sys
from slurm_gavel.daemon.state_store import StateStore
s = StateStore(sys.argv[1]); s.acquire()
i = 0
while True:
    s.save({"round": i, "payload": ["x" * 100] * 2000})
    if i == 0:
        print("saved", flush=True)
    i += 1
"""


def spawn(code: str, state_dir: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(state_dir)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() in ("locked", "saved")
    return p


def test_save_then_load_round_trips(tmp_path):
    with StateStore(tmp_path / "s") as store:
        assert store.load() is None
        store.save({"round": 1, "jobs": {"7": {"v100": 12.5}}})
        store.save({"round": 2, "jobs": {"7": {"v100": 20.0}}})
        doc = store.load()
    assert doc is not None and doc["round"] == 2 and doc["jobs"]["7"]["v100"] == 20.0
    prev = json.loads((tmp_path / "s" / "state.json.prev").read_text())
    assert prev["round"] == 1  # one round of history for a manual step back
    assert not list((tmp_path / "s").glob(".state.json.*.tmp"))


def test_save_requires_the_lock(tmp_path):
    with pytest.raises(RuntimeError, match="without holding the lock"):
        StateStore(tmp_path).save({"round": 0})


def test_reader_needs_no_lock_and_sees_the_holder(tmp_path):
    with StateStore(tmp_path) as writer:
        writer.save({"round": 3})
        reader = StateStore(tmp_path)
        assert reader.load()["round"] == 3
        assert reader.daemon_alive() == os.getpid()
    assert StateStore(tmp_path).daemon_alive() is None  # released: pid cleared


def test_second_daemon_is_refused_with_the_holders_pid(tmp_path):
    holder = spawn(HOLDER, tmp_path)
    try:
        with pytest.raises(StateLockedError) as e:
            StateStore(tmp_path).acquire()
        assert f"pid {holder.pid}" in str(e.value)
        assert "stop that daemon first" in str(e.value)
        assert e.value.exit_code == 2
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL released the flock even though the lock file (with the old pid) remains.
    assert (tmp_path / "daemon.lock").exists()
    with StateStore(tmp_path) as s:
        assert s.holder_pid() == os.getpid()


def test_sigkill_during_saves_leaves_a_whole_state(tmp_path):
    for delay in (0.0, 0.01, 0.05, 0.13):
        d = tmp_path / f"k{delay}"
        w = spawn(WRITER, d)
        time.sleep(delay)
        os.kill(w.pid, signal.SIGKILL)
        w.wait()
        with StateStore(d) as s:
            doc = s.load()  # raises if the file were torn
            assert doc is not None and doc["round"] >= 0
            assert len(doc["payload"]) == 2000
            s.cleanup_temporaries()
            assert not list(d.glob(".state.json.*.tmp"))


def test_corrupt_or_foreign_state_is_a_clear_error(tmp_path):
    (tmp_path / "state.json").write_text('{"round": ')
    with pytest.raises(StateError, match=r"not valid JSON .*restore state.json.prev"):
        StateStore(tmp_path).load()
    (tmp_path / "state.json").write_text('{"round": 1}')
    with pytest.raises(StateError, match="not a slurm-gavel state file"):
        StateStore(tmp_path).load()


def test_unwritable_state_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StateError, match="cannot create the lock file"):
        StateStore(blocker / "state").acquire()


def test_a_full_disk_at_start_is_a_clear_error_and_leaves_no_lock(tmp_path, monkeypatch):
    # Before: the OSError of writing the pid escaped as a traceback (exit 1, restarted
    # by systemd every 10 s with the same traceback).
    import slurm_gavel.daemon.state_store as state_store

    def no_space(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(state_store.os, "write", no_space)
    store = StateStore(tmp_path / "state")
    with pytest.raises(StateError, match=r"daemon.lock: cannot record .*No space left on device"):
        store.acquire()
    monkeypatch.undo()
    assert not store.locked
    other = StateStore(tmp_path / "state")
    other.acquire()  # the failed attempt holds nothing
    other.release()


def test_a_failed_save_keeps_the_previous_state_and_names_the_file(tmp_path, monkeypatch):
    store = StateStore(tmp_path / "state")
    with store:
        store.save({"round": 1})

        def no_space(*args, **kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(store, "_write", no_space)
        with pytest.raises(StateSaveError) as e:
            store.save({"round": 2})
    assert str(tmp_path / "state" / "state.json") in str(e.value)
    assert "No space left on device" in str(e.value)
    assert json.loads((tmp_path / "state" / "state.json").read_text())["round"] == 1
