"""Jobs built from the listing text (slurm/cli/jobs_from_text.py), replayed from two rounds
captured on each real release (tests/backends/slurm/cli/test_jobs_from_text_on_slurm.py with
SLURM_GAVEL_CAPTURE_LISTING=1: held, released, running on 1, 2 and 2x2 GPUs,
untyped, checkpointed (exit 99), requeue-held, hostile comments; started between the
rounds on 1, 2, 2x2 GPUs, untyped, with --gpus, --exclusive, and requeued into a new
run), then with hostile values written into the text."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli.jobs_from_text import job_from_listing
from slurm_gavel.backends.slurm.cli.listing import LISTING_FIELDS, Record, parse_listing
from slurm_gavel.backends.slurm.fit import JobNeeds
from slurm_gavel.backends.slurm.from_json import parse_jobs
from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.domain.comment_grammar import is_managed_comment

DATA = Path(__file__).parents[2] / "data"
RELEASES = ["22.05", "24.11", "26.05"]
AT = {name: i for i, name in enumerate(LISTING_FIELDS)}
# The captures' nodes (tools/local-cluster's default topology): one GPU type each.
TYPES = {f"{t}-{i}": t for t in ("v100", "p100", "k80") for i in (1, 2)}
# The field each release's listing printed as node_sharing (CliFormat.node_sharing_field).
SHARING = {"22.05": "OverSubscribe", "24.11": "OverSubscribe", "26.05": "Exclusive"}


def same_for_the_daemon(got: SlurmJob, want: SlurmJob) -> bool:
    """Equal; for a job whose comment does not claim it, equal but for its comment,
    account, QOS and user name, which nothing reads (job_from_listing), as long as
    the built comment does not claim it either."""
    if is_managed_comment(want.comment):
        return got == want
    unread = {"comment": "", "account": "", "qos": "", "user": ""}
    return not is_managed_comment(got.comment) and replace(got, **unread) == replace(want, **unread)


def same_needs(got: JobNeeds, want: JobNeeds) -> bool:
    """The same needs for the node fit: every field but how the memory is kept, and the
    same memory and CPUs on a node at every GPU count (needs_from_text.py keeps a job
    with one CPU per node's memory per node, its JSON may say per CPU)."""
    unset = {"memory_per_node_mb": 0, "memory_per_cpu_mb": 0}
    return replace(got, **unset) == replace(want, **unset) and all(
        got.on_node(g) == want.on_node(g) for g in (1, 2, 3, 4, 8)
    )


def load(release: str, name: str) -> tuple[dict[str, Record], dict[str, SlurmJob]]:
    where = DATA / release / "listing-jobs"
    raw = (where / f"{name}.txt").read_bytes().decode("utf-8", "surrogateescape")
    text = raw.replace("\r\n", "\n").replace("\r", "\n")  # as SlurmCommands decodes it
    listing = parse_listing(text, (where / f"{name}.token").read_text())
    doc = json.loads((where / f"{name}.json").read_bytes().decode("utf-8", "surrogateescape"))
    assert listing is not None
    return listing, {j.job_id: j for j in parse_jobs(doc)[1]}


def rounds(release: str):
    (l1, j1), (l2, j2) = load(release, "round1"), load(release, "round2")
    last = {j: (r, j1[j]) for j, r in l1.items() if j in j1}
    return last, l2, j2


def users(release: str) -> dict[int, str]:
    """The user names round 1's JSON gave (what IncrementalJobs passes)."""
    return {j.user_id: j.user for j in load(release, "round1")[1].values() if j.user_id is not None}


def with_value(record: Record, field: str, value: str) -> Record:
    out = list(record)
    out[AT[field]] = value
    return tuple(out)


@pytest.mark.parametrize("release", RELEASES)
def test_every_job_built_from_text_is_the_one_its_json_gives(release):
    last, listing, jobs = rounds(release)
    built = {}
    excluded = release != "22.05"  # CliFormat.excluded_field
    for job_id, record in listing.items():
        got = job_from_listing(
            record, last.get(job_id), users(release), TYPES, SHARING[release], None, excluded
        )
        if got is not None:
            assert same_for_the_daemon(got, jobs[job_id]), (got, jobs[job_id])
            if is_managed_comment(got.comment):
                assert same_needs(got.needs, jobs[job_id].needs), (got, jobs[job_id])
            built[job_id] = got
    states = {j.state for j in built.values()}
    assert {"PENDING", "RUNNING", "SPECIAL_EXIT"} <= states
    assert any(j.reason == "JobHeldUser" and j.restarts for j in built.values())  # requeue-held
    kept = [j for j in built.values() if j.state == "RUNNING" and not new_run(last, j)]
    assert any(len(j.gpu_slices) == 2 for j in kept)  # 2 nodes, kept
    # started since: 1, 2, 2x2 GPUs, untyped, a requeued job's new run
    runs = [j for j in built.values() if j.state == "RUNNING" and new_run(last, j)]
    assert sorted(sum(s.gpus for s in j.gpu_slices) for j in runs) == [1, 1, 2, 2, 4]
    assert any(j.restarts == 1 for j in runs)
    started = [j for j in jobs.values() if j.state == "RUNNING" and new_run(last, j)]
    # as JSON: no GPU request, --gpus, --exclusive (all of its node's 4 GPUs)
    assert sorted(sum(s.gpus for s in j.gpu_slices) for j in started if j not in runs) == [0, 1, 4]
    assert len(built) >= 25 and len(built) < len(listing)  # some are read as JSON
    # a new managed job: built where its account and QOS are named (sbatch -A --qos),
    # not "(null)", with its node needs where the listing prints its --exclude (24.11+):
    # `named` and the 12 with needs (test_jobs_from_text_on_slurm.NEEDS); 22.05 reads
    # them as JSON
    new_managed = [j for j in built.values() if j.job_id not in last and j.comment]
    assert [j.account for j in new_managed] == ["gavel-acct"] * (13 if excluded else 0)
    per_cpu = {j.needs.memory_per_cpu_mb for j in new_managed}
    # "one_cpu": kept per node; "tasks_per_node": the cluster's DefMemPerCPU, 2 CPUs
    assert per_cpu == ({0, 100, 300, 1000} if excluded else set())
    for record in listing.values():
        if record[AT["account"]] == "(null)" and record[AT["comment"]].startswith("gavel:"):
            assert job_from_listing(record, None, users(release)) is None
    # the jobs that do not claim themselves are built: nothing reads the values their
    # text cannot say (a comment, account or QOS "(null)", a comment with "\r"); only
    # a run that just started with GPUs its text does not say (--gpus, --exclusive)
    unclaimed = {j for j, r in listing.items() if not is_managed_comment(r[AT["comment"]])}
    as_json = unclaimed - set(built)
    assert all(jobs[j].state == "RUNNING" and new_run(last, jobs[j]) for j in as_json), as_json
    assert len(as_json) == 2 and sum(built[j].blanked for j in unclaimed - as_json) >= 10


def new_run(last: dict[str, tuple[Record, SlurmJob]], job: SlurmJob) -> bool:
    before = last[job.job_id][1]
    return (before.state, before.start_time, before.restarts) != (
        job.state,
        job.start_time,
        job.restarts,
    )


def held_job(release: str) -> tuple[Record, tuple[Record, SlurmJob], SlurmJob]:
    """A job held on arrival and seen last round, built from text, with a plain
    comment."""
    last, listing, _ = rounds(release)
    for job_id, record in listing.items():
        if job_id not in last:
            continue
        got = job_from_listing(record, last[job_id], users(release))
        if got is not None and got.held and got.restarts == 0 and got.comment == "gavel:type=A3C":
            return record, last[job_id], got
    raise AssertionError("no held managed job captured")


@pytest.mark.hostile
@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("comment", "gavel:type=A3C\nb"),  # or "\r\n" before universal newlines
        ("account", "(null)"),
        ("qos", "(null)"),
        ("account", "two words"),
        ("job_state", "PENDING "),
        ("job_state", "BOGUS"),
        ("job_state", "COMPLETED"),  # not a state the listing asks for
        ("priority", "12x"),
        ("priority", "-1"),
        ("priority", ""),
        ("submit_time", "2026-11-26T16:07:14"),  # a time not printed as epoch seconds
        ("start_time", "Unknown"),
        ("eligible_time", "NONE"),
        ("exit_code", "0:x"),
        ("exit_code", "N/A"),
        ("state_reason", "a description slurmctld wrote"),
        ("tres_per_node", "gres/gpu:1 x"),
        ("tres_per_node", ""),
        ("user_id", "1001"),  # user_name follows user_id: only in the JSON
        ("node_count", "1-2"),
        ("nodes", "v100-1"),  # a pending job... as long as it has nodes: see below
        ("job_id", "99999"),  # the last round's job is another's
        ("tasks", "2-4"),
        ("tasks", "N/A"),
        ("tasks_per_node", "-1"),
        ("deadline", "2026-11-29T07:00:00"),
        ("name", "a\nb"),  # or "a\r\nb", "a\rb" before universal newlines
    ],
)
def test_a_value_the_text_cannot_say_exactly_is_read_as_json(release, field, value):
    record, last, _ = held_job(release)
    if last[0][AT[field]] == value:  # "(null)" last round too would be kept: not now
        last = (with_value(last[0], field, "other"), last[1])
    changed = with_value(record, field, value)
    if field == "nodes":  # a pending job's nodes say no slices; a running one's do
        changed = with_value(changed, "job_state", "RUNNING")
    assert job_from_listing(changed, last, users(release)) is None


@pytest.mark.hostile
@pytest.mark.parametrize("release", RELEASES)
def test_hostile_comments_are_kept_as_text_or_left_to_json(release):
    record, last, job = held_job(release)
    token_like = "|0123456789abcdef|PENDING|0|(null)"
    for comment in [token_like, "N/A", "", "  spaced  ", "bad\udcff\udcfe", "x\tJobHeldUser"]:
        got = job_from_listing(with_value(record, "comment", comment), last, users(release))
        assert got == replace(job, comment=comment)
    # a claiming comment with a newline is kept only while the text is the last round's
    for comment, json_value in [("gavel:type=A3C\nb", "gavel:type=A3C\r\nb")]:
        before = (with_value(last[0], "comment", comment), replace(last[1], comment=json_value))
        now = with_value(with_value(record, "comment", comment), "priority", "7")
        got = job_from_listing(now, before, users(release))
        assert got == replace(job, comment=json_value, priority=7)
    # one that does not claim the job ("(null)": unset, or a user's "(null)"; "a\r\nb")
    # is built all the same, blanked: the job is not managed either way
    for comment, built_as in [("(null)", ""), ("a\nb", "a\nb")]:
        got = job_from_listing(with_value(record, "comment", comment), last, users(release))
        assert got is not None and got.comment == built_as and got.blanked
        assert replace(got, comment=job.comment) == job
    # "job requeued in held state" is JobHeldUser only for a held job (priority 0)
    described = with_value(record, "state_reason", "job requeued in held state")
    assert job_from_listing(described, last, users(release)) == replace(job, reason="JobHeldUser")
    assert job_from_listing(with_value(described, "priority", "5"), last, users(release)) is None
    # nodes asked for by name that are unavailable: the reason is the description's first
    # word; any other text after it, or whitespace in the node list, is not trusted
    for text, reason in [
        ("ReqNodeNotAvail, UnavailableNodes:k80-[1-2],v100-1", "ReqNodeNotAvail"),
        ("ReqNodeNotAvail, UnavailableNodes:", "ReqNodeNotAvail"),
        ("ReqNodeNotAvail, UnavailableNodes:k80-1 x", None),
        ("ReqNodeNotAvail, UnavailableNodes:k80-1\nx", None),
        ("ReqNodeNotAvail, May be reserved for other job", "ReqNodeNotAvail"),
        ("ReqNodeNotAvail, May be reserved for other job x", None),
        ("ReqNodeNotAvail, Reserved for maintenance", None),
        ("Resources, UnavailableNodes:k80-1", None),
    ]:
        got = job_from_listing(with_value(record, "state_reason", text), last, users(release))
        assert (got and got.reason) == reason, text
    assert job_from_listing(record[:-1], last, users(release)) is None  # a field short


@pytest.mark.parametrize("release", RELEASES)
def test_a_running_job_keeps_its_gpus_only_while_it_is_the_same_run(release):
    """A run restarted on the same node may hold other GPUs there: its slices are
    those its request says (slices the last round's JSON gave differently stand in
    for another run's), not the last round's."""
    last, listing, _ = rounds(release)
    job_id, record = next(
        (j, r) for j, r in listing.items()
        if r[AT["job_state"]] == "RUNNING" and last.get(j, ((),))[0] == r
    )  # fmt: skip
    assert job_from_listing(record, last[job_id], users(release)) == last[job_id][1]
    comment = with_value(record, "comment", "gavel:type=A3C")  # an update: same run
    names = users(release)
    # a job that claims itself is read as JSON once (its needs: listing.JSON_ONLY)
    assert job_from_listing(comment, last[job_id], names) is None
    last[job_id] = (last[job_id][0], replace(last[job_id][1], comment="gavel:type=A3C"))
    got = job_from_listing(comment, last[job_id], names)
    assert got is not None and got.gpu_slices == last[job_id][1].gpu_slices
    before = last[job_id][1]
    (first, *_) = before.gpu_slices
    other = (replace(first, gpus=first.gpus + 1),)
    last_other = (last[job_id][0], replace(before, gpu_slices=other))
    assert job_from_listing(comment, last_other, names).gpu_slices == other  # same run
    for field, value in [("restart_cnt", "1"), ("start_time", "1795800000")]:
        got = job_from_listing(
            with_value(comment, field, value), last_other, names, TYPES, SHARING[release]
        )
        assert got is not None and got.gpu_slices == before.gpu_slices != other


def started_job(release: str, gpus: str) -> tuple[Record, tuple[Record, SlurmJob], SlurmJob]:
    """The job that started between the rounds with this tres-per-node, built from text."""
    last, listing, _ = rounds(release)
    for job_id, record in listing.items():
        if job_id not in last:
            continue
        got = job_from_listing(record, last[job_id], users(release), TYPES, SHARING[release])
        if got is not None and new_run(last, got) and record[AT["tres_per_node"]] == gpus:
            return record, last[job_id], got
    raise AssertionError(f"no job with {gpus} captured as it started")


def gres(release: str, request: str) -> str:
    return ("gres:" if release == "22.05" else "gres/") + request


@pytest.mark.hostile
@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tres_per_task", "gpu:1"),  # per task or socket: more than per node may say
        ("tres_per_socket", "gpu:k80:1"),
        ("tres_per_job", "gpu:k80:4"),
        ("tres_per_task", "shard:1"),
        ("tres_per_node", "gpu:k80:2,gpu:k80:1"),  # --gres and --gpus-per-node: gets 1
        ("tres_per_node", "gpu:k80:2,shard:2"),
        ("tres_per_node", "shard:2"),  # a shard's GPU index is in the JSON only
        ("tres_per_node", "mps:50"),
        ("tres_per_node", "gpu:k80:0"),
        ("tres_per_node", "gpu:k80:2 x"),
        ("tres_per_node", "N/A"),  # no GPU request: none, or all (--exclusive)?
        ("node_count", "3"),  # not one request per listed node
        ("nodes", "k80-1,k80-1"),
        ("nodes", "k80-[1-2"),
        ("job_state", "COMPLETING"),  # leaving: its nodes may be let go one by one
        ("job_state", "CONFIGURING"),
    ],
)
def test_a_new_run_the_text_cannot_say_is_read_as_json(release, field, value):
    record, last, _ = started_job(release, gres(release, "gpu:k80:2"))
    if field.startswith("tres_per") and value != "N/A":
        value = ",".join(gres(release, v) if v[0] != " " else v for v in value.split(","))
    assert (
        job_from_listing(
            with_value(record, field, value), last, users(release), TYPES, SHARING[release]
        )
        is None
    )


@pytest.mark.parametrize("release", RELEASES)
def test_a_new_run_is_built_per_node_from_its_request(release):
    record, last, job = started_job(release, gres(release, "gpu:k80:2"))
    names = users(release)
    assert [(s.node, s.gpu_type, s.gpus, s.indices) for s in job.gpu_slices] == [
        ("k80-1", "k80", 2, ()),
        ("k80-2", "k80", 2, ()),
    ]
    # an untyped request: the type of all the node's GPUs, or the JSON where unknown
    untyped = with_value(record, "tres_per_node", gres(release, "gpu:2"))
    got = job_from_listing(untyped, last, names, TYPES, SHARING[release])
    assert got is not None and got.gpu_slices == job.gpu_slices and got.gpu_request == (None, 2)
    assert job_from_listing(untyped, last, names, {"k80-1": "k80"}, SHARING[release]) is None
    assert job_from_listing(untyped, last, names, node_sharing=SHARING[release]) is None
    # what a task asks beside its GPUs changes no GPU count
    cpus = with_value(record, "tres_per_task", "cpu=2")
    assert job_from_listing(cpus, last, names, TYPES, SHARING[release]) == job


@pytest.mark.hostile
@pytest.mark.parametrize("release", RELEASES)
def test_a_new_run_that_may_hold_whole_nodes_is_read_as_json(release):
    """--exclusive, a partition's OverSubscribe=EXCLUSIVE or FORCE, --oversubscribe or
    a value not known: only a job printed as sharing its nodes is built."""
    record, last, _ = started_job(release, gres(release, "gpu:k80:2"))
    names, field = users(release), SHARING[release]
    assert record[AT["node_sharing"]] == {"OverSubscribe": "OK", "Exclusive": "NO"}[field]
    others = {"OverSubscribe": ["NO", "YES", "USER", "MCS", "TOPO", "", "OK "],
              "Exclusive": ["NODE", "USER", "MCS", "TOPO", "YES", "OK", "", "NO "]}  # fmt: skip
    for value in others[field]:
        got = job_from_listing(with_value(record, "node_sharing", value), last, names, TYPES, field)
        assert got is None, value
    # the value read as the other release's field: 26.05 prints "NO" in OverSubscribe
    # for every job, 22.05 and 24.11 print "NO" there for whole-node jobs
    other = "OverSubscribe" if field == "Exclusive" else "Exclusive"
    assert job_from_listing(record, last, names, TYPES, other) is None
    assert job_from_listing(record, last, names, TYPES, "Bogus") is None


@pytest.mark.hostile
@pytest.mark.parametrize("release", RELEASES)
def test_a_filtered_listing_tells_an_unset_account_or_qos_from_a_literal_null(release):
    """A managed job's account or QOS "(null)" is unset, or a user's literal "(null)"
    (sbatch -A '(null)' without accounting): `squeue -A/-q '(null)'` lists only the
    literal ones (literal_nulls), so both are built exactly, a new job too; without
    that listing (for every field that prints "(null)") the JSON is read."""
    record, seen, job = held_job(release)
    names = users(release)
    both = with_value(with_value(record, "account", "(null)"), "qos", "(null)")
    assert job_from_listing(both, None, names) is None
    for name, other in (("account", "qos"), ("qos", "account")):
        assert job_from_listing(both, None, names, literal_nulls={name: frozenset()}) is None

        def built(literal: set[str], name: str = name, other: str = other) -> SlurmJob | None:
            nulls = {name: frozenset(literal), other: frozenset()}
            return job_from_listing(both, seen, names, literal_nulls=nulls)

        unset = replace(job, account="", qos="")
        assert built(set()) == built({"99999"}) == unset
        assert built({job.job_id}) == replace(unset, **{name: "(null)"})
    # a named value needs no filter
    named = with_value(both, "account", "physics")
    got = job_from_listing(named, seen, names, literal_nulls={"qos": frozenset()})
    assert got == replace(job, account="physics", qos="")


def new_managed_jobs(release: str) -> dict[str, Record]:
    """Round 2's new managed jobs with a named account (sbatch -A, and the jobs with
    node needs: test_jobs_from_text_on_slurm.NEEDS), by job id."""
    last, listing, _ = rounds(release)
    return {
        j: r
        for j, r in listing.items()
        if j not in last
        and r[AT["account"]] == "gavel-acct"
        and is_managed_comment(r[AT["comment"]])
    }


@pytest.mark.hostile
@pytest.mark.parametrize("release", ["24.11", "26.05"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("excluded_nodes", "v100-1 v100-2"),
        ("excluded_nodes", "v100-1\nk80-1"),
        ("memory_per_node", "1.50G"),
        ("memory_per_node", "-1M"),
        ("minimum_cpus_per_node", "x"),
        ("tres_req", "cpu=1,mem=NaN,node=1"),
        ("tres_req", "cpu=2,mem=777M,node=1"),
        ("prefer", "v100 |k80"),
        ("features", "v100\n"),
    ],
)
def test_a_new_managed_job_with_needs_the_text_cannot_say_is_read_as_json(release, field, value):
    """Every new managed job of the capture is built with its needs; the same record
    with a value no release prints in one of the needs' fields is not (its JSON is
    read), whatever the job."""
    jobs = new_managed_jobs(release)
    assert len(jobs) == 13
    names = users(release)
    for record in jobs.values():
        assert job_from_listing(record, None, names, TYPES, SHARING[release], None, True)
        if field == "tres_req" and record[AT["memory_per_tres"]] != "N/A":
            continue  # memory per GPU: the request's total is not read
        bad = with_value(record, field, value)
        assert job_from_listing(bad, None, names, TYPES, SHARING[release], None, True) is None


def test_22_05_prints_no_exclude_so_a_new_managed_job_is_read_as_json():
    """22.05's listing prints the job id where 24.11+ print ExcNodes: never read."""
    jobs = new_managed_jobs("22.05")
    assert len(jobs) == 13
    for job_id, record in jobs.items():
        assert record[AT["excluded_nodes"]] == job_id
        assert job_from_listing(record, None, users("22.05"), TYPES, SHARING["22.05"]) is None


@pytest.mark.parametrize("release", RELEASES)
def test_after_a_start_a_managed_job_that_ran_is_built_from_its_text(release):
    """A daemon that just started has no record of its jobs: the needs of one that runs
    come from its allocation, of one requeued from its request (tres-alloc:
    needs_from_text.py), where the listing prints its --exclude (24.11+), so the first
    observe reads no JSON for them. A completing job's is read."""
    _, listing, jobs = rounds(release)
    excluded = release != "22.05"
    running = [
        j for j, r in listing.items()
        if is_managed_comment(r[AT["comment"]]) and r[AT["job_state"]] == "RUNNING"
        and jobs[j].gpu_slices and r[AT["tres_per_node"]] != "N/A"
    ]  # fmt: skip
    assert running
    # no accounting in the captures: their "(null)" account and QOS are unset (what the
    # filtered listings say: no job's is a literal "(null)")
    nulls = {"account": frozenset[str](), "qos": frozenset[str]()}
    for job_id in running:
        got = job_from_listing(
            listing[job_id], None, users(release), TYPES, SHARING[release], nulls, excluded
        )
        if not excluded:
            assert got is None
            continue
        assert got is not None, job_id
        assert same_for_the_daemon(got, jobs[job_id]), (got, jobs[job_id])
        assert same_needs(got.needs, jobs[job_id].needs)
    # the same record requeue-held (no nodes, a restart), then completing
    record = with_value(with_value(listing[running[0]], "job_state", "PENDING"), "restart_cnt", "1")
    record = with_value(with_value(record, "nodes", ""), "state_reason", "JobHeldUser")
    held = job_from_listing(record, None, users(release), TYPES, SHARING[release], nulls,
                            excluded)  # fmt: skip
    assert (held is not None) == excluded
    if held is not None:
        assert held.restarts == 1 and same_needs(held.needs, jobs[running[0]].needs)
    completing = with_value(listing[running[0]], "job_state", "COMPLETING")
    assert job_from_listing(completing, None, users(release), TYPES, SHARING[release], nulls,
                            excluded) is None  # fmt: skip
