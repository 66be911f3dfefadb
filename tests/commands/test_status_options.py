"""`slurm-gavel status` as squeue: filters, -h, -o, Slurm's time format, --json's
wrapper, the public view's file modes; `explain`; `--json` the same in every command."""

from __future__ import annotations

import json
import os
import pwd
import stat

import pytest
from daemon_rounds import TYPES, run_daemon

from slurm_gavel.cli import main
from slurm_gavel.commands.status_fields import parse_format, slurm_time
from slurm_gavel.domain.model import Job
from slurm_gavel.errors import InputError

ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    """Three rounds of a daemon on 4 GPUs with 7 jobs of two users in two accounts."""
    d = tmp_path_factory.mktemp("gavel")
    users = {1: ME, 2: "alice", 3: ME, 4: "bob", 5: "alice", 6: "bob"}
    jobs = [
        Job(str(i), TYPES[i % 3], 1 + (i == 3), total_steps=1e7, user=users[i],
            account="vision" if i % 2 else "nlp", partition="gpu" if i < 5 else "gpu,debug")
        for i in range(1, 7)
    ]  # fmt: skip
    jobs.append(Job("7", "Not A Table Type", user="carol", partition="debug"))
    # table knowledge: job 7's type, unknown to the table, is skipped (with learned
    # knowledge, the default, it would run on an estimated row)
    daemon = run_daemon(d, jobs, learning={"knowledge": "table"})
    return d, daemon


def status_json(d, *args, capsys):
    assert main(["status", "--state-dir", str(d), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_view_is_world_readable_and_the_state_stays_private(state_dir):
    d, _ = state_dir
    assert stat.S_IMODE(os.stat(d / "state.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(d / "state.json.prev").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(d / "status.json").st_mode) == 0o644
    view = json.loads((d / "status.json").read_text())
    # What the view must not carry: the daemon's config path, progress, the inflight
    # placement, the raw scheduler state.
    assert set(view) == {"format", "daemon", "round", "saved_at", "interrupted_round",
                         "policy", "allocation_age_s", "last_round_time", "capacity",
                         "gpus_installed", "jobs", "notices"}  # fmt: skip
    assert "config" not in view["daemon"]


@pytest.mark.parametrize(
    ("args", "ids"),
    [
        (["-u", "alice"], ["2", "5"]),
        (["--user", "alice,bob"], ["2", "4", "5", "6"]),
        (["--me"], ["1", "3"]),
        (["-j", "3,7,99"], ["3", "7"]),
        (["-p", "debug"], ["5", "6", "7"]),
        (["-p", "gpu", "-u", "bob"], ["4", "6"]),
        ([], [str(i) for i in range(1, 8)]),
    ],
)
def test_filters_like_squeue(state_dir, capsys, args, ids):
    d, _ = state_dir
    assert [j["id"] for j in status_json(d, *args, capsys=capsys)["jobs"]] == ids


def test_json_has_squeues_wrapper(state_dir, capsys):
    d, daemon = state_dir
    doc = status_json(d, capsys=capsys)
    assert doc["errors"] == [] and doc["warnings"] == []
    assert doc["meta"]["slurm_gavel"]["view_format"] == "slurm-gavel-status/2"
    assert doc["meta"]["command"] == ["slurm-gavel", "status", "--state-dir", str(d), "--json"]
    job = next(j for j in doc["jobs"] if j["id"] == "2")
    assert (job["user"], job["account"], job["partition"]) == ("alice", "nlp", "gpu")
    assert job["time_s"] == pytest.approx(sum(daemon.state.jobs["2"].received_s.values()))


def test_noheader_and_format_letters(state_dir, capsys):
    d, _ = state_dir
    assert main(["status", "--state-dir", str(d), "-h", "-o", "%.4i %u %a %j", "-u", "alice"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(None, 2)[:2] for line in out] == [["2", "alice"], ["5", "alice"]]
    assert out[0].startswith("   2  alice")  # %.4i: right-justified in 4
    assert out[0].split(None, 3)[2:] == ["nlp", "LM (batch size 5)"]  # the type in full


def test_format_names_with_a_header_only(state_dir, capsys):
    d, _ = state_dir
    assert main(["status", "--state-dir", str(d), "-o", "jobid,jobtype:6,time", "-j", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["JOBID", "JOBTYP", "TIME"]
    assert out[1].split()[:2] == ["3", "ResNet"]  # :6 cuts, as squeue's widths do
    assert len(out) == 2  # no daemon line, no notes with -o


def test_full_job_type_by_default(state_dir, capsys):
    d, _ = state_dir
    assert main(["status", "--state-dir", str(d)]) == 0
    out = capsys.readouterr().out
    assert "ResNet-50 (batch size 64)  " in out and "Not A Table Type" in out


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "00:00:00"), (59.6, "00:01:00"), (3661, "01:01:01"), (86399, "23:59:59"),
     (86400, "1-00:00:00"), (3 * 86400 + 7322, "3-02:02:02"), (None, "-")],
)  # fmt: skip
def test_slurm_time(seconds, text):
    assert slurm_time(seconds) == text


@pytest.mark.parametrize("bad", ["%i %Q", "jobid,nosuch", "jobid:x", "%i and text", ""])
def test_bad_formats_are_one_clear_error(bad):
    with pytest.raises(InputError, match="format"):
        parse_format(bad)


def test_explain_says_why_and_gives_the_figures(state_dir, capsys):
    d, daemon = state_dir
    assert main(["explain", "7", "--state-dir", str(d)]) == 0
    out = capsys.readouterr().out
    assert "not scheduled: its job type is not in the throughput table of the site" in out
    waiting = next(j for j, v in _view(d)["jobs"].items() if v["state"] == "preempted")
    assert main(["explain", waiting, "--state-dir", str(d), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    job = doc["job"]
    assert job["why"].startswith("preempted: jobs with a higher priority took its GPUs")
    alloc = daemon.state.allocation.fractions[waiting]
    elapsed = daemon.state.epoch_elapsed
    got = daemon.state.epoch_received.get(waiting, {})
    for t, x in alloc.items():
        assert job["deficit_s"][t] == pytest.approx(x * elapsed - got.get(t, 0.0))
        if x > 0 and got.get(t, 0.0) > 0:
            assert job["priority"][t] == pytest.approx(x / (got[t] / elapsed))
    assert main(["explain", waiting, "--state-dir", str(d)]) == 0
    text = capsys.readouterr().out
    assert "priority" in text and "deficit" in text and f"job {waiting} (" in text


def test_explain_unknown_job_is_one_clear_line(state_dir, capsys):
    d, _ = state_dir
    assert main(["explain", "4242", "--state-dir", str(d)]) == 2
    err = capsys.readouterr().err
    assert "job 4242 is not in the daemon's view" in err and err.count("\n") == 1


def _view(d):
    view = json.loads((d / "status.json").read_text())
    return {"jobs": {j["id"]: j for j in view["jobs"]}}


# ---- --json the same everywhere -------------------------------------------------------


def test_json_dash_is_stdout_and_creates_no_file(state_dir, tmp_path, capsys, monkeypatch):
    d, _ = state_dir
    monkeypatch.chdir(tmp_path)
    problem = os.path.join(os.path.dirname(__file__), "../../conf/examples/problem.json")
    for argv in (["status", "--state-dir", str(d), "--json", "-"],
                 ["explain", "1", "--state-dir", str(d), "--json", "-"],
                 ["allocate", "--problem", problem, "--json", "-"]):  # fmt: skip
        assert main(argv) == 0
        json.loads(capsys.readouterr().out)  # stdout is JSON alone
        assert not (tmp_path / "-").exists()


def test_json_file_keeps_the_table_on_stdout(state_dir, tmp_path, capsys):
    d, _ = state_dir
    out = tmp_path / "sub" / "status.json"
    assert main(["status", "--state-dir", str(d), "--json", str(out)]) == 0
    assert capsys.readouterr().out.startswith("daemon not running")
    assert len(json.loads(out.read_text())["jobs"]) == 7


def test_allocate_labels_and_rounds_its_objective(capsys):
    problem = os.path.join(os.path.dirname(__file__), "../../conf/examples/problem.json")
    assert main(["allocate", "--problem", problem]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("policy max_min_fairness: minimum normalised throughput = ")
    value = first.split(" = ")[1].split(",")[0]
    assert len(value.replace(".", "").lstrip("0")) <= 4, first  # 4 significant digits
