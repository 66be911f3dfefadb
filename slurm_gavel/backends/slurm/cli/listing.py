"""Incremental observe: a cheap text listing of every job each round, JSON only for
the jobs that are new or changed since the last round (CliReader.read_jobs).

`squeue --json` of 5,000 waiting jobs costs squeue 0.8-1.7 CPU s and the daemon
~0.3 s to load, every round, although almost every record is the one it printed a
round earlier. The listing, `squeue -h --noconvert -t <active states> -O
<LISTING_FIELDS>`, prints the text of every field from_json._job reads (FIELDS of
record_cache; a job's node needs too, since the node fit: needs_from_text.py)
for the same jobs in ~0.05 CPU s. A job whose listing record is the one it had
when it was last read keeps its parsed SlurmJob; a changed job whose record says
everything _job reads is built from the text (slurm/cli/jobs_from_text.py: pending,
held, requeue-held, in the run it was in last round, or just started on whole GPUs
its request names per node; new jobs too); the others (jobs that just started on
shards or with a request the text cannot say per node, values the text cannot say
exactly such as "(null)") are read with one `squeue --json -t all -j ID,...`
(24.11 and later filter -j on the client before the JSON dump, so its cost follows
the ids named).

What the listing may be trusted with: the comment is user text and may hold any
byte, newlines and any delimiter included. Each field ends with a token drawn at
random for this one command (`--Format` suffixes), and records end with the
token and a newline: a comment cannot end a field or a record it does not know
the token of (the token is in squeue's environment, not on its command line, where
every user of the host could read it: listing_command). A record without exactly
one value per field, a job id that is not a number, or the same id twice makes the
whole listing unreadable, and the round reads every job's JSON instead. The comment
is in the listing itself, so a comment changed with `scontrol update` (by root,
which job_submit.lua lets do anything, or on a site without the shipped
job_submit.lua) is seen the same round.

The listing prints a job's uid, not its user name (JSON's user_name, the name
slurmctld gives the uid): the JSON of one changed job per uid no JSON has named yet
is read with the round's other JSON (_seeds), and that uid's other jobs keep what
their text said, with that name. So the first observe after a start, where every
job is new, reads one JSON record per user instead of one per job (at 5,000 jobs
of a few users, the first round is then like any other: benchmarks/README.md).
22.05, whose JSON cannot be asked for by id, gets the names from a second listing
instead (extra_listing_command: %u, with %x, the --exclude its --Format lacks),
guarded by a token of its own the same way; a uid it names differently from the
JSON, or with a name no login has, is left to the JSON.

Full reads (every job's JSON, as before) happen:

- when the listing cannot be read (on 22.05, either of its two: CliReader._listing);
  on 22.05's first observe only where a job the saved state managed is no longer
  listed (CliReader asks for the finished jobs too, -t all: how it ended while the
  daemon was down; 24.11+ read those by id, resume());
- when Slurm's JSON cannot be asked for by job id (22.05's `squeue --json`
  ignores -j and -t): every round in which a changed job needs its JSON or a job
  whose end matters (a managed one: `watched`) left the listing (only the full
  read, with finished jobs, tells how it ended); another user's job that ended
  needs no read (it no longer holds GPUs), and a round whose changes the text
  describes reads no JSON;
- when more than FULL_READ_FRACTION of the listed jobs need their JSON (one dump is
  then cheaper than a long id list). On a cluster without accounting new managed
  jobs' account and QOS print "(null)" (the text cannot tell unset from a user's
  "(null)"): from 500 of them, `squeue -A/-q '(null)'` lists the literal ones
  (CliReader._literal_nulls), so the first observe still builds them from their
  text; jobs that do not claim themselves need neither (slurm/cli/jobs_from_text.py);
- every FULL_READ_EVERY-th round, a safety net: a field _job reads that the
  listing does not print (gres_detail, user_name) changes only together with one
  it prints (node list, uid), and a value squeue prints the same for two JSON
  values ("(null)") is taken as unchanged, but a release could print
  a field differently or a future _job read a field the listing lacks (the test
  pins LISTING_FIELDS against FIELDS); 10 rounds bound such a miss to an hour at
  the default 6-minute round, for a tenth of the full read's cost. The daemon
  makes this read between rounds, while it waits (CliReader.between_rounds,
  refreshed()), so that it costs no round its 1-2 s at 5,000 jobs; read() makes it
  itself where nothing did.
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from typing import NamedTuple

from slurm_gavel.backends.slurm.records import ACTIVE_JOB_STATES, SlurmJob

# squeue --Format names, one per from_json._job field (record_cache.FIELDS): the
# job id first, the comment (free user text) last.
LISTING_FIELDS: Mapping[str, str] = {
    "job_id": "JobID",
    "job_state": "State",
    "restart_cnt": "RestartCnt",
    "state_reason": "Reason",
    "partition": "Partition",
    "tres_per_node": "tres-per-node",
    "tres_per_job": "tres-per-job",
    "tres_per_task": "tres-per-task",
    "tres_per_socket": "tres-per-socket",
    "node_sharing": "OverSubscribe",  # or Exclusive: listing_command, NODE_SHARING
    "node_count": "NumNodes",
    "priority": "PriorityLong",
    "submit_time": "SubmitTime",
    "start_time": "StartTime",
    "end_time": "EndTime",
    "exit_code": "exit_code",
    "account": "Account",
    "qos": "QOS",
    "user_id": "UserID",
    "nodes": "NodeList",
    "eligible_time": "EligibleTime",
    "dependency": "Dependency",
    # the layout (sbatch -n, --ntasks-per-node: slurm/layout.py) and --deadline
    "tasks": "NumTasks",
    "tasks_per_node": "NTPerNode",
    "deadline": "Deadline",
    "name": "Name",  # user text, like the comment (--dependency=singleton reads it)
    "features": "Feature",  # --constraint ("(null)" for none)
    # a job's node needs (slurm/cli/needs_from_text.py): --exclude (22.05 has no such
    # field: CliFormat.excluded_field), --mem or --mem-per-cpu, CPUs per node,
    # --cpus-per-gpu, --mem-per-gpu, --prefer, and the request, which tells whether
    # MinMemory is per node or per CPU
    "excluded_nodes": "ExcNodes",
    "memory_per_node": "MinMemory",
    "minimum_cpus_per_node": "MinCPUs",
    "cpus_per_tres": "cpus-per-tres",
    "memory_per_tres": "mem-per-tres",
    "prefer": "Prefer",
    "tres_req": "tres-alloc",
    # --reservation ("(null)" for none) and the time limit (reservations.py)
    "resv_name": "Reservation",
    "time_limit": "TimeLimit",
    "comment": "Comment",
}
# _job fields Slurm changes only together with a listed one (the one named). An
# array's fields are printed by no listing field: its records are read as JSON every
# round (read(); backends/slurm/arrays.py), whatever their listing says.
FOLLOWS = {
    "gres_detail": "nodes",
    "user_name": "user_id",
    "array_job_id": "job_id",
    "array_task_id": "job_id",
    "array_task_string": "job_id",
    "array_max_tasks": "job_id",
    "memory_per_cpu": "memory_per_node",  # MinMemory prints either (needs_from_text.py)
}
# _job fields no listing field prints: none since the needs are listed (on 22.05
# excluded_nodes by the second listing, merge_extra_listing).
JSON_ONLY: tuple[str, ...] = ()
# Listed fields _job does not read: they tell whether a job's GPU request says the
# GPUs it got, per node (a job that just started: slurm/cli/jobs_from_text.py).
GUARDS = ("tres_per_task", "tres_per_socket", "node_sharing", "tres_req")
# node_sharing's field, per release (CliFormat.node_sharing_field), and the values it
# prints for a job that shares its nodes, so that it holds the GPUs it asked for: a
# whole-node job gets every GPU of its nodes. OverSubscribe (22.05, 24.11) prints "OK"
# for a job that neither --exclusive nor --oversubscribe asked, in a partition of
# neither OverSubscribe=EXCLUSIVE nor FORCE; 26.05 prints "NO" there for every such
# job, and "NODE" in Exclusive for whole-node jobs (each checked on real Slurm:
# tests/backends/slurm/cli/test_jobs_from_text_on_slurm.py).
NODE_SHARING = {"OverSubscribe": frozenset({"OK"}), "Exclusive": frozenset({"NO"})}

_UID = list(LISTING_FIELDS).index("user_id")
# The user name given to a uid no JSON has named yet while the text is read: no user
# name holds a NUL byte. A job that claims itself, built with it, waits for its uid's
# name (_seeds); one that does not gets "" (job_from_listing).
UNNAMED = "\0unnamed"

FULL_READ_EVERY = 10
FULL_READ_FRACTION = 0.5


# 11 letters or digits: 62**11 > 2**65, no easier to guess than the 16 hex digits
# (2**64) it replaces, in 13 characters instead of 18 (the token ends each field of
# every job: 5,000 jobs print 0.5 MB less at 19 fields; benchmarks/README.md).
TOKEN_ALPHABET = string.ascii_letters + string.digits
TOKEN_LENGTH = 11


def new_token() -> str:
    """A field terminator no user can have put in a comment: fresh for each listing,
    from the secrets module, after the comments it ends were written. It starts with
    '|' because a --Format suffix may not start with a digit (a digit would be read
    as part of the field width)."""
    return "|" + "".join(secrets.choice(TOKEN_ALPHABET) for _ in range(TOKEN_LENGTH)) + "|"


class ListingCommand(NamedTuple):
    argv: list[str]
    env: dict[str, str]  # added to the command's environment


def listing_command(
    token: str, node_sharing: str = "OverSubscribe", excluded: str | None = None
) -> ListingCommand:
    """The listing's squeue; node_sharing: the field printed as node_sharing
    (NODE_SHARING); excluded: the one printed as excluded_nodes, None where the release
    has none (22.05: JobID is printed in its place, and not read). --noconvert: memory
    in whole megabytes (not "1.50G").

    The format, which holds the token, goes in squeue's environment (SQUEUE_FORMAT2,
    what -O sets), not on its command line: any user of the host can read a
    process's /proc/PID/cmdline, only its own user its environ. A user who read the
    token while squeue ran could otherwise try to put it in a comment before squeue
    reads the jobs. (SlurmCommands drops an inherited SQUEUE_FORMAT, which squeue
    would take over SQUEUE_FORMAT2.)"""
    names = {**LISTING_FIELDS, "node_sharing": node_sharing, "excluded_nodes": excluded or "JobID"}
    fields = ",".join(f"{name}:0{token}" for name in names.values())
    argv = ["squeue", "-h", "--noconvert", "-t", ACTIVE_JOB_STATES]
    return ListingCommand(argv, {"SQUEUE_FORMAT2": fields})


Record = tuple[str, ...]  # a job's listing values, as printed (compared between rounds)


def parse_listing(text: str, token: str) -> dict[str, Record] | None:
    """job id -> its record (the values without this command's token), in squeue's
    order; None when the output is not one well-formed record per job."""
    end = token + "\n"
    if not text:
        return {}
    if not text.endswith(end):
        return None
    out: dict[str, Record] = {}
    for record in text[: -len(end)].split(end):
        values = tuple(record.split(token))
        job_id = values[0]
        if len(values) != len(LISTING_FIELDS) or not job_id.isdigit() or job_id in out:
            return None
        out[job_id] = values
    return out


# The second listing on a release whose --Format lacks ExcNodes (22.05): squeue's
# older -o format has it (%x), and the user name (%u), which spares the JSON record
# per user that names the listing's uids; %A is the job id as JobID prints it.
EXTRA_FIELDS = ("%A", "%u", "%x")
_EXCLUDED = list(LISTING_FIELDS).index("excluded_nodes")
# What a job listed by the first command but not by the second gets as its --exclude:
# it left the waiting and running states in between. Whitespace, which no hostlist
# holds: its needs are not read from it (needs_from_text), so a managed one is read
# as JSON.
NOT_LISTED = "\n"
# A user name trusted as the JSON's: a portable login name. Anything else (squeue prints
# "nobody", or a number, for a uid it cannot name, where the JSON may say otherwise)
# leaves the uid to a JSON record.
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\$?")


def extra_listing_command(token: str) -> ListingCommand:
    """The second listing's squeue (EXTRA_FIELDS, each ended by the token), the same
    states as the listing's. The format goes in squeue's environment (SQUEUE_FORMAT,
    what -o sets), not on its command line, like the listing's (listing_command)."""
    argv = ["squeue", "-h", "--noconvert", "-t", ACTIVE_JOB_STATES]
    return ListingCommand(argv, {"SQUEUE_FORMAT": "".join(f + token for f in EXTRA_FIELDS)})


def parse_extra_listing(text: str, token: str) -> dict[str, tuple[str, str]] | None:
    """job id -> (user name, --exclude) from extra_listing_command's output; None when
    it is not one well-formed record per job (the same rules as parse_listing: a value
    holding a newline or the token cannot end a record early, since it does not know
    the token)."""
    end = token + "\n"
    if not text:
        return {}
    if not text.endswith(end):
        return None
    out: dict[str, tuple[str, str]] = {}
    for record in text[: -len(end)].split(end):
        values = record.split(token)
        if len(values) != len(EXTRA_FIELDS) or not values[0].isdigit() or values[0] in out:
            return None
        out[values[0]] = (values[1], values[2])
    return out


def merge_extra_listing(
    listing: dict[str, Record], extra: Mapping[str, tuple[str, str]]
) -> tuple[dict[str, Record], dict[int, str]]:
    """The listing with each job's --exclude from the second listing in its
    excluded_nodes place (NOT_LISTED for a job the second did not list), and the user
    name of each uid both listings agree on: a uid given two names, or a name that is
    not a plain login name (_USER_NAME), is left out (its jobs' JSON names it)."""
    merged: dict[str, Record] = {}
    names: dict[int, str] = {}
    clash: set[int] = set()
    for job_id, record in listing.items():
        row = extra.get(job_id)
        excluded = NOT_LISTED if row is None else row[1]
        merged[job_id] = (*record[:_EXCLUDED], excluded, *record[_EXCLUDED + 1 :])
        uid = record[_UID]
        if row is None or not uid.isdigit():
            continue
        name = row[0] if _USER_NAME.fullmatch(row[0]) and row[0] != "nobody" else ""
        if names.setdefault(int(uid), name) != name or not name:
            clash.add(int(uid))
    return merged, {uid: name for uid, name in names.items() if uid not in clash}


# A changed job built from its listing text (its record, its record and job of the
# last round, the user name of each uid) -> its SlurmJob, or None to read its JSON
# (slurm_listing_jobs.job_from_listing).
FromText = Callable[
    [Record, "tuple[Record, SlurmJob] | None", Mapping[int, str]], "SlurmJob | None"
]


class IncrementalJobs:
    """The jobs of the last observe with the listing record each was read under."""

    def __init__(self, full_every: int = FULL_READ_EVERY) -> None:
        self.full_every = full_every
        self._rows: dict[str, tuple[Record, SlurmJob]] = {}
        self._reads_since_full = 0
        self.last_read = ""  # "full", "changed" or "none" (for benchmarks and tests)
        self.last_json_jobs = 0  # jobs read as JSON by the last observe
        self.last_text_jobs = 0  # changed jobs the last observe built from their text

    def full_read_due(self) -> bool:
        """Whether the next read() would read every job's JSON for its safety net
        (every full_every-th round): CliReader.between_rounds does it beforehand."""
        return bool(self._rows) and self._reads_since_full + 1 >= self.full_every

    def changed(self, listing: Mapping[str, Record]) -> list[str]:
        """The listed jobs new or changed since the last read (read() builds or reads
        these)."""
        return [j for j, r in listing.items() if _rec(self._rows, j) != r]

    def refreshed(self, listing: dict[str, Record], everyone: list[SlurmJob]) -> None:
        """Take a full read made between rounds (the listing first, then every job's
        JSON) as read() takes its own: each listed job's record, with its JSON. A job
        that changed between the two commands differs from its record at the next
        listing, so the next read() reads it again, as after read()'s own full read."""
        self._reads_since_full = 0
        self._rows = {j.job_id: (listing[j.job_id], j) for j in everyone if j.job_id in listing}

    def read(
        self,
        listing: dict[str, Record] | None,
        full: Callable[[], list[SlurmJob]],
        some: Callable[[list[str]], list[SlurmJob]] | None,
        *,
        force_full: bool = False,
        from_text: FromText | None = None,
        watched: Collection[str] | None = None,
        names: Mapping[int, str] | None = None,
    ) -> list[SlurmJob]:
        """This round's jobs. full() reads every job's JSON; some(ids) those jobs'
        (None where Slurm cannot filter by id); from_text builds a changed job from
        its listing record where it can (its JSON is read otherwise); watched: the
        jobs whose end must be read when they leave the listing (None: every job);
        names: the user name of uids a text listing gave (merge_extra_listing), used
        where no JSON gave another."""
        rows = self._rows
        changed = [] if listing is None else self.changed(listing)
        # An array's records are read as JSON every round, never built from text: the
        # listing prints neither a meta record's task list nor a task's name, and a task
        # split off (scontrol update JobId=28_2) changes the meta record's list alone
        # (backends/slurm/arrays.py).
        arrays = {j for j, (_, job) in rows.items() if job.array_tasks or job.task_id}
        if listing is not None:
            changed += [j for j in arrays if j in listing and j not in changed]
        # An array task is watched by its task name (28_3), its record keyed by a number
        # of its own: without the name, its end would go unread (a false "left squeue").
        if watched is None:
            ending = list(rows)
        else:
            ending = [j for j, (_, sj) in rows.items() if j in watched or sj.task_id in watched]
        gone = listing is not None and any(j not in listing for j in ending)
        built: dict[str, SlurmJob] = {}
        unnamed: dict[str, SlurmJob] = {}  # built but for the user name of their uid
        if from_text is not None and listing is not None and changed and not force_full:
            users = _with_listed(_user_names(job for _, job in rows.values()), names or {})
            guess = {**users, **dict.fromkeys(_uids(listing, changed, users), UNNAMED)}
            for job_id in changed:
                if job_id in arrays:
                    continue
                job = from_text(listing[job_id], rows.get(job_id), guess)
                if job is not None:
                    (unnamed if job.user == UNNAMED else built)[job_id] = job
        # Where Slurm filters by id, an unnamed job waits for its uid's seed; else it
        # needs its JSON like any job its text does not describe.
        seeds = _seeds(unnamed) if some is not None else []
        named_later = set(unnamed).difference(seeds) if some is not None else set()
        unread = [j for j in changed if j not in built and j not in named_later]
        if (
            force_full
            or listing is None
            or self._reads_since_full + 1 >= self.full_every
            or (some is None and (unread or gone))
            or len(unread) > FULL_READ_FRACTION * max(1, len(listing))
        ):
            everyone = full()
            self._reads_since_full = 0
            self.last_read, self.last_json_jobs, self.last_text_jobs = "full", len(everyone), 0
            listed = listing or {}
            self._rows = {j.job_id: (listed[j.job_id], j) for j in everyone if j.job_id in listed}
            return everyone
        self._reads_since_full += 1
        # One command: the jobs the text does not describe and one job per unnamed uid
        # (seeds are in unread), whose JSON then names the others.
        fresh = {j.job_id: j for j in some(unread)} if unread and some is not None else {}
        if named_later and some is not None:
            named = _user_names([*(job for _, job in rows.values()), *fresh.values()])
            late = []  # their uid's seed left Slurm before its JSON was read
            for job_id, job in unnamed.items():
                if job_id not in named_later:
                    continue
                if job.user_id in named:
                    built[job_id] = replace(job, user=named[job.user_id])
                else:
                    late.append(job_id)
            if late:
                fresh.update((j.job_id, j) for j in some(late))
        fresh.update(built)
        self.last_read = "changed" if len(fresh) > len(built) else "none"
        self.last_json_jobs, self.last_text_jobs = len(fresh) - len(built), len(built)
        jobs: list[SlurmJob] = []
        new_rows: dict[str, tuple[Record, SlurmJob]] = {}
        for job_id, record in listing.items():
            if job_id in fresh:
                job = fresh[job_id]
            elif _rec(rows, job_id) == record:
                job = rows[job_id][1]
            else:  # changed, and gone from Slurm before its JSON was read
                continue
            jobs.append(job)
            new_rows[job_id] = (record, job)
        self._rows = new_rows
        return jobs


def _uids(listing: dict[str, Record], changed: list[str], users: Mapping[int, str]) -> set[int]:
    """The uids of changed jobs that no JSON has named yet (the listing prints the uid
    only; a record of another shape has none)."""
    uids = set()
    for job_id in changed:
        record = listing[job_id]
        uid = record[_UID] if len(record) == len(LISTING_FIELDS) else ""
        if uid.isdigit() and int(uid) not in users:
            uids.add(int(uid))
    return uids


def _seeds(unnamed: Mapping[str, SlurmJob]) -> list[str]:
    """One job per uid among the jobs the text describes but for their user's name:
    its JSON names the user, and the uid's other jobs keep what their text said. The
    first read meets every uid so (5,000 jobs of a few users: a few JSON records
    instead of 5,000); a new user's lone job is read as JSON, as before."""
    by_uid: dict[int | None, list[str]] = {}
    for job_id, job in unnamed.items():
        by_uid.setdefault(job.user_id, []).append(job_id)
    return [ids[0] for ids in by_uid.values()]


def _user_names(jobs: Iterable[SlurmJob]) -> dict[int, str]:
    """uid -> the user name Slurm's JSON gave for it (the listing prints the uid only);
    a uid that came with two names is left out."""
    names: dict[int, str] = {}
    clash = set()
    for job in jobs:  # "": a job not claimed, built without its user's name
        if job.user_id is None or not job.user:
            continue
        if names.setdefault(job.user_id, job.user) != job.user:
            clash.add(job.user_id)
    return {uid: name for uid, name in names.items() if uid not in clash}


def _with_listed(users: dict[int, str], listed: Mapping[int, str]) -> dict[int, str]:
    """The JSON's names of uids with the text listing's for the others; a uid the two
    name differently is left out (its jobs' JSON is read)."""
    out = {**listed, **users}
    return {uid: n for uid, n in out.items() if listed.get(uid, n) == users.get(uid, n)}


def _rec(rows: dict[str, tuple[Record, SlurmJob]], job_id: str) -> Record | None:
    row = rows.get(job_id)
    return None if row is None else row[0]
