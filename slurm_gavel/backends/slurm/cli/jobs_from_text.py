"""A changed job built from its listing record, without its JSON (slurm/cli/listing.py).

In a round where hundreds of jobs start or are requeue-held, reading their JSON is
most of observe: `squeue --json -j IDS` on 24.11+, and on 22.05 (whose --json ignores
-j) every job's JSON. Most such jobs' listing record already says everything
from_json._job reads, so job_from_listing builds the SlurmJob _job would build from
that job's JSON, or returns None (the JSON is read) where the text cannot say it
exactly. The real-Slurm test (tests/backends/slurm/cli/test_jobs_from_text_on_slurm.py)
checks it, job by job, against each release's JSON.

How the text maps to the JSON, on 22.05, 24.11 and 26.05 alike:

- times print as epoch seconds (SLURM_TIME_FORMAT=%s, slurm/cli/commands.py), "N/A"
  for 0, anything else -> None; the end time is not read (_job keeps a finished
  job's only, and the listing lists waiting and running jobs: its text is "NONE"
  for most of them);
- "N/A" is an empty TRES request; exit_code is the raw wait status on 22.05 (as its
  JSON), "code:signal" on 24.11+ (the JSON's return_code);
- Reason prints the enum name (the JSON's state_reason) or, where slurmctld set one,
  its description: these are known ("job requeued in held state", JobHeldUser;
  "ReqNodeNotAvail, UnavailableNodes:<nodes>" and "ReqNodeNotAvail, May be reserved
  for other job", ReqNodeNotAvail); any other text that is not one word -> None;
- "(null)" is what squeue prints for an unset account, QOS or comment, and also for
  one a user set to "(null)" (sbatch -A '(null)' without accounting); squeue's text
  of a comment with "\\r" is decoded as "\\n" (universal newlines). Such a value is
  taken from the job's last record when its text has not changed since (what the
  incremental read already trusts for an unchanged record), else None; an account
  or QOS "(null)" is told apart by `squeue -A/-q '(null)'`, which lists only the
  literal ones, where the caller read it (literal_nulls);
- user_name is not listed: it is the name the JSON gave for that uid (user_id) on
  any job read before; a uid no JSON named yet -> None;
- a job whose comment does not claim it for slurm-gavel (not `gavel:`, nor a near
  miss: core.managed.is_managed_comment; "(null)" included, unset or not) is never
  managed, and nothing reads its comment, account, QOS or user name: those print
  "(null)" (or a comment with "\r") or its uid is unnamed, it is still built from
  its text, with "" there. On a busy cluster most jobs are other users' plain jobs
  without a comment: without this, each new one was read as JSON, and the first
  round after a start read nearly every job's. Such a job that later claims itself
  (scontrol update Comment=gavel:...) changes its record and is built again, as a
  managed job (its "" values are not reused: kept(), SlurmJob.blanked);
- gres_detail (the GPUs a running job holds per node) is not in any squeue --Format
  field. A job with nodes keeps its last record's slices while it is the same run
  (state, node list, start time and restart count unchanged). A new run (it just
  started, or restarted) gets what its request says, where that is exact: _job keeps
  whole GPUs by count only (GpuSlice.indices: shards only), and a RUNNING job whose
  only GPU request is tres-per-node's one gpu[:TYPE]:N holds N GPUs of that TYPE on
  each node of its NodeList (node_count of them) - untyped (the daemon's own
  placements: StartOrder.gres), the type of all the node's GPUs (node_gpu_types; a
  node with GPUs of several types -> None). None where the request cannot say it:
  shards (their GPU index is in the JSON only), a GPU request per job, task or
  socket (listed for this: GUARDS), several GPU entries (--gres with
  --gpus-per-node gets one of them), or a job that may hold whole nodes (NODE_SHARING:
  --exclusive gets every GPU of its nodes, whatever it asked); a job with no GPU
  request (none, or all with --exclusive) or in any other state (COMPLETING lets its
  nodes go one by one).

- a managed job's node needs (--exclude, memory and CPUs per node, --prefer: fit.py)
  are read from the text where it says them (slurm/cli/needs_from_text.py; 22.05's
  --exclude from its second listing: listing.merge_extra_listing), and kept from its
  last record while their text is unchanged; else its JSON is read.

So a job that is pending, held or requeue-held, running the run it ran last round,
or starting a run on whole GPUs its request names per node, is built from text, new
jobs included (where their account, QOS and comment are not "(null)"); a job that
just started on shards, or with a request the text does not say per node, is read
as JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace

from slurm_gavel.backends.slurm.cli.listing import LISTING_FIELDS, NODE_SHARING, UNNAMED, Record
from slurm_gavel.backends.slurm.cli.needs_from_text import (
    NEEDS_FIELDS,
    needs_from_text,
    needs_text_same,
)
from slurm_gavel.backends.slurm.fields import (
    dependency_text,
    exit_code,
    expand_hostlist,
    gpu_gres,
    gres_names,
    shard_gres,
    time_limit_text,
)
from slurm_gavel.backends.slurm.fit import NO_NEEDS, JobNeeds
from slurm_gavel.backends.slurm.records import ACTIVE_STATES, GpuSlice, SlurmJob, SlurmNode
from slurm_gavel.domain.comment_grammar import is_managed_comment

_AT = {name: i for i, name in enumerate(LISTING_FIELDS)}

# The states the listing asks for (waiting or running); anything else -> None.
_STATES = ACTIVE_STATES
# state_desc texts squeue prints in place of the reason, with the reason the JSON
# gives: `scontrol requeuehold` (job_mgr.c; each release's test checks it).
_DESCRIBED_REASONS = {"job requeued in held state": "JobHeldUser"}
# slurmctld's descriptions of a job waiting for nodes it asked for by name (the
# daemon's placements) that are not available now (22.05 names them; 24.11 and 26.05
# print the second form for a drained node): the JSON's reason is the first word
# (each release's test checks it). The first round after a restart met ~90 of them at
# 2,000 jobs, which on 22.05 meant reading every job's JSON.
_UNAVAILABLE_NODES = re.compile(
    r"(ReqNodeNotAvail), (?:UnavailableNodes:[^\s]*|May be reserved for other job)"
)
_WORD = re.compile(r"[A-Za-z_]+")
_DIGITS = re.compile(r"[0-9]+")
_CODE_SIGNAL = re.compile(r"([0-9]+):([0-9]+)")
_SPACE = re.compile(r"\s")  # what str.isspace() calls whitespace, in one C scan
_UNSET = "(null)"
# The GRES that sit on GPUs: a new run's slices are built from a request of gpu alone.
_GPU_GRES = frozenset({"gpu", "shard", "mps"})


# The states in which tres-alloc was made under the needs the job has now: a waiting
# job's request (requeued or requeue-held too: an update of its memory or CPUs shows
# there at once, checked on each release), a running job's allocation (its memory and
# CPUs cannot be updated). Not COMPLETING, SUSPENDED and the like: the JSON is read.
_TRES_CURRENT = frozenset({"PENDING", "SPECIAL_EXIT", "RUNNING"})


# The fields whose "(null)" a filtered listing tells apart (squeue's option for it):
# the jobs whose account or QOS is a literal "(null)" (CliReader._literal_nulls).
LITERAL_NULL_FIELDS = {"account": "-A", "qos": "-q"}


def prints_null(values: Record, name: str) -> bool:
    """Whether a job that claims itself prints "(null)" for this field (unset, or a
    user's literal "(null)"): only its JSON or a filtered listing tells which."""
    return (
        len(values) == len(LISTING_FIELDS)
        and values[_AT[name]] == _UNSET
        and is_managed_comment(values[_AT["comment"]])
    )


class _Unsure(Exception):
    """The text does not say this field's JSON value exactly."""


def job_from_listing(
    values: Record,
    last: tuple[Record, SlurmJob] | None,
    users: Mapping[int, str],
    gpu_types: Mapping[str, str] | None = None,
    node_sharing: str = "OverSubscribe",
    literal_nulls: Mapping[str, Collection[str]] | None = None,
    excluded_listed: bool = False,
) -> SlurmJob | None:
    """The SlurmJob from_json._job makes of this job's JSON, from its listing values,
    its record and job of the last round (None: a new job), the user names the JSON
    gave for uids (users) and the GPU type of each node whose GPUs are all of one type
    (gpu_types, node_gpu_types: what an untyped request gets there) and the field the
    listing printed as node_sharing (listing_command), and for "account" and "qos"
    the jobs whose value is a literal "(null)" (squeue -A/-q '(null)': literal_nulls,
    LITERAL_NULL_FIELDS), which tells an unset one from it, and whether the listing
    printed the jobs' --exclude (excluded_listed: CliFormat.excluded_field); None where
    the text cannot say it exactly."""
    if len(values) != len(LISTING_FIELDS):
        return None
    try:
        shared = NODE_SHARING.get(node_sharing, frozenset())
        return _build(
            values, last, users, gpu_types or {}, shared, literal_nulls or {}, excluded_listed
        )
    except _Unsure:
        return None


def node_gpu_types(nodes: Iterable[SlurmNode]) -> dict[str, str]:
    """Node -> its GPU type, for the nodes whose GPUs are all of that type."""
    return {n.name: n.gpu_type for n in nodes if n.gpu_type and not n.other_gpus}


def _build(
    values: Record,
    last: tuple[Record, SlurmJob] | None,
    users: Mapping[int, str],
    gpu_types: Mapping[str, str],
    shared: frozenset[str],
    literal_nulls: Mapping[str, Collection[str]],
    excluded_listed: bool,
) -> SlurmJob:
    def text(name: str) -> str:
        return values[_AT[name]]

    def unset_or_null(name: str, value: str) -> str:
        """An account or QOS printed "(null)": a literal "(null)" where the filtered
        listing named the job, else unset (""); without that listing, kept()."""
        literal = literal_nulls.get(name)
        if literal is None:
            return kept(name, value)
        return _UNSET if job_id in literal else ""

    def kept(name: str, value: str) -> str:
        """A value the text cannot tell from another: the last round's, if its text
        has not changed since and it was read exactly (not "" for a job that did not
        claim itself then)."""
        if last is None or last[0][_AT[name]] != values[_AT[name]]:
            raise _Unsure
        if last[1].blanked:
            raise _Unsure
        return value

    def same_run() -> bool:
        fields = ("nodes", "job_state", "start_time", "restart_cnt")
        return last is not None and all(last[0][_AT[f]] == values[_AT[f]] for f in fields)

    old = last[1] if last is not None else None
    job_id = text("job_id")
    state = text("job_state")
    if (old is not None and job_id != old.job_id) or state not in _STATES:
        raise _Unsure
    priority = _int(text("priority"))
    nodes_text = text("nodes")
    if state == "PENDING" or not nodes_text:
        slices: tuple[GpuSlice, ...] = ()  # _job: no slices while pending, none without nodes
    elif old is not None and same_run():
        slices = old.gpu_slices  # the same run: gres_detail follows its node list
    else:
        slices = _new_run_slices(text, state, nodes_text, gpu_types, shared)
    comment, account, qos = text("comment"), text("account"), text("qos")
    user_id = _int(text("user_id"))
    user = users.get(user_id)
    blanked = False
    if not is_managed_comment(comment):  # never managed: these are not read
        blanked = _UNSET in (comment, account, qos) or "\n" in comment
        comment, account, qos = ("" if v == _UNSET else v for v in (comment, account, qos))
        if user is None or user == UNNAMED:
            user, blanked = "", True
    else:
        if "\n" in comment:  # a claiming comment is not "(null)"
            comment = kept("comment", old.comment if old else "")
        if account == _UNSET:
            account = unset_or_null("account", old.account if old else "")
        if qos == _UNSET:
            qos = unset_or_null("qos", old.qos if old else "")
        if user is None:
            raise _Unsure  # user_name is not listed; no JSON named this uid yet
    tres_node = _tres(text("tres_per_node"))
    req = gpu_gres(tres_node)
    needs = _needs(values, last, is_managed_comment(comment), excluded_listed)
    req_total = gpu_gres(_tres(text("tres_per_job")))
    return SlurmJob(
        job_id=job_id,
        state=state,
        reason=_reason(text("state_reason"), priority),
        comment=comment,
        partitions=tuple(p for p in text("partition").split(",") if p),
        nodes=tuple(expand_hostlist(nodes_text)),
        gpu_request=req[0] if req else None,
        gpu_slices=slices,
        node_count=_int(text("node_count")),
        priority=priority,
        restarts=_int(text("restart_cnt")),
        submit_time=_time(text("submit_time")),
        start_time=_time(text("start_time")),
        end_time=0,  # a waiting or running job's (from_json._job)
        exit_code=_exit_code(text("exit_code")),
        account=_name(account),
        user=user,
        gpu_request_total=req_total[0] if req_total else None,
        shard_request=sum(n for _, n in shard_gres(tres_node)),
        qos=_name(qos),
        user_id=user_id,
        eligible_time=max(0, _time(text("eligible_time"))),
        dependency=dependency_text(text("dependency")),
        tasks=_int(text("tasks")),
        tasks_per_node=_int(text("tasks_per_node")),
        deadline=_time(text("deadline")),
        name=_job_name(text("name")),
        needs=needs,
        blanked=blanked,
        reservation="" if text("resv_name") == _UNSET else text("resv_name"),
        time_limit_min=time_limit_text(text("time_limit")),
    )


def _needs(
    values: Record, last: tuple[Record, SlurmJob] | None, managed: bool, excluded_listed: bool
) -> JobNeeds:
    """A job's needs (from_json.job_needs): a managed job's last record's while its needs'
    text is unchanged (its --constraint from the text) and it ran, else from its text
    where that says them (slurm/cli/needs_from_text.py: a waiting job by its request, a
    running one by its allocation: so a daemon that just started builds its jobs from
    their text, the ones that ran included), else its JSON is read; nothing reads a
    plain job's (its --constraint aside)."""
    now = {f: values[_AT[f]] for f in (*NEEDS_FIELDS, "tres_req")}
    feats = "" if now["features"] == _UNSET else now["features"]
    if _SPACE.search(feats):
        raise _Unsure
    if not managed:
        return replace(NO_NEEDS, features=feats)
    state = values[_AT["job_state"]]
    first_run = state == "PENDING" and values[_AT["restart_cnt"]] == "0"
    kept = None
    if last is not None and is_managed_comment(last[1].comment) and not last[1].blanked:
        before = {f: last[0][_AT[f]] for f in NEEDS_FIELDS}
        if needs_text_same(now, before) or not excluded_listed:
            kept = replace(last[1].needs, features=feats)
    if kept is not None and not first_run:
        return kept  # (its JSON's, where it was read: exactly its fields)
    built = needs_from_text(
        now, tres_current=state in _TRES_CURRENT, excluded_listed=excluded_listed
    )
    if built is not None:
        return built
    if kept is not None:
        return kept
    raise _Unsure


def _new_run_slices(
    text: Callable[[str], str],
    state: str,
    nodes_text: str,
    gpu_types: Mapping[str, str],
    shared: frozenset[str],
) -> tuple[GpuSlice, ...]:
    """The whole GPUs a job that just started holds, where its request says them per
    node: one GPU request in tres-per-node, nothing per job, task or socket that could
    add to it, no shards (their GPU indices are in the JSON only), and not a whole-node
    job (--exclusive, or a partition's OverSubscribe=EXCLUSIVE: node_sharing not one of
    `shared`, NODE_SHARING), which gets every GPU of its nodes whatever it asked. The
    type is the request's, or for an untyped request the type of all the node's
    GPUs."""
    if state != "RUNNING" or text("node_sharing") not in shared:
        raise _Unsure
    tres_node = _tres(text("tres_per_node"))
    gpus = gpu_gres(tres_node)
    others = [
        gres_names(_tres(text(f))) for f in ("tres_per_job", "tres_per_task", "tres_per_socket")
    ]
    if gres_names(tres_node) & _GPU_GRES != {"gpu"} or any(n & _GPU_GRES for n in others):
        raise _Unsure
    if len(gpus) != 1 or gpus[0][1] < 1:
        raise _Unsure
    gpu_type, count = gpus[0]
    nodes = expand_hostlist(nodes_text)
    if len(nodes) != _int(text("node_count")) or len(set(nodes)) != len(nodes):
        raise _Unsure
    slices = []
    for node in nodes:
        node_type = gpu_type or gpu_types.get(node)
        if node_type is None:
            raise _Unsure  # untyped, on a node with GPUs of several types (or untyped)
        slices.append(GpuSlice(node, node_type, count))
    return tuple(slices)


def _int(text: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise _Unsure
    return int(text)


def _time(text: str) -> int:
    return 0 if text == "N/A" else _int(text)


def _job_name(text: str) -> str:
    """A job's name as the JSON has it: one with a line break is read from the JSON (the
    listing's newlines are translated: "\r\n" and "\n" print alike)."""
    if "\n" in text:
        raise _Unsure
    return text


def _tres(text: str) -> str:
    """A TRES request as the JSON has it ("" for none). The values gpu_gres and
    shard_gres read are Slurm's own syntax; anything with a space is not."""
    if text == "N/A":
        return ""
    if not text or _SPACE.search(text):
        raise _Unsure
    return text


def _exit_code(text: str) -> int | None:
    m = _CODE_SIGNAL.fullmatch(text)
    if m:  # 24.11+: the JSON's return_code
        return int(m.group(1))
    return exit_code(_int(text))  # 22.05: the raw wait status, as in its JSON


def _reason(text: str, priority: int) -> str:
    described = _DESCRIBED_REASONS.get(text)
    if described is not None and priority == 0:
        return described
    unavailable = _UNAVAILABLE_NODES.fullmatch(text)
    if unavailable:
        return unavailable.group(1)
    if not _WORD.fullmatch(text):
        raise _Unsure  # a description slurmctld set: the enum name is only in the JSON
    return text


def _name(text: str) -> str:
    """An account or QOS name: Slurm's are single words."""
    if _SPACE.search(text):
        raise _Unsure
    return text
