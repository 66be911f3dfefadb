"""Jobs built from the listing text (slurm/cli/jobs_from_text.py) on each release's real Slurm:
every job a round lists is either built exactly as from_json._job builds it from
that job's JSON, or not built (None: its JSON is read), and which kinds of job are
built is pinned. SLURM_GAVEL_CAPTURE_LISTING=1 also writes both rounds' listing and
JSON to tests/backends/data/<release>/listing-jobs/ (what test_jobs_from_text.py
replays without Slurm)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.cli.jobs_from_text import (
    LITERAL_NULL_FIELDS,
    job_from_listing,
    node_gpu_types,
)
from slurm_gavel.backends.slurm.cli.listing import (
    LISTING_FIELDS,
    TOKEN_ALPHABET,
    Record,
    listing_command,
    new_token,
)
from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.from_json import parse_jobs
from slurm_gavel.backends.slurm.record_cache import FIELDS
from slurm_gavel.backends.slurm.records import GpuSlice, SlurmJob
from slurm_gavel.domain.comment_grammar import is_managed_comment
from tests.backends.slurm.cli.test_jobs_from_text import same_for_the_daemon, same_needs
from tests.backends.slurm.cli.test_listing_on_slurm import update

pytestmark = pytest.mark.slurm

DATA = Path(__file__).parents[2] / "data"
OUT = ("-o", "/dev/null")
MANAGED = ("--comment=gavel:type=A3C", "-p", "gpu", *OUT, "--wrap", "sleep 300")
SLEEP = ("--wrap", "sleep 300")
# user text squeue prints as is: bytes that are not UTF-8, newlines, the token's
# alphabet between '|', what squeue prints for "unset", a comment shaped like a record
HOSTILE = {
    "bytes": "bad\udcff\udcfe x",
    "newline": "a\nb",
    "crlf": "a\r\nb",
    "token": "|" + TOKEN_ALPHABET + "|",
    "null": "(null)",
    "na": "N/A",
    "fields": "7|PENDING|0|None|gpu|N/A|N/A|1|0|1795721193|N/A|N/A|0:0|(null)|(null)|0||N/A|x",
    "spaces": "  spaced  ",
    "empty": "",
}


# job names squeue prints as they are: the token's alphabet between '|', "unset", bytes
# that are not UTF-8, spaces (a name with a line break is read as JSON: jobs_from_text)
NAMES = {
    "token": "|" + TOKEN_ALPHABET + "|",
    "null": "(null)",
    "bytes": "n\udcff\udcfe",
    "spaces": " a  b ",
}


# sbatch options of new managed jobs with node needs: --exclude, memory per node, CPU
# or GPU, CPUs per node or GPU, --prefer, on two nodes; their layout; a deadline
NEEDS = {
    "exclude": ("--exclude=k80-1,v100-[1-2]",),
    "mem": ("--mem=1537", "-c", "2"),
    "mem_per_cpu": ("--mem-per-cpu=300", "-c", "3"),
    "one_cpu": ("--mem-per-cpu=200",),
    "mem_per_gpu": ("--mem-per-gpu=700", "--gres=gpu:v100:2"),
    "cpus_per_gpu": ("--cpus-per-gpu=2", "--gres=gpu:1", "--mem-per-cpu=100"),
    # one CPU per node, per-CPU memory: kept per node (the same figures; the Lua takes
    # the GPU request, --cpus-per-gpu with it, off a managed job: no CPUs per GPU)
    "one_cpu_per_gpu": ("--cpus-per-gpu=1", "--gres=gpu:1", "--mem-per-cpu=100"),
    "prefer": ("--prefer=v100",),
    "two_nodes": ("-N", "2", "-c", "2", "--mem-per-cpu=100", "--gres=gpu:1"),
    # the layout (slurm/layout.py): one rank per node, and tasks per node without -N;
    # and a --deadline (eligibility.py)
    "rank_per_node": ("-N", "2", "--ntasks-per-node=1", "--gres=gpu:1"),
    "tasks_per_node": ("-n", "4", "--ntasks-per-node=2"),
    "deadline": ("--deadline=now+3600",),
}


@dataclass
class Read:
    text: str
    token: str
    doc: dict
    records: dict[str, Record]  # jobs whose record did not change during the JSON read
    jobs: dict[str, SlurmJob]
    names: dict[int, str]  # uid -> user name, as the text listed it (22.05)


def read(b: SlurmBackend, wanted: set[str]) -> Read:
    """The listing as the daemon reads it (CliReader.listing: on 22.05 with the second
    listing's --exclude and user names) and every listed job's JSON, taken until every
    wanted job's record is the same before and after the JSON (backfill may move a
    pending job meanwhile)."""
    for _ in range(20):
        token = new_token()
        fmt = b.transport.cli_format
        argv, env = listing_command(token, fmt.node_sharing_field, fmt.excluded_field)
        text = b.transport.commands.run("list", argv, env=env).stdout  # for capture()
        first = b.transport.reader.listing()
        doc = b.transport.reader._json("observe", b.transport.cli_format.jobs_argv())
        second = b.transport.reader.listing()
        assert first is not None and second is not None
        stable = {j: r for j, r in first[0].items() if second[0].get(j) == r}
        if wanted <= set(stable):
            _, jobs = parse_jobs(doc)
            return Read(text, token, doc, stable, {j.job_id: j for j in jobs}, first[1])
    raise AssertionError(f"jobs {sorted(wanted - set(stable))} kept changing")


def capture(slurm, name: str, r: Read) -> None:
    if not os.environ.get("SLURM_GAVEL_CAPTURE_LISTING"):
        return
    out = DATA / slurm.release / "listing-jobs"
    out.mkdir(exist_ok=True)
    (out / f"{name}.txt").write_bytes(r.text.encode("utf-8", "surrogateescape"))
    (out / f"{name}.token").write_text(r.token)
    trimmed = {
        "meta": r.doc["meta"],
        "errors": [],
        "jobs": [{f: j[f] for f in FIELDS if f in j} for j in r.doc["jobs"]],
    }
    (out / f"{name}.json").write_bytes(
        json.dumps(trimmed, indent=0).encode("utf-8", "surrogateescape")
    )


def test_jobs_built_from_the_listing_are_those_their_json_gives(slurm):
    # The test fills most of the cluster: it needs every node up and idle first.
    left = slurm.cancel_all()
    assert not left, f"the cluster is not idle before the test: {left}"
    try:
        sub = slurm.sbatch
        held = sub(*MANAGED)  # held on arrival (job_submit.lua)
        later = sub(*MANAGED, "--begin=now+3600")  # released: waits for its begin time
        starts = sub(*MANAGED, "--gres=gpu:1")  # released: starts (untyped: anywhere)
        run1 = sub("-p", "v100", "--gres=gpu:v100:1", *OUT, *SLEEP)
        run2 = sub("-p", "p100", "--gres=gpu:p100:2", *OUT, *SLEEP)
        multi = sub("-p", "k80", "-N", "2", "--gres=gpu:k80:2", *OUT, *SLEEP)
        untyped = sub("-p", "v100", "--gres=gpu:1", *OUT, *SLEEP)
        ckpt = sub("-p", "v100", "--gres=gpu:v100:1", *OUT, "--wrap",
                   "trap 'exit 99' USR1; sleep 300 & wait")  # fmt: skip
        requeued = sub("-p", "v100", "--gres=gpu:v100:1", *OUT, *SLEEP)
        done = sub("-p", "gpu", *OUT, "--wrap", "true")
        cancelled = sub("-p", "gpu", "--hold", *OUT, *SLEEP)
        plain = sub("-p", "gpu", "--hold", *OUT, *SLEEP)  # no comment at all
        null_account = sub("-p", "gpu", "--hold", "-A", "(null)", *OUT, *SLEEP)
        hostile = {k: sub("-p", "gpu", "--hold", f"--comment={c}", *OUT, *SLEEP)
                   for k, c in HOSTILE.items()}  # fmt: skip
        to = {k: sub("-p", "gpu", "--hold", "--comment=x", *OUT, *SLEEP)
              for k in ("null", "crlf", "token")}  # fmt: skip
        # names (user text, read for --dependency=singleton) squeue prints as they are
        named_odd = {k: sub("-p", "gpu", "--hold", "-J", n, *OUT, *SLEEP)
                     for k, n in NAMES.items()}  # fmt: skip
        # held now, started between the rounds (a new run: no slices to keep)
        start = {
            "1": sub("-p", "v100", "--hold", "--gres=gpu:v100:1", *OUT, *SLEEP),
            "2": sub("-p", "p100", "-w", "p100-1", "--hold", "--gres=gpu:p100:2", *OUT, *SLEEP),
            "2x2": sub("-p", "k80", "-N", "2", "--hold", "--gres=gpu:k80:2", *OUT, *SLEEP),
            # untyped, as the daemon's own update (StartOrder.gres): typed by the nodes
            "untyped": sub("-p", "v100", "--hold", "--gres=gpu:2", *OUT, *SLEEP),
            "per_job": sub("-p", "v100", "--hold", "--gpus=v100:1", *OUT, *SLEEP),
            # asks one GPU, gets all of its node's
            "exclusive": sub("-p", "p100", "-w", "p100-2", "--hold", "--exclusive",
                             "--gres=gpu:p100:1", *OUT, *SLEEP),
        }  # fmt: skip
        rerun = sub("-p", "v100", "--gres=gpu:v100:1", *OUT, *SLEEP)  # requeued: a new run
        waiter = sub(*MANAGED, f"--dependency=afterok:{run1}")  # held, and a dependency
        for job in (run1, run2, multi, untyped, ckpt, requeued, rerun):
            slurm.wait_state(job, "RUNNING")
        slurm.wait_state(done, "COMPLETED", "GONE")
        b = cli_backend(env=slurm.env)
        everyone = {held, later, starts, run1, run2, multi, untyped, ckpt, requeued,
                    cancelled, plain, null_account, *hostile.values(), *to.values(),
                    *start.values(), rerun, waiter, *named_odd.values()}  # fmt: skip
        first = read(b, everyone)
        capture(slurm, "round1", first)
        last = {j: (r, first.jobs[j]) for j, r in first.records.items()}
        users = {j.user_id: j.user for j in first.jobs.values() if j.user_id is not None}
        # with no user name known, a job that claims itself cannot be built (the name
        # is only in the JSON); one that does not can, without the name
        comment_at = list(LISTING_FIELDS).index("comment")
        for r in first.records.values():
            got = job_from_listing(r, None, {})
            if is_managed_comment(r[comment_at]):
                assert got is None, r
            else:
                assert got is None or (got.user == "" and got.blanked), r

        # what happens between two rounds
        for job in (held, plain, null_account, *hostile.values()):
            update(slurm, job, "Partition=v100")
        update(slurm, run1, "Comment=gavel:type=ResNet-50")  # running, same nodes
        update(slurm, to["null"], "Comment=(null)")
        update(slurm, to["crlf"], "Comment=a\r\nb")
        update(slurm, to["token"], f"Comment={HOSTILE['token']}x")
        slurm.cmd("scontrol", "release", f"{later},{starts}")
        slurm.cmd("scancel", "--signal=USR1", "--batch", ckpt)
        slurm.cmd("scontrol", "requeuehold", requeued)
        slurm.cmd("scancel", cancelled)
        slurm.cmd("scontrol", "release", ",".join(start.values()))
        slurm.cmd("scontrol", "requeue", rerun)
        requeued_at = time.time()
        # a managed job that ran, was requeue-held and had its memory updated: its
        # tres-alloc is its request now (needs_from_text.py)
        ran = sub("--mem-per-cpu=300", "-c", "3", *MANAGED)
        slurm.cmd("scontrol", "release", ran)
        slurm.wait_state(ran, "RUNNING")
        slurm.cmd("scontrol", "requeuehold", ran)
        slurm.wait_state(ran, "PENDING")
        update(slurm, ran, "MinMemoryCPU=200")
        new = sub(*MANAGED)
        named = sub(*MANAGED, "-A", "gavel-acct", "--qos=normal")  # accounting names them
        # new managed jobs with node needs (fit.JobNeeds: slurm/cli/needs_from_text.py)
        needs = {k: sub(*a, "-A", "gavel-acct", "--qos=normal", *MANAGED) for k, a in NEEDS.items()}
        slurm.wait_state(starts, "RUNNING")
        slurm.wait_state(ckpt, "SPECIAL_EXIT")
        for job in (requeued, cancelled):
            slurm.wait_state(job, "PENDING", "REQUEUE_HOLD", "CANCELLED", "GONE")
        for job in start.values():
            slurm.wait_state(job, "RUNNING")
        wait_rerun(slurm, rerun, requeued_at)

        second = read(b, everyone - {cancelled} | {new, named, ran, *needs.values()})
        capture(slurm, "round2", second)
        types = node_gpu_types(b.transport.read_nodes())
        assert types["v100-1"] == "v100"
        sharing = b.transport.cli_format.node_sharing_field
        assert sharing == ("Exclusive" if slurm.release == "26.05" else "OverSubscribe")
        # every release's listing prints the --exclude (22.05: the second listing's)
        assert (b.transport.cli_format.excluded_field is None) == (slurm.release == "22.05")
        # 22.05's second listing names the uids of the listed jobs as the JSON does
        # (24.11+: none listed); an earlier test's job of another user that has ended
        # is in 22.05's JSON, not in the listing
        listed_users = {
            j.user_id: j.user
            for job_id, j in second.jobs.items()
            if job_id in second.records and j.user_id is not None
        }
        assert second.names == (listed_users if slurm.release == "22.05" else {}), second.names
        built = {}
        for job_id, record in second.records.items():
            got = job_from_listing(record, last.get(job_id), users, types, sharing, None, True)
            if got is not None:
                assert same_for_the_daemon(got, second.jobs[job_id]), (got, second.jobs[job_id])
                if is_managed_comment(got.comment):
                    assert same_needs(got.needs, second.jobs[job_id].needs), job_id
                built[job_id] = got
        assert done not in second.records and cancelled not in second.records
        # a daemon that just started (no last records; the user names known, from the
        # second listing on 22.05, and the literal "(null)" accounts and QOS, as
        # CliReader._literal_nulls lists them): each job built is still its JSON's, the
        # running managed ones included
        started = second.names or users  # 24.11+: one JSON record per uid names them
        nulls = {
            name: frozenset(slurm.cmd("squeue", "-h", flag, "(null)", "-o", "%A").stdout.split())
            for name, flag in LITERAL_NULL_FIELDS.items()
        }
        at_start = {}
        for job_id, record in second.records.items():
            got = job_from_listing(record, None, started, types, sharing, nulls, True)
            if got is not None:
                at_start[job_id] = got
                assert same_for_the_daemon(got, second.jobs[job_id]), (got, second.jobs[job_id])
                if is_managed_comment(got.comment):
                    assert same_needs(got.needs, second.jobs[job_id].needs), job_id
            else:
                assert job_id not in (run1, ran), job_id
            if got is not None and job_id == ran:
                assert got.restarts == 1 and got.needs.memory_per_cpu_mb == 200, got
        # new: its account and QOS print "(null)" (no literal_nulls listing here)
        as_json = {new, starts, start["per_job"], start["exclusive"]}
        from_text = {held, later, run2, multi, untyped, ckpt, requeued, plain,
                     null_account, *hostile.values(), to["token"], start["1"], start["2"],
                     start["2x2"], start["untyped"], rerun, to["null"], to["crlf"]}  # fmt: skip
        # a new managed job: built from its text, with its node needs (its --exclude
        # from the listing, 22.05's second listing); so is run1, which claims itself
        # between the rounds while it runs: its node needs from its allocation
        # (needs_from_text.py). 22.05 prints the new ones' QOS "(null)" without
        # accounting: built where the filtered listings tell it (a daemon's first
        # round), else read as JSON (run1's is its last JSON's: its text is unchanged)
        fresh = {named, *needs.values(), run1}
        if slurm.release == "22.05":
            as_json |= fresh - {run1}
            from_text.add(run1)
            # its request's CPUs are not MinCPUs' (needs_from_text._memory_kind): JSON
            fresh.discard(needs["cpus_per_gpu"])
        else:
            from_text |= fresh
        assert from_text <= set(built), sorted(from_text - set(built))
        assert fresh <= set(at_start), sorted(fresh - set(at_start))
        assert at_start[needs["exclude"]].needs.excluded == ("k80-1", "v100-1", "v100-2")
        assert at_start[needs["mem_per_cpu"]].needs.memory_per_cpu_mb == 300
        assert at_start[needs["mem"]].needs.memory_per_node_mb == 1537
        assert at_start[needs["prefer"]].needs.prefer == "v100"
        # a new managed job whose account is "(null)" (unset, or a user's "(null)");
        # one that just started with no GPU request (starts: no gres) or one its text
        # cannot say per node (--gpus, --exclusive). A comment that became "(null)" or
        # holds "\r" (the text cannot say which) no longer claims the job: built, blanked
        assert built[to["null"]].blanked and built[to["null"]].comment == ""
        assert not as_json & set(built), sorted(as_json & set(built))
        assert second.jobs[ckpt].exit_code == 99 and built[ckpt].held
        assert built[run2].gpu_slices == first.jobs[run2].gpu_slices != ()
        assert len(built[multi].gpu_slices) == 2
        assert built[hostile["bytes"]].comment == HOSTILE["bytes"]
        # the runs that just started, from their text: whole GPUs by count
        p100 = second.jobs[start["2"]].nodes
        assert built[start["1"]].gpu_slices[0].gpus == 1
        assert built[start["2"]].gpu_slices == (GpuSlice(p100[0], "p100", 2),)
        assert built[start["2x2"]].gpu_slices == tuple(
            GpuSlice(n, "k80", 2) for n in ("k80-1", "k80-2")
        )
        assert [s.gpu_type for s in built[start["untyped"]].gpu_slices] == ["v100"]
        assert built[rerun].restarts == 1 and built[rerun].start_time > first.jobs[rerun].start_time
        # untyped without the nodes' types: read as JSON
        untyped_record = second.records[start["untyped"]]
        assert job_from_listing(untyped_record, last[start["untyped"]], users, {}, sharing) is None
        assert [s.gpus for s in second.jobs[start["exclusive"]].gpu_slices] == [4]
        exclusive = second.records[start["exclusive"]]
        assert exclusive[list(LISTING_FIELDS).index("node_sharing")] in ("NO", "NODE")
    finally:
        slurm.cancel_all()


NODE_KEYS = ("NodeName", "State", "Gres", "GresUsed", "AllocTRES", "CPUAlloc", "AllocMem")


def wait_rerun(slurm, job: str, requeued_at: float) -> None:
    """A requeued job runs again (its restart count 1): StartTime=now, as the daemon
    places a job, cuts Slurm's delay before a requeued job may start. Not within the
    second of its requeue, as the daemon (Preemption._wait_out_requeue_second): slurmd
    refuses that launch, "Job credential revoked", and the job ends FAILED (CI, 22.05:
    ExitCode 1:0, RunTime 0, Restarts 1)."""
    time.sleep(max(0.0, int(requeued_at) + 1.05 - time.time()))
    deadline = time.monotonic() + 150
    nudged = 0.0
    while True:
        out = slurm.cmd("squeue", "-h", "-j", job, "-O", "RestartCnt:10,State:20").stdout.split()
        if out == ["1", "RUNNING"]:
            return
        # Every 5 s, not every poll: each update resets the job's reason to None, and in
        # two CI runs on 22.05 the job sat PENDING "Reason=None" for the whole minute
        # (the test's jobs fill the v100 nodes; its GPU frees as the others settle).
        if out[:2] == ["1", "PENDING"] and time.monotonic() - nudged >= 5.0:
            slurm.cmd("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
            nudged = time.monotonic()
        if time.monotonic() >= deadline:
            v100 = slurm.cmd(
                "squeue", "-h", "-p", "v100,gpu", "-o", "%i %T %R %b %N", check=False
            ).stdout
            # What the nodes count in use beside what the jobs hold: twice on 22.05 a
            # V100 node counted GPUs that no running job listed there seemed to hold.
            used = "\n".join(
                " ".join(f"{k}={fields[k]}" for k in NODE_KEYS if k in fields)
                for name, fields in slurm.nodes().items()
                if name.startswith("v100")
            )
            raise AssertionError(
                f"{slurm.why(job)}\njobs on v100/gpu:\n{v100}\nv100 nodes:\n{used}"
            )
        time.sleep(0.5)


def test_with_accounting_a_known_job_of_another_user_is_built_from_its_text(slurm_accounting):
    """With slurmdbd every job has an account and a QOS: a managed job of another user
    than the daemon's, read as JSON once, is built from its text from then on."""
    slurm = slurm_accounting
    slurm.cancel_all()

    def submit() -> str:
        res = slurm.as_user(
            "nobody", "sbatch", "--parsable", "-D", "/tmp", *OUT, "-p", "gpu",
            "-A", "biology", "--comment=gavel:type=A3C", *SLEEP,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        return res.stdout.strip().split(";")[0]

    try:
        first = submit()
        b = cli_backend(env=slurm.env)
        before = read(b, {first})
        users = {j.user_id: j.user for j in before.jobs.values() if j.user_id is not None}
        second = submit()
        after = read(b, {first, second})
        # new and managed: built from its text (its --exclude listed: 22.05's second
        # listing), and from then on
        sharing = b.transport.cli_format.node_sharing_field
        new = job_from_listing(after.records[second], None, users, None, sharing, None, True)
        assert new is not None and same_needs(new.needs, after.jobs[second].needs)
        last = (before.records[first], before.jobs[first])
        got = job_from_listing(after.records[first], last, users, None, sharing, None, True)
        assert got is not None and got == after.jobs[first]
        assert same_needs(got.needs, after.jobs[first].needs)
        assert (got.user, got.account) == ("nobody", "biology") and got.qos
    finally:
        slurm.cancel_all()


def test_the_first_round_after_a_start_builds_the_jobs_from_their_text(slurm):
    """What CliReader.read_jobs reads in a daemon's first round, with the saved state's
    managed jobs watched: jobs built from their text on every release (22.05: its
    --exclude and user names from the second listing), each its JSON's; a full read
    only where the text cannot say a job (22.05), or where a watched job is no longer
    listed (22.05: only the full read with finished jobs tells how it ended)."""
    slurm.cancel_all()
    try:
        sub = slurm.sbatch
        # (not --cpus-per-gpu: 22.05 prints a request its text cannot read, its JSON is)
        managed = {k: sub(*a, *MANAGED) for k, a in NEEDS.items() if k != "cpus_per_gpu"}
        named = {k: sub("-J", n, *MANAGED) for k, n in NAMES.items()}
        hostile = {k: sub("-p", "gpu", "--hold", f"--comment={c}", *OUT, *SLEEP)
                   for k, c in HOSTILE.items()}  # fmt: skip
        # a hostile --exclude cannot be submitted (slurmctld checks the node names)
        odd = slurm.cmd(
            "sbatch", "-p", "gpu", "--exclude=" + HOSTILE["token"], *OUT, *SLEEP, check=False
        )
        assert odd.returncode != 0
        running = sub("-p", "v100", "--gres=gpu:v100:1", *OUT, *SLEEP)
        done = sub("-p", "gpu", *OUT, "--wrap", "true")
        # placed on a node that is not available: its reason is a description (22.05:
        # "ReqNodeNotAvail, UnavailableNodes:k80-2"; 24.11+: "..., May be reserved
        # for other job")
        slurm.cmd("scontrol", "update", "NodeName=k80-2", "State=DRAIN", "Reason=test")
        drained = sub(*MANAGED)
        update(slurm, drained, "NodeList=k80-2")  # as the daemon places a job
        slurm.cmd("scontrol", "release", drained)
        slurm.wait_state(running, "RUNNING")
        slurm.wait_state(done, "COMPLETED", "GONE")
        update(slurm, running, "Comment=gavel:type=ResNet-50")  # managed, running
        watched = {*managed.values(), *named.values(), running, drained}
        deadline = time.monotonic() + 30
        reason = ("squeue", "-h", "-j", drained, "-o", "%r")
        while "ReqNodeNotAvail, " not in slurm.cmd(*reason).stdout:
            assert time.monotonic() < deadline, slurm.why(drained)
            time.sleep(0.5)

        def first_round(watching: set[str]) -> tuple[list[SlurmJob], dict[str, SlurmJob], str]:
            for _ in range(20):
                b = cli_backend(env=slurm.env)
                reader = b.transport.reader
                reader.literal_null_filter_from = 1  # no accounting: every account "(null)"
                before = reader.listing()
                jobs = reader.read_jobs(b.transport.read_nodes(), first=True, watched=watching)
                doc = reader._json("observe", reader.cli_format.jobs_argv())
                after = reader.listing()
                assert before is not None and after is not None
                if before[0] == after[0]:  # nothing moved while it was read
                    return jobs, {j.job_id: j for j in parse_jobs(doc)[1]}, reader.listed.last_read
            raise AssertionError("the jobs kept changing")

        jobs, json_jobs, how = first_round(watched)
        # 22.05: no JSON at all; 24.11+: one JSON record names the uid
        assert how == ("none" if slurm.release == "22.05" else "changed"), how
        got = {j.job_id: j for j in jobs}
        assert watched | set(hostile.values()) <= set(got) <= set(json_jobs) - {done}
        for job_id, job in got.items():
            assert same_for_the_daemon(job, json_jobs[job_id]), (job, json_jobs[job_id])
            if is_managed_comment(job.comment):
                assert same_needs(job.needs, json_jobs[job_id].needs), job_id
        assert got[managed["exclude"]].needs.excluded == ("k80-1", "v100-1", "v100-2")
        assert got[named["token"]].name == NAMES["token"]
        assert got[drained].reason == "ReqNodeNotAvail"
        # a watched job no longer listed: 22.05 reads every job's JSON, finished ones too
        jobs, _, how = first_round(watched | {done})
        assert how == ("full" if slurm.release == "22.05" else "changed"), how
        # a job the text cannot say (a name with a line break): its JSON (22.05: all)
        sub("-J", "a\nb", *MANAGED)
        _, _, how = first_round(watched)
        assert how == ("full" if slurm.release == "22.05" else "changed"), how
    finally:
        slurm.cmd("scontrol", "update", "NodeName=k80-2", "State=RESUME", check=False)
        slurm.cancel_all()
