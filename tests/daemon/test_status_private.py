"""Private status views (status_privacy): each user reads only their own managed jobs.

The daemon side writes status.json without rows and status.d/<uid>.json per user
(0600, owned by the user); the command side is run as `nobody` (uid 65534) in a
forked child that drops to it, as a user would run it. Needs root (chown, setuid).
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.private_data import hides_jobs, private_data_value
from slurm_gavel.cli import build_parser, main
from slurm_gavel.core.backend_hooks import BackendHooks
from slurm_gavel.daemon.publish import Publisher, privacy
from slurm_gavel.daemon.state_store import StateStore
from slurm_gavel.daemon.status_private import HIDDEN

NOBODY = 65534
OTHER = 4242  # a user with no passwd entry
LONER = 4243  # a user with no managed job

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown and setuid need root")


def job(user: object, uid: object, **kw: object) -> dict[str, object]:
    return {"user": user, "user_id": uid, "account": "acct", "job_type": "A3C",
            "scale_factor": 1, "state": "running", "gpu_type": "v100",
            "nodes": [["n1", 1]], **kw}  # fmt: skip


def doc(jobs: dict[str, dict[str, object]]) -> dict[str, object]:
    return {"saved_at": 1.0, "daemon": {"policy": "max_min_fairness", "round_seconds": 0},
            "scheduler": {"round_index": 7, "jobs": {}, "allocation": {"pairs": [
                {"jobs": ["11", "12"], "fractions": {"v100": 0.5}}]}}, "jobs": jobs,
            "cluster": {"capacity": {"v100": 4}}}  # fmt: skip


JOBS = {
    "10": job("root", 0),
    "11": job(
        "nobody", NOBODY, pair_cell={"partner": "12", "partner_type": "secretjob", "estimate": True}
    ),
    "12": job("\x1b[2Jmallory", OTHER, job_type="secretjob"),
    "13": job("nobody", NOBODY, state="waiting", gpu_type=None, nodes=[]),
}


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state directory `nobody` can traverse (pytest's tmp_path is 0700 root's)."""
    d = Path(tempfile.mkdtemp(prefix="gavel-private-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def publish(state_dir: Path, jobs: dict[str, dict[str, object]], setting: str = "private",
            backend: object = None) -> Publisher:  # fmt: skip
    """One daemon save: state.json, then the views, as StateWriter.save does."""
    store = StateStore(state_dir)
    store.acquire()
    try:
        pub = Publisher(store, BackendHooks.of(backend))
        pub.resolve_privacy(setting)
        d = doc(jobs)
        store.save(d)
        pub.save_view(d)
        return pub
    finally:
        store.release()


def run_as(uid: int, argv: list[str]) -> tuple[int, str, str]:
    """`slurm-gavel ARGV` in a forked child running as `uid` (no groups): rc, out, err.

    The parent imports what the CLI loads first: the interpreter's library is under
    /root, which the child cannot read once it is `nobody`."""
    build_parser()
    import slurm_gavel.commands.explain
    import slurm_gavel.commands.status  # noqa: F401

    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        rc = 99
        try:
            os.close(r_out)
            os.close(r_err)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            sys.stdout = io.TextIOWrapper(os.fdopen(w_out, "wb"), write_through=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(w_err, "wb"), write_through=True)
            rc = main(argv)
        except BaseException as e:
            print(f"child: {e!r}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    os.close(w_out)
    os.close(w_err)
    with os.fdopen(r_out) as o, os.fdopen(r_err) as e:
        out, err = o.read(), e.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out, err


def test_private_mode_writes_rowless_status_and_one_owned_view_per_user(state_dir):
    publish(state_dir, JOBS)
    public = json.loads((state_dir / "status.json").read_text())
    assert public["private"] is True and public["jobs"] == []
    assert public["job_count"] == 4 and public["job_states"] == {"running": 3, "waiting": 1}
    assert "mallory" not in (state_dir / "status.json").read_text()
    folder = state_dir / "status.d"
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o755 and st.st_uid == 0
    assert sorted(os.listdir(folder)) == ["0.json", f"{OTHER}.json", f"{NOBODY}.json"]
    for uid in (0, NOBODY, OTHER):
        st = os.lstat(folder / f"{uid}.json")
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, uid), uid
    mine = json.loads((folder / f"{NOBODY}.json").read_text())
    assert [j["id"] for j in mine["jobs"]] == ["11", "13"] and mine["user_id"] == NOBODY
    # its GPU partner is another user's job: neither its id nor its type is shown
    assert mine["jobs"][0]["partner"] == HIDDEN
    assert mine["jobs"][0]["pair_cell"]["partner_type"] == HIDDEN
    assert "secretjob" not in (folder / f"{NOBODY}.json").read_text()


def test_public_mode_is_as_before_and_removes_the_user_views(state_dir):
    publish(state_dir, JOBS)
    publish(state_dir, JOBS, setting="public")
    public = json.loads((state_dir / "status.json").read_text())
    assert "private" not in public and len(public["jobs"]) == 4
    assert stat.S_IMODE(os.stat(state_dir / "status.json").st_mode) == 0o644
    assert not (state_dir / "status.d").exists()


def test_views_of_users_without_jobs_are_removed(state_dir):
    publish(state_dir, JOBS)
    publish(state_dir, {k: v for k, v in JOBS.items() if v["user_id"] != OTHER})
    assert sorted(os.listdir(state_dir / "status.d")) == ["0.json", f"{NOBODY}.json"]


@pytest.mark.hostile
def test_a_symlink_planted_at_a_view_is_replaced_not_followed(state_dir, tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious")
    (state_dir / "status.d").mkdir(mode=0o755)
    os.symlink(target, state_dir / "status.d" / f"{NOBODY}.json")
    publish(state_dir, JOBS)
    assert target.read_text() == "precious" and os.stat(target).st_uid == 0
    st = os.lstat(state_dir / "status.d" / f"{NOBODY}.json")
    assert stat.S_ISREG(st.st_mode) and st.st_uid == NOBODY


@pytest.mark.hostile
def test_a_symlinked_or_file_status_d_is_replaced_by_the_daemons_folder(state_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, state_dir / "status.d")
    publish(state_dir, JOBS)
    assert os.listdir(elsewhere) == []
    assert stat.S_ISDIR(os.lstat(state_dir / "status.d").st_mode)
    shutil.rmtree(state_dir / "status.d")
    (state_dir / "status.d").write_text("not a folder")
    publish(state_dir, JOBS)
    assert len(os.listdir(state_dir / "status.d")) == 3


@pytest.mark.hostile
@pytest.mark.parametrize(
    "uid", ["../../etc/passwd", "65534", -1, True, 2**32 - 1, 2**40, 1.5, None, [NOBODY]]
)
def test_hostile_uids_get_no_view(state_dir, uid):
    publish(state_dir, {"10": job("nobody", NOBODY), "20": job("../x", uid)})
    assert os.listdir(state_dir / "status.d") == [f"{NOBODY}.json"]
    mine = json.loads((state_dir / "status.d" / f"{NOBODY}.json").read_text())
    assert [j["id"] for j in mine["jobs"]] == ["10"]


def test_nobody_sees_only_its_own_jobs(state_dir):
    publish(state_dir, JOBS)
    rc, out, err = run_as(NOBODY, ["status", "--state-dir", str(state_dir)])
    assert rc == 0, err
    assert "mallory" not in out and "secretjob" not in out and "root" not in out
    rc, out, err = run_as(NOBODY, ["status", "--state-dir", str(state_dir), "-h", "-o", "jobid"])
    assert out.split() == ["11", "13"], err
    rc, out, err = run_as(NOBODY, ["status", "--state-dir", str(state_dir), "--json", "-"])
    assert rc == 0, err
    assert [j["id"] for j in json.loads(out)["jobs"]] == ["11", "13"]
    rc, out, err = run_as(NOBODY, ["explain", "13", "--state-dir", str(state_dir)])
    assert rc == 0 and out.startswith("job 13 (nobody"), err


@pytest.mark.hostile
@pytest.mark.parametrize("who", ["root", "0", str(OTHER), "nobody,root", "\x1b[2Jmallory"])
def test_asking_for_other_users_is_refused_with_the_reason(state_dir, who):
    publish(state_dir, JOBS)
    rc, out, err = run_as(NOBODY, ["status", "--state-dir", str(state_dir), "-u", who])
    assert rc == 2 and out == "", (out, err)
    assert "PrivateData" in err and "your own jobs only" in err
    rc, out, err = run_as(NOBODY, ["status", "--state-dir", str(state_dir), "-u", "nobody"])
    assert rc == 0 and "11" in out, err


def test_explaining_another_users_job_says_it_is_hidden(state_dir):
    publish(state_dir, JOBS)
    rc, out, err = run_as(NOBODY, ["explain", "12", "--state-dir", str(state_dir)])
    assert rc == 2 and out == "" and "not one of your managed jobs" in err, err
    assert "mallory" not in err and "secretjob" not in err


def test_a_user_without_a_view_has_no_managed_jobs(state_dir):
    publish(state_dir, JOBS)
    rc, out, err = run_as(LONER, ["status", "--state-dir", str(state_dir)])
    assert rc == 0, err
    assert "no managed jobs of yours" in out and "usable GPUs: v100 4" in out


def readable_as(uid: int, path: Path) -> bool:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            path.read_bytes()
            code = 0
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_a_view_is_readable_by_its_user_only(state_dir):
    publish(state_dir, JOBS)
    assert readable_as(NOBODY, state_dir / "status.d" / f"{NOBODY}.json")
    assert not readable_as(NOBODY, state_dir / "status.d" / f"{OTHER}.json")
    assert not readable_as(NOBODY, state_dir / "status.d" / "0.json")
    assert readable_as(NOBODY, state_dir / "status.json")
    assert not readable_as(NOBODY, state_dir / "state.json")


def test_root_reads_every_job_in_private_mode(state_dir, capsys):
    publish(state_dir, JOBS)
    assert main(["status", "--state-dir", str(state_dir), "--json", "-"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)["jobs"]] == [
        "10",
        "11",
        "12",
        "13",
    ]


CONFIG_NONE = "KillWait                = 30 sec\nPrivateData             = none\n"
CONFIG_ALL = (  # PrivateData=all, as scontrol prints it
    "PrivateData             = accounts,cloud,events,jobs,nodes,partitions,reservations,"
    "usage,users\n"
)


class Backend:
    def __init__(self, value: object) -> None:
        self.value = value

    def private_data(self) -> str | None:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("setting", "backend", "private"),
    [
        ("public", Backend("jobs"), False),
        ("private", Backend("none"), True),
        ("auto", Backend("none"), False),
        ("auto", Backend("jobs,usage"), True),
        ("auto", Backend("ALL"), True),
        ("auto", Backend("usage,users,accounts"), False),  # squeue still shows every job
        ("auto", Backend(None), True),  # Slurm away: fail closed
        ("auto", Backend(NotImplementedError("slurmrestd does not publish it")), True),
        ("auto", object(), True),  # a backend that cannot ask (the simulator)
    ],
)
def test_which_mode_is_in_force(setting, backend, private):
    got, why = privacy(setting, BackendHooks.of(backend).private_data)
    assert got is private and why.startswith(f"status_privacy: {setting}")


def test_private_data_is_read_from_scontrol_show_config():
    assert private_data_value(CONFIG_NONE) == "none" and not hides_jobs("none")
    assert hides_jobs(private_data_value(CONFIG_ALL) or "")
    assert private_data_value("KillWait = 30 sec\n") is None


def test_the_mode_and_its_reason_are_logged_at_start(state_dir, caplog):
    caplog.set_level(logging.INFO, logger="slurm_gavel")
    publish(state_dir, JOBS, setting="auto", backend=Backend("jobs"))
    fields = [r.fields for r in caplog.records if r.getMessage() == "status_privacy"]
    assert len(fields) == 1 and fields[0]["mode"] == "private"
    assert fields[0]["why"] == "status_privacy: auto, and Slurm's PrivateData (jobs) hides jobs"
