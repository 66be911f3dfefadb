import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.cli import main
from slurm_gavel.commands import run as run_cmd
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.state_store import StateStore
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table


@pytest.fixture
def sim(monkeypatch):
    """Stand the simulated cluster in for Slurm behind the command's backend factory."""
    table = load_table()
    jobs = [Job(str(i), "A3C", 1, total_steps=1e6) for i in range(3)]
    cluster = SimulatedCluster(parse_cluster_spec("v100:1x2"), jobs, table)
    monkeypatch.setattr(run_cmd, "build_backend", lambda config, watch=None: cluster)
    return cluster


def write_config(tmp_path, extra: str = "") -> str:
    p = tmp_path / "gavel.yaml"
    p.write_text(
        "partitions: [gpu]\nround_seconds: 30\ncheckpoint: {grace_seconds: 5}\n"
        f"state_dir: {tmp_path / 'state'}\nlog_format: json\n{extra}"
    )
    return str(p)


def test_once_runs_one_round_and_saves(tmp_path, sim, capsys):
    assert main(["run", "--config", write_config(tmp_path), "--once"]) == 0
    doc = StateStore(tmp_path / "state").load()
    assert doc["scheduler"]["round_index"] == 1
    assert len(sim.running()) == 2
    logs = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    rounds = [x for x in logs if x.get("event") == "round"]
    assert len(rounds) == 1 and rounds[0]["started"] == 2


def test_dry_run_prints_actions_and_changes_nothing(tmp_path, sim, capsys):
    assert main(["run", "--config", write_config(tmp_path), "--once", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("  start    ") == 2
    assert not sim.running()
    assert not (tmp_path / "state" / "state.json").exists()


def test_bad_config_is_exit_2_with_one_line(tmp_path, sim, capsys):
    code = main(["run", "--config", write_config(tmp_path, "round_secs: 5\n"), "--once"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key 'round_secs'; did you mean 'round_seconds'" in err


def test_second_daemon_on_the_same_state_is_refused(tmp_path, sim, capsys):
    holder = StateStore(tmp_path / "state")
    holder.acquire()
    try:
        assert main(["run", "--config", write_config(tmp_path), "--once"]) == 2
    finally:
        holder.release()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "is locked by another slurm-gavel daemon (pid" in err


def test_backend_is_built_from_the_config(tmp_path):
    from slurm_gavel.daemon.config import parse_config

    cfg = parse_config({"partitions": ["gpu", "v100"], "checkpoint": {"signal": "USR2",
                        "grace_seconds": 7}, "slurm": {"command_timeout_seconds": 9}})  # fmt: skip
    b = run_cmd.build_backend(cfg)
    assert type(b).__name__ == "SlurmBackend"
    assert b.managed_partitions == {"gpu", "v100"}
    pre = b.preemption
    assert (pre.checkpoint_signal, pre.grace_s, b.transport.commands.timeout) == ("USR2", 7.0, 9.0)
    assert pre.fresh_run_s == 5.0  # no run signalled in its first seconds (slurm/preemption.py)
    short = parse_config({"partitions": ["gpu"], "round_seconds": 4,
                          "checkpoint": {"grace_seconds": 3}})  # fmt: skip
    assert run_cmd.build_backend(short).preemption.fresh_run_s == 2.0  # at most half a round
    token = tmp_path / "jwt"
    token.write_text("abc.def\n")
    token.chmod(0o600)  # rest/auth.py refuses a token file others can read
    rest = {"rest_url": "https://ctl:6820", "rest_token_file": str(token), "rest_user": "slurm",
            "rest_token_reread_seconds": 60}  # fmt: skip
    cfg = parse_config({"partitions": ["gpu"], "backend": "rest", "slurm": rest})
    b = run_cmd.build_backend(cfg)
    assert type(b).__name__ == "SlurmBackend"
    assert b.transport.rest.headers["X-SLURM-USER-TOKEN"] == "abc.def"
    assert b.transport.rest.headers["X-SLURM-USER-NAME"] == "slurm"
    assert b.transport.rest.token_source.path == token  # re-read on schedule and when refused
    assert b.transport.rest.token_source.reread_s == 60
    assert (b.transport.rest.timeout, b.transport.rest.sleep) == (
        b.transport.commands.timeout,
        b.transport.commands.sleep,
    )


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"partitions: [gpu]\n[a, b]: 1\n", "line 2: a list cannot be a key"),
        (b"partitions: [gpu]\n# \xff\xfe\n", "not UTF-8 text (byte 0xff at line 2)"),
    ],
    ids=["list-key", "non-utf8"],
)
def test_a_hostile_config_file_is_exit_2_naming_the_file(tmp_path, sim, capsys, content, needle):
    # Before: a TypeError / UnicodeDecodeError traceback and exit 1.
    path = tmp_path / "gavel.yaml"
    path.write_bytes(content)
    assert main(["run", "--config", str(path), "--once"]) == 2
    err = capsys.readouterr().err
    assert err == f"slurm-gavel run: error: {path}: {err.split(': ', 3)[-1]}"
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_sighup_reloads_the_config_and_sigterm_still_stops(tmp_path, sim, capsys, monkeypatch):
    """The real handlers of `slurm-gavel run`, in this process: SIGHUP while the daemon
    waits for its next round reloads the file (policy fifo), SIGTERM then ends it.
    SIGTERM waits for the reload to have run: a stop asked before the daemon gets back to
    its wait rightly wins over a pending reload, which a fixed pause let happen on a
    loaded machine (load 10: the reload was skipped and the test failed). Rounds 10
    minutes apart: with 30 s, a loaded machine (the quick tier beside a CI run) let the
    next round's time come before the SIGTERM, and a second round was counted."""
    path = write_config(tmp_path)
    Path(path).write_text(Path(path).read_text().replace("round_seconds: 30", "round_seconds: 600"))
    state = tmp_path / "state" / "state.json"
    reloaded_once = threading.Event()
    real_reload = Daemon.reload

    def reload_and_tell(self: Daemon) -> bool:
        try:
            return real_reload(self)
        finally:
            reloaded_once.set()

    monkeypatch.setattr(Daemon, "reload", reload_and_tell)

    def round_over() -> bool:
        # state.json exists from the pre-act save on; the round is over once the
        # post-round save cleared its inflight record (both saves are atomic renames)
        return state.exists() and json.loads(state.read_text()).get("inflight") is None

    def signals() -> None:
        deadline = time.monotonic() + 30
        while not round_over() and time.monotonic() < deadline:
            time.sleep(0.02)
        with open(path, "a") as f:
            f.write("policy: fifo\n")
        os.kill(os.getpid(), signal.SIGHUP)
        reloaded_once.wait(30)
        os.kill(os.getpid(), signal.SIGTERM)

    saved = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
    t = threading.Thread(target=signals)
    t.start()
    try:
        assert main(["run", "--config", path]) == 0
    finally:
        t.join(30)
        for s, h in saved.items():
            signal.signal(s, h)
    logs = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    names = [x.get("event") for x in logs]
    (reloaded,) = [x for x in logs if x.get("event") == "config_reloaded"]
    assert reloaded["policy"] == "fifo" and reloaded["changed"] == "policy"
    assert names.index("config_reloaded") < names.index("stopping")
    assert names.count("round") == 1  # the reload did not start a round


def test_once_with_a_standby_configuration_is_refused(tmp_path, sim, capsys):
    p = tmp_path / "gavel.yaml"
    p.write_text(f"partitions: [gpu]\nha: {{shared_dir: {tmp_path / 'shared'}}}\n")
    assert main(["run", "--config", str(p), "--once"]) == 2
    err = capsys.readouterr().err
    assert "--once cannot be used with ha:" in err and err.count("\n") == 1
    assert not (tmp_path / "shared").exists()
