"""SlurmCommands: no shell, retries with backoff only while slurmctld is unreachable,
timeouts, counting; and splitting a batched command's stderr per job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_captures import scenario

from slurm_gavel.backends.slurm.cli.commands import CommandResult, SlurmCommands, errors_by_job
from slurm_gavel.backends.slurm.cli.listing import LISTING_FIELDS
from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.slurm_errors import SlurmActionTimedOut, SlurmUnreachable
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, NodeSlice, RoundPlacement

DATA = Path(__file__).parents[2] / "data"
SCENARIO = scenario(DATA / "22.05")
SINFO_V = "slurm-wlm 22.05.8\n"  # what `sinfo -V` printed for the 22.05 captures


def runner(**kw) -> tuple[SlurmCommands, list[float]]:
    sleeps: list[float] = []
    return SlurmCommands(sleep=sleeps.append, **kw), sleeps


def test_unreachable_is_retried_with_backoff_then_raises():
    cmds, sleeps = runner(retries=3, backoff=0.5)
    argv = ["sh", "-c", "echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1"]
    with pytest.raises(SlurmUnreachable, match="unreachable after 4 tries"):
        cmds.run("observe", argv)
    assert sleeps == [0.5, 1.0, 2.0]
    assert cmds.counts["observe"] == 4 and cmds.total == 4


def test_other_failures_are_returned_not_retried():
    cmds, sleeps = runner()
    res = cmds.run("release", ["sh", "-c", "echo 'Invalid job id specified' >&2; exit 1"])
    assert not res.ok and res.returncode == 1 and "Invalid job id" in res.stderr
    assert sleeps == [] and cmds.counts["release"] == 1


def test_arguments_are_not_interpreted_by_a_shell(tmp_path):
    cmds, _ = runner()
    evil = f"x; touch {tmp_path}/pwned"
    res = cmds.run("place", ["printf", "%s", evil])
    assert res.stdout == evil and not (tmp_path / "pwned").exists()
    res = cmds.run("place", ["cat"], stdin="update JobId=1\n")
    assert res.stdout == "update JobId=1\n"


def test_timeouts_fail_actions_once_and_retry_reads():
    cmds, sleeps = runner(timeout=0.2, retries=2)
    with pytest.raises(SlurmActionTimedOut, match=r"timed out after .* half happened"):
        cmds.run("signal", ["sleep", "5"])
    assert sleeps == [] and cmds.counts["signal"] == 1  # never retried
    with pytest.raises(SlurmUnreachable, match="timed out"):
        cmds.run("observe", ["sleep", "5"], retry_timeouts=True)
    assert len(sleeps) == 2


@pytest.mark.parametrize(
    "message",
    [
        "scancel: error: Kill job error on job id 7: Socket timed out on send/recv operation",
        "scontrol: error: slurm_receive_msg: Zero Bytes were transmitted or received",
    ],
)
def test_an_action_whose_reply_was_lost_is_not_sent_again(message):
    """slurmctld may have applied it (the request arrived, the answer did not): sending a
    signal or requeue again could deliver it twice. A read is still retried."""
    cmds, sleeps = runner(retries=3, backoff=0.5)
    argv = ["sh", "-c", f"echo '{message}' >&2; exit 1"]
    with pytest.raises(SlurmActionTimedOut, match="half happened"):
        cmds.run("signal", argv)
    assert sleeps == [] and cmds.counts["signal"] == 1
    with pytest.raises(SlurmUnreachable):
        cmds.run("observe", argv, retry_timeouts=True)
    assert cmds.counts["observe"] == 4


def test_an_action_that_never_reached_slurmctld_is_retried():
    cmds, sleeps = runner(retries=2, backoff=0.5)
    argv = ["sh", "-c", "echo 'scontrol: error: Unable to contact slurm controller' >&2; exit 1"]
    with pytest.raises(SlurmUnreachable):
        cmds.run("release", argv)
    assert sleeps == [0.5, 1.0] and cmds.counts["release"] == 3


def test_missing_binary_is_a_clear_error():
    cmds, _ = runner()
    with pytest.raises(SlurmUnreachable, match="not installed"):
        cmds.run("observe", ["no-such-slurm-command-xyz"])


def test_errors_by_job_on_real_messages():
    # stderr of real 22.05 commands (see tests/backends/slurm/test_backend.py runs).
    stderr = (
        "Invalid job id specified for job 99999\n"
        "Invalid GRES specification (with and without type identification) for job 5\n"
        "scancel: error: Kill job error on job id 12: Job can not be altered now, "
        "try again later\n"
        "slurm_suspend error: Invalid job id specified\n"
    )
    per_job, other = errors_by_job(stderr)
    assert set(per_job) == {"99999", "5", "12"}
    assert "GRES" in per_job["5"]
    assert other == ["slurm_suspend error: Invalid job id specified"]


class CannedCommands(SlurmCommands):
    """Answers sinfo/squeue from a list of canned stdout documents (no Slurm)."""

    def __init__(self, answers: dict[str, list[str]]):
        self.sleeps: list[float] = []
        super().__init__(sleep=self.sleeps.append, retries=3, backoff=1.0)
        self.answers = answers

    def run(self, kind, argv, *, stdin=None, retry_timeouts=False, env=None) -> CommandResult:
        self.counts[kind] += 1
        if kind == "detect":
            return CommandResult(tuple(argv), 0, SINFO_V, "")
        if kind == "list":  # no listing canned: every job's JSON is read
            return CommandResult(tuple(argv), 1, "", "squeue: error: not canned\n")
        queue = self.answers[argv[0]]
        out = queue.pop(0) if len(queue) > 1 else queue[0]
        return CommandResult(tuple(argv), 0, out, "")


# What 22.05's squeue/sinfo --json print (exit 0, empty stderr) when slurmctld is down.
DOWN_JOBS = json.dumps(
    {
        "meta": {"Slurm": {"release": "22.05.8"}},
        "jobs": [],
        "errors": [
            {
                "description": "Failed while looking for jobs",
                "error_number": -1,
                "error": "Unspecified error",
                "source": "slurm_load_jobs",
            }
        ],
    }
)
DOWN_NODES = json.dumps(
    {
        "meta": {"Slurm": {"release": "22.05.8"}},
        "nodes": [],
        "errors": [{"error": "Unspecified error", "errno": -1}],
    }
)


def test_json_errors_from_an_unreachable_controller_are_retried_not_read_as_empty():
    sinfo = (DATA / "22.05" / "sinfo.json").read_text()
    squeue = (DATA / "22.05" / "squeue.json").read_text()
    cmds = CannedCommands({"sinfo": [DOWN_NODES, sinfo], "squeue": [DOWN_JOBS, DOWN_JOBS, squeue]})
    snap = cli_backend(commands=cmds).observe()
    assert len(snap.jobs) > 0 and cmds.sleeps == [1.0, 1.0, 2.0]
    cmds = CannedCommands({"sinfo": [sinfo], "squeue": [DOWN_JOBS]})
    with pytest.raises(SlurmUnreachable, match="Failed while looking for jobs"):
        cli_backend(commands=cmds).observe()
    # sinfo, scontrol show reservation (not canned: read as unknown), 4 squeue tries
    assert cmds.counts["observe"] == 1 + 1 + 4


class ScriptedCommands(SlurmCommands):
    """Observe from the captures; actions answer with scripted stderr, logged."""

    def __init__(self, stderr: dict[str, str]):
        super().__init__(sleep=lambda s: None)
        self.stderr = stderr
        self.log: list[tuple[str, tuple[str, ...], str | None]] = []

    def run(self, kind, argv, *, stdin=None, retry_timeouts=False, env=None) -> CommandResult:
        self.counts[kind] += 1
        self.log.append((kind, tuple(argv), stdin))
        if kind == "detect":
            return CommandResult(tuple(argv), 0, SINFO_V, "")
        if kind == "observe":
            name = "sinfo" if argv[0] == "sinfo" else "squeue"
            return CommandResult(tuple(argv), 0, (DATA / "22.05" / f"{name}.json").read_text(), "")
        if kind == "list":  # no listing captured with the JSON: every job's JSON is read
            return CommandResult(tuple(argv), 1, "", "not scripted")
        err = self.stderr.get(kind, "")
        return CommandResult(tuple(argv), 1 if err else 0, "", err)


def test_a_job_whose_update_failed_is_never_released():
    scenario = SCENARIO
    held, ckpt, run1 = scenario["held"], scenario["ckpt"], scenario["run1"]
    cmds = ScriptedCommands({"place": f"Invalid partition name specified for job {held}\n"})
    b = cli_backend(commands=cmds)
    b.observe()
    res = b.act(
        RoundPlacement(
            0,
            0,
            {
                held: JobPlacement(held, "v100", (NodeSlice("v100-2", 1),)),
                ckpt: JobPlacement(ckpt, "v100", (NodeSlice("v100-2", 1),)),
                run1: JobPlacement(run1, "v100", (NodeSlice("v100-1", 2),)),
            },
        )
    )
    assert res.started == (ckpt,) and res.kept == (run1,)
    assert dict(res.failed)[held].startswith("Invalid partition")
    (place,) = [stdin for kind, _, stdin in cmds.log if kind == "place"]
    assert place.count("update JobId=") == 2  # both updates in one scontrol
    releases = [argv for kind, argv, _ in cmds.log if kind == "release"]
    assert releases == [("scontrol", "release", ckpt)]


def test_nothing_is_released_when_the_place_error_names_no_job():
    scenario = SCENARIO
    held = scenario["held"]
    cmds = ScriptedCommands({"place": "scontrol: error: something unexpected\n"})
    b = cli_backend(commands=cmds)
    b.observe()
    res = b.act(RoundPlacement(0, 0, {held: JobPlacement(held, "v100", (NodeSlice("v100-2", 1),))}))
    assert res.started == () and held in dict(res.failed)
    assert cmds.counts["release"] == 0


# scancel -v on 22.05 (the local cluster), one job signalled, two refused: its plugins,
# the refusals, the signal; the refusals are the lines scancel prints only with -v
VERBOSE_SIGNAL = """scancel: select/cons_tres: common_init: select/cons_tres loaded
scancel: select/linear: init: Linear node selection plugin loaded with argument 20
scancel: error: Kill job error on job id 2: Invalid job id specified
scancel: error: Kill job error on job id 75: Job/step already completing or completed
scancel: Signal 10 to batch job 4
"""


def test_the_signal_fails_only_the_jobs_scancel_names_among_its_verbose_lines():
    cmds = ScriptedCommands({"signal": VERBOSE_SIGNAL})
    transport = cli_backend(commands=cmds).transport
    failed: dict[str, str] = {}
    bad = transport.send_signal(["4", "2", "75"], "USR1", failed)
    assert bad == {"2", "75"} and set(failed) == {"2", "75"}
    assert "already completing" in failed["75"]
    ((_, argv, _),) = [e for e in cmds.log if e[0] == "signal"]
    assert argv[:2] == ("scancel", "-v")  # the refusals printed at all
    # an error that names no job still fails every job of the command
    cmds = ScriptedCommands({"signal": "scancel: error: Unable to contact slurm controller\n"})
    failed = {}
    bad = cli_backend(commands=cmds).transport.send_signal(["4", "2"], "USR1", failed)
    assert bad == {"4", "2"}


def test_a_job_is_not_released_in_the_second_slurm_requeued_it(monkeypatch):
    """slurmd refuses a relaunch whose credential has the requeue's second (the job
    would end FAILED: seen in CI as "Job credential revoked")."""
    scenario = SCENARIO
    held, ckpt = scenario["held"], scenario["ckpt"]
    b = cli_backend(commands=ScriptedCommands({}))
    b.observe()
    requeued = b.view.managed[ckpt]
    assert requeued.restarts == 1 and b.view.managed[held].restarts == 0
    sleeps: list[float] = []
    monkeypatch.setattr("slurm_gavel.backends.slurm.preemption.time.sleep", sleeps.append)

    def start(job: str, now: float) -> None:
        b.clock = b.preemption.clock = lambda: now
        res = b.act(
            RoundPlacement(0, 0, {job: JobPlacement(job, "v100", (NodeSlice("v100-2", 1),))})
        )
        assert res.started == (job,)

    start(ckpt, requeued.submit_time + 0.4)  # same second: wait until the next one
    assert sleeps == [pytest.approx(0.65)]
    start(ckpt, requeued.submit_time + 1.5)  # a later second: no wait
    start(held, requeued.submit_time + 0.4)  # never requeued: no wait
    assert len(sleeps) == 1


# --- 24.11+: finished jobs are asked for by id, once ---------------------------------

NEWER = DATA / "24.11"
NEWER_SCENARIO = scenario(NEWER)


class Cli2411(SlurmCommands):
    """The 24.11 CLI from its captures: `sinfo -V`, `--json=list`, scontrol nodes and
    `squeue -t all` (every job; `active` says which the -t <waiting, running> query
    lists this time). No Slurm: this checks which commands the backend issues."""

    def __init__(self):
        super().__init__(sleep=lambda s: None)
        self.all_jobs = json.loads((NEWER / "squeue-t-all.v0.0.42.json").read_text())
        self.active: set[str] = set()
        self.forgotten: set[str] = set()  # slurmctld no longer knows them
        self.finished: set[str] = set()  # finished and still known (first observe)
        self.log: list[tuple[str, tuple[str, ...]]] = []

    def jobs(self, ids: set[str]) -> str:
        doc = dict(self.all_jobs)
        doc["jobs"] = [j for j in self.all_jobs["jobs"] if str(j["job_id"]) in ids]
        return json.dumps(doc)

    def run(self, kind, argv, *, stdin=None, retry_timeouts=False, env=None) -> CommandResult:
        self.counts[kind] += 1
        self.log.append((kind, tuple(argv)))
        if argv[:2] == ["sinfo", "-V"]:
            return CommandResult(tuple(argv), 0, (NEWER / "version.txt").read_text(), "")
        if argv[:2] == ["squeue", "--json=list"]:
            return CommandResult(tuple(argv), 0, (NEWER / "json-list.txt").read_text(), "")
        if argv[0] == "scontrol" and argv[-1] == "reservations":
            doc = NEWER / "reservations" / "scontrol-res.v0.0.42.json"
            return CommandResult(tuple(argv), 0, doc.read_text(), "")
        if argv[0] == "scontrol":
            return CommandResult(
                tuple(argv), 0, (NEWER / "scontrol-nodes.v0.0.42.json").read_text(), ""
            )
        if argv[:2] == ["squeue", "-h"]:  # the listing: each record's fields, as text
            token = env["SQUEUE_FORMAT2"].split(",")[0].removeprefix("JobID:0")
            raws = [j for j in self.all_jobs["jobs"] if str(j["job_id"]) in self.active]
            rows = [
                [str(r["job_id"]), *(json.dumps(r.get(f)) for f in LISTING_FIELDS)] for r in raws
            ]
            out = "".join(token.join(row[:1] + row[2:]) + token + "\n" for row in rows)
            return CommandResult(tuple(argv), 0, out, "")
        assert argv[:2] == ["squeue", "--json=v0.0.42+complex"] and argv[2] == "-t", argv
        if argv[3] != "all":
            return CommandResult(tuple(argv), 0, self.jobs(self.active), "")
        if "-j" not in argv:  # the first observe: finished jobs too
            return CommandResult(tuple(argv), 0, self.jobs(self.active | self.finished), "")
        asked = set(argv[argv.index("-j") + 1].split(","))
        known = asked - self.forgotten
        if not known:
            return CommandResult(
                tuple(argv), 1, "", "slurm_load_jobs error: Invalid job id specified\n"
            )
        return CommandResult(tuple(argv), 0, self.jobs(known), "")


def test_a_job_that_ended_is_asked_for_by_id_once_and_reported_with_its_outcome():
    s = NEWER_SCENARIO
    cli = Cli2411()
    b = cli_backend(commands=cli)
    # round 1: the cancelled job (CANCELLED in the capture) is still waiting
    cli.active = {s["held"], s["run1"], s["cancelled"]}
    cli.all_jobs["jobs"] = [
        dict(j, job_state=["PENDING"]) if str(j["job_id"]) == s["cancelled"] else j
        for j in cli.all_jobs["jobs"]
    ]
    snap = b.observe()
    assert {j.job.id for j in snap.jobs} == {s["held"], s["run1"], s["cancelled"]}
    assert cli.counts["ended"] == 0 and cli.counts["detect"] == 2
    # round 2: it left the waiting/running list: its final record is asked for by id
    cli.all_jobs = json.loads((NEWER / "squeue-t-all.v0.0.42.json").read_text())
    cli.active = {s["held"], s["run1"]}
    snap = b.observe()
    done = {j.job.id: j for j in snap.jobs if j.state is JobState.DONE}
    assert list(done) == [s["cancelled"]] and not done[s["cancelled"]].succeeded
    assert [argv for kind, argv in cli.log if kind == "ended"] == [
        ("squeue", "--json=v0.0.42+complex", "-t", "all", "-j", s["cancelled"])
    ]
    assert not any("MinJobAge" in w for w in b.warnings)
    # round 3: reported once; nothing asked again, detection not repeated
    snap = b.observe()
    assert {j.job.id for j in snap.jobs} == {s["held"], s["run1"]}
    # and the jobs' JSON read once: the listing showed no waiting job changed since
    # observe: the nodes and the reservations each round, the jobs' JSON once
    assert cli.counts["ended"] == 1 and cli.counts["detect"] == 2 and cli.counts["observe"] == 7
    jobs_queries = [argv[3] for kind, argv in cli.log if kind == "observe" and argv[0] == "squeue"]
    assert jobs_queries == ["all"] and cli.counts["list"] == 3


def test_the_first_observe_reports_jobs_that_ended_while_the_daemon_was_down():
    s = NEWER_SCENARIO
    cli = Cli2411()
    cli.active, cli.finished = {s["held"]}, {s["cancelled"], s["ok"]}
    snap = cli_backend(commands=cli).observe()
    states = {j.job.id: j.state for j in snap.jobs}  # ok is not managed: not there
    assert states == {s["held"]: JobState.PENDING, s["cancelled"]: JobState.DONE}


def test_a_job_slurmctld_forgot_is_reported_done_with_the_min_job_age_warning():
    s = NEWER_SCENARIO
    cli = Cli2411()
    b = cli_backend(commands=cli)
    cli.active = {s["held"], s["run1"]}
    b.observe()
    cli.active = {s["held"]}
    cli.forgotten = {s["run1"]}
    snap = b.observe()
    (done,) = [j for j in snap.jobs if j.state is JobState.DONE]
    assert done.job.id == s["run1"] and not done.succeeded
    assert any("MinJobAge" in w for w in b.warnings)


def test_output_that_is_not_utf8_is_read_not_raised():
    """squeue prints a job's comment as stored, any bytes (its JSON too): one user's
    comment must not fail the round's read (it raised UnicodeDecodeError before)."""
    res = SlurmCommands(retries=0).run("observe", ["printf", "a\\377b\\r\\n"])
    assert res.ok and res.stdout == "a\udcffb\n"
