"""Incremental observe on each release's real Slurm (slurm/cli/listing.py): a change
made between two rounds is in the next round's view; a changed job its listing text
describes is built from it (slurm/cli/jobs_from_text.py), and only the other changed jobs'
JSON is read (24.11 and later by id; 22.05 every job's, only in a round that needs
any). Every view is checked against a full read (a fresh backend's), job by job."""

from __future__ import annotations

import time

import pytest

from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.cli.listing import IncrementalJobs
from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, NodeSlice, RoundPlacement

pytestmark = pytest.mark.slurm

MANAGED = ("--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null", "--wrap", "sleep 300")


def same_as_a_full_read(b: SlurmBackend, slurm) -> None:
    """The incremental view's waiting and running managed jobs are those a backend
    that reads every job's JSON sees, record for record."""
    fresh = cli_backend(env=slurm.env)
    fresh.transport.reader.listed = IncrementalJobs(
        full_every=1
    )  # every observe reads every job's JSON
    fresh.observe()
    assert fresh.transport.reader.listed.last_read == "full"
    assert b.view is not None and fresh.view is not None
    mine = {j.job.id for j in b.view.snapshot.jobs if j.state is not JobState.DONE}
    theirs = {j.job.id for j in fresh.view.snapshot.jobs if j.state is not JobState.DONE}
    assert mine == theirs
    assert {j: b.view.managed[j] for j in mine} == {j: fresh.view.managed[j] for j in mine}


def update(slurm, job: str, change: str) -> None:
    """scontrol update as root; 26.05 answers "Resource temporarily unavailable" for
    a while after a submission (tried again, as a user would)."""
    deadline = time.monotonic() + 30
    while True:
        res = slurm.cmd("scontrol", "update", f"JobId={job}", change, check=False)
        if res.returncode == 0:
            return
        assert "temporarily unavailable" in res.stderr, (change, res.stderr)
        assert time.monotonic() < deadline, (change, res.stderr)
        time.sleep(0.5)


def observe(b: SlurmBackend, *, json: int, text: int, gone: bool = False) -> dict[str, object]:
    """A round's observe; how many changed jobs it built from their text and how many
    it read as JSON: by id where squeue --json filters (23.02+); on 22.05 every job's,
    in a round where some changed job needs its JSON or a job left the listing."""
    snap = b.observe()
    inc = b.transport.reader.listed
    if b.transport.cli_format.filters_work:
        read = "changed" if json else "none"
        assert (inc.last_read, inc.last_json_jobs, inc.last_text_jobs) == (read, json, text)
    elif json or gone:
        assert inc.last_read == "full"
    else:
        assert (inc.last_read, inc.last_json_jobs, inc.last_text_jobs) == ("none", 0, text)
    return {j.job.id: j for j in snap.jobs}


def test_changes_between_rounds_are_seen_and_only_they_are_read(slurm):
    slurm.cancel_all()
    try:
        jobs = [slurm.sbatch(*MANAGED) for _ in range(12)]  # 5 changed: under half
        plain = slurm.sbatch("-p", "gpu", "--hold", "-o", "/dev/null", "--wrap", "sleep 300")
        b = cli_backend(env=slurm.env, grace_s=2.0, poll_s=0.2)
        b.observe()
        # the first observe reads every job's JSON here: this cluster has no accounting,
        # so new jobs' account and QOS print "(null)", which the text cannot say (the
        # next test has jobs that name theirs)
        assert b.transport.reader.listed.last_read == "full"
        observe(b, json=0, text=0)  # nothing changed: no job's JSON at all
        # waiting jobs whose change the listing says in full: no JSON, on 22.05 too
        update(slurm, jobs[5], "Comment=gavel:type=A3C,scale=2")
        update(slurm, jobs[6], "Partition=v100")
        seen = observe(b, json=0, text=2)
        assert seen[jobs[5]].job.scale_factor == 2 and seen[jobs[6]].job.partition == "v100"
        same_as_a_full_read(b, slurm)
        # a new job; root makes a waiting plain job managed (job_submit.lua lets only
        # the daemon's uid: tests/test_comment_enforcers_on_slurm.py); another pending
        # job's partition, another's comment and another's GPU request change
        new = slurm.sbatch(*MANAGED)
        for job, change in [
            (plain, "Comment=gavel:type=ResNet-50"),
            (jobs[1], "Partition=v100"),
            (jobs[2], "Comment=gavel:type=A3C,scale=2"),
            (jobs[4], "Gres=gpu:v100:2"),  # its size, where the comment names none
        ]:
            update(slurm, job, change)
        # the new job's JSON (its account and QOS print "(null)"); the job root made
        # managed is built from its text, its node needs too (--exclude, memory, CPUs:
        # backends/slurm/fit.py, slurm/cli/needs_from_text.py; 22.05 reads every job's
        # JSON in this round anyway)
        seen = observe(b, json=1, text=4)
        assert seen[new].state is JobState.PENDING
        assert seen[plain].job.job_type == "ResNet-50"
        assert seen[jobs[1]].job.partition == "v100"
        assert seen[jobs[2]].job.scale_factor == 2
        assert seen[jobs[4]].job.scale_factor == 2 and seen[jobs[1]].job.scale_factor == 1
        same_as_a_full_read(b, slurm)
        # a state change made by the daemon's own act: jobs start (Gres=gpu:N, typed by
        # the nodes), their GPUs from their text: no JSON, on 22.05 too
        place = {
            jobs[0]: JobPlacement(jobs[0], "v100", (NodeSlice("v100-1", 1),)),
            jobs[2]: JobPlacement(jobs[2], "p100", (NodeSlice("p100-1", 2),)),
        }
        assert set(b.act(RoundPlacement(0, 0.0, place)).started) == {jobs[0], jobs[2]}
        for job in (jobs[0], jobs[2]):
            slurm.wait_state(job, "RUNNING")
        seen = observe(b, json=0, text=2)
        assert seen[jobs[0]].state is JobState.RUNNING
        assert seen[jobs[0]].nodes == (NodeSlice("v100-1", 1),)
        assert seen[jobs[2]].nodes == (NodeSlice("p100-1", 2),)
        assert b.view is not None and b.view.managed[jobs[2]].gpu_slices[0].gpu_type == "p100"
        same_as_a_full_read(b, slurm)
        # requeue-held behind the daemon's back; a waiting job cancelled
        slurm.cmd("scontrol", "requeuehold", jobs[0])
        slurm.cmd("scancel", jobs[3])
        slurm.wait_state(jobs[3], "CANCELLED", "GONE")
        deadline = time.monotonic() + 30
        while slurm.state(jobs[0]) not in ("REQUEUE_HOLD", "SPECIAL_EXIT", "PENDING"):
            assert time.monotonic() < deadline, slurm.why(jobs[0])
            time.sleep(0.2)
        # the requeue-held job from its text; the cancelled one left the listing: read
        # as ended (22.05: in a full read)
        seen = observe(b, json=0, text=1, gone=True)
        assert seen[jobs[0]].state is JobState.HELD and seen[jobs[0]].restarts == 1
        assert seen[jobs[3]].state is JobState.DONE and not seen[jobs[3]].succeeded
        same_as_a_full_read(b, slurm)
    finally:
        slurm.cancel_all()


def test_only_a_managed_job_that_ends_has_its_end_read(slurm):
    """A job leaving the listing: a managed one's end is read (by id on 24.11+, by a
    full read on 22.05); another user's needs no read at all, on 22.05 too (it only
    stops holding GPUs)."""
    slurm.cancel_all()
    try:
        mine = slurm.sbatch(*MANAGED)
        theirs = slurm.sbatch("-p", "gpu", "--hold", "-o", "/dev/null", "--wrap", "sleep 300")
        b = cli_backend(env=slurm.env)
        b.observe()
        slurm.cmd("scancel", theirs)
        slurm.wait_state(theirs, "CANCELLED", "GONE")
        seen = observe(b, json=0, text=0)  # 22.05 too: no full read for it
        assert theirs not in seen
        ended_before = b.transport.commands.counts["ended"]
        slurm.cmd("scancel", mine)
        slurm.wait_state(mine, "CANCELLED", "GONE")
        seen = observe(b, json=0, text=0, gone=True)
        assert seen[mine].state is JobState.DONE
        if b.transport.cli_format.filters_work:
            assert b.transport.commands.counts["ended"] == ended_before + 1
    finally:
        slurm.cancel_all()


def test_the_first_observe_reads_one_record_per_user_and_the_ends_it_resumes(slurm):
    """A daemon's first observe after a start, at scale the round over 2 s: 24.11+
    read one JSON record per user (it names the uid the listing prints) and build
    the other jobs from their text, their node needs (--exclude, memory, CPUs: issue
    26's node fit) included; the jobs the daemon managed when it stopped (resume())
    that are no longer listed are read as ended, so a job that ended while the
    daemon was down is reported done with how it ended. 22.05 reads every job's
    JSON, the finished ones too, as before. Other users' plain jobs never become
    managed. Both views equal a full read."""
    slurm.cancel_all()
    try:
        # with an account and QOS (this cluster has no accounting: else "(null)")
        named = ("-A", "physics", "--qos=normal", *MANAGED)
        jobs = [slurm.sbatch(*named) for _ in range(8)]
        ended = jobs.pop()
        # managed jobs whose account and QOS print "(null)": unset (as on every job of a
        # cluster without accounting), or a user's literal "(null)" account: one
        # `squeue -A/-q '(null)'` each tells them apart, no JSON
        nulls = [slurm.sbatch(*MANAGED) for _ in range(2)]
        nulls.append(slurm.sbatch("-A", "(null)", *MANAGED))
        jobs += nulls
        gone_unmanaged = slurm.sbatch(*named)  # ends too, but was never managed
        # other users' plain jobs, as on any busy cluster: no comment, account or QOS
        # ("(null)" in the text), some of a uid no JSON names: built from their text,
        # as nothing reads those of a job that does not claim itself
        plain = ("-p", "gpu", "--hold", "-o", "/dev/null", "--wrap", "sleep 300")
        others = [slurm.sbatch(*plain) for _ in range(3)]
        for _ in range(3):
            res = slurm.as_user("nobody", "sbatch", "--parsable", "-D", "/tmp", *plain)
            assert res.returncode == 0, res.stderr
            others.append(res.stdout.strip().split(";")[0])
        slurm.cmd("scancel", ended, gone_unmanaged)
        for j in (ended, gone_unmanaged):
            slurm.wait_state(j, "CANCELLED", "GONE")
        b = cli_backend(env=slurm.env)
        b.transport.reader.literal_null_filter_from = (
            1  # (500 by default: the first round at scale)
        )
        b.resume([*jobs, ended])
        seen = {j.job.id: j for j in b.observe().jobs}
        assert seen[ended].state is JobState.DONE and not seen[ended].succeeded
        assert {j for j in jobs} <= set(seen) and all(
            seen[j].state is JobState.PENDING for j in jobs
        )
        first = b.transport.reader.listed
        if b.transport.cli_format.filters_work:
            read = (first.last_read, first.last_json_jobs, first.last_text_jobs)
            assert read == ("changed", 1, 6 + len(nulls) + len(others))
            assert b.transport.commands.counts["list"] == 1 + 2  # the listing, -A and -q '(null)'
            assert b.transport.commands.counts["ended"] == 1 and gone_unmanaged not in seen
        else:
            assert first.last_read == "full"
        managed = b.view.managed if b.view is not None else {}
        assert [managed[j].account for j in nulls] == ["", "", "(null)"]
        assert not set(others) & set(seen)
        same_as_a_full_read(b, slurm)
        # read once: the next observe neither reports it again nor asks for it
        again = {j.job.id: j for j in b.observe().jobs}
        assert ended not in again and b.transport.commands.counts["ended"] <= 1
    finally:
        slurm.cancel_all()


def test_the_admins_squeue_settings_change_nothing_the_daemon_reads(slurm, monkeypatch):
    """squeue takes defaults from its environment, and the daemon inherits the admin's
    shell: SQUEUE_FORMAT (which squeue prefers to the listing's SQUEUE_FORMAT2),
    SQUEUE_USERS and SQUEUE_STATES would reshape or empty the listing and hide jobs.
    The daemon's commands drop them: the view is the same as without them, read
    from the listing (not the full-read fallback an unreadable listing causes)."""
    jobs = [slurm.sbatch(*MANAGED) for _ in range(3)]
    for name, value in {
        "SQUEUE_FORMAT": "%i",
        "SQUEUE_FORMAT2": "JobID:10",
        "SQUEUE_USERS": "nobody",
        "SQUEUE_STATES": "COMPLETED",
        "SQUEUE_SORT": "-i",
        "SINFO_FORMAT": "%N",
    }.items():
        monkeypatch.setenv(name, value)
    b = cli_backend(env=slurm.env)
    b.observe()
    b.observe()  # the second observe reads the listing (the first may read JSON)
    assert b.transport.reader.listed.last_read in ("none", "changed"), (
        b.transport.reader.listed.last_read
    )
    assert b.view is not None and set(jobs) <= set(b.view.managed)
    for name in ("SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SQUEUE_USERS", "SQUEUE_STATES"):
        monkeypatch.delenv(name)
    same_as_a_full_read(b, slurm)
