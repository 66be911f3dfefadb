"""CliReader: how the CLI transport reads the nodes and jobs. The JSON commands of the
release (detected once: json_format.py), retried while slurmctld is unreachable, and
the incremental job read: a text listing each round, JSON only for the jobs that are
new or changed and that the text cannot describe (listing.py, jobs_from_text.py).

Reads per round, three or four commands:

    nodes        scontrol --json=vX show nodes   (22.05: sinfo --json)
    reservations scontrol --json=vX show reservations   (22.05: scontrol show
                 reservation --oneliner, its text: reservations.py)
    list         squeue -h -t <waiting and running states> -O <fields>: every job's
                 fields as text, to tell which changed (listing.py); on 22.05 also
                 squeue -o '%A %u %x' for its --exclude and user name, which
                 --Format lacks there (listing.extra_listing_command)
    jobs         squeue --json=vX -t all -j ID,...  only the new or changed jobs the
                 listing's text cannot describe (jobs_from_text.py: "(null)"
                 values, starts on shards or whole nodes); every job every 10th
                 round (between rounds), and on 22.05 (whose --json ignores -j
                 and -t) in any round in which a changed job needs its JSON or a
                 managed job left the listing (its first round: a job the saved
                 state managed); none when the text describes every change
    ended        squeue --json=vX -t all -j ID,...  only in a round where a managed
                 job left that list (how it ended: completed or failed)

so the JSON read per round follows the jobs that changed, and does not grow with
finished jobs (on 22.05 MinJobAge bounds the full read)."""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence
from functools import partial

from slurm_gavel.backends.slurm.cli.commands import SlurmCommands
from slurm_gavel.backends.slurm.cli.jobs_from_text import (
    LITERAL_NULL_FIELDS,
    job_from_listing,
    node_gpu_types,
    prints_null,
)
from slurm_gavel.backends.slurm.cli.json_format import CliFormat, detect_cli
from slurm_gavel.backends.slurm.cli.listing import (
    IncrementalJobs,
    Record,
    extra_listing_command,
    listing_command,
    merge_extra_listing,
    new_token,
    parse_extra_listing,
    parse_listing,
)
from slurm_gavel.backends.slurm.from_json import SlurmJsonError, parse_jobs, parse_nodes
from slurm_gavel.backends.slurm.record_cache import JobRecordCache
from slurm_gavel.backends.slurm.records import ACTIVE_JOB_STATES, SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.reservations import (
    SlurmReservation,
    parse_reservations,
    parse_reservations_text,
)
from slurm_gavel.backends.slurm.retry import attempts
from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable
from slurm_gavel.domain.model import JobId

log = logging.getLogger(__name__)


class CliReader:
    """The CLI transport's reads; it owns what they remember from round to round."""

    def __init__(self, commands: SlurmCommands, data_parser: str | None = None) -> None:
        """data_parser: e.g. "v0.0.45", the JSON format to ask the CLI for, skipping the
        check that Slurm is a release slurm-gavel knows (None: detected)."""
        self.commands = commands
        self.data_parser = data_parser
        self._format: CliFormat | None = None  # detected on the first read
        self.allow_newer = False  # parse JSON of a release newer than known (override)
        self.job_cache = JobRecordCache()  # unchanged squeue records parsed once
        self.listed = IncrementalJobs()  # JSON read only for new or changed jobs
        # From how many new or changed managed jobs printing "(null)" the filtered
        # listings are used (_literal_nulls).
        self.literal_null_filter_from = 500

    @property
    def cli_format(self) -> CliFormat:
        """This Slurm's release and JSON commands, detected once (2 commands)."""
        if self._format is None:
            self._format = detect_cli(self.commands, self.data_parser)
            self.allow_newer = self._format.allow_newer
        return self._format

    def read_nodes(self) -> list[SlurmNode]:
        doc = self._json("observe", self.cli_format.nodes_argv())
        return parse_nodes(doc, allow_newer=self.allow_newer)[1]

    def read_reservations(self) -> list[SlurmReservation]:
        argv = self.cli_format.reservations_argv()
        if self.cli_format.data_parser:
            return parse_reservations(self._json("observe", argv))
        c = self.commands
        res = c.run("observe", argv, retry_timeouts=True)
        if not res.ok:
            raise SlurmJsonError(f"{' '.join(argv)} failed: {res.stderr.strip()}")
        return parse_reservations_text(res.stdout)

    def read_jobs(
        self, nodes: Sequence[SlurmNode], *, first: bool, watched: Collection[JobId]
    ) -> list[SlurmJob]:
        """The waiting and running jobs: JSON only for those new or changed since the
        last observe that their listing text cannot describe (slurm/cli/listing.py,
        slurm/cli/jobs_from_text.py; this round's nodes tell the GPU type an untyped
        request gets on each). The first observe too, where Slurm filters JSON by
        id (23.02+): every job is new then, and one JSON record per user names the
        uids the listing prints, so that the others are built from their text; the
        jobs a restarted daemon managed that are no longer listed are read as ended
        (observe, resume()). On 22.05 the second listing names the uids and gives the
        jobs' --exclude (_listing), so its first observe builds the jobs from their
        text as well; it reads every job's JSON, the finished ones too (-t all), only
        where a watched job (the saved state's, on the first observe) is not listed:
        only that read tells how it ended."""
        fmt = self.cli_format

        def full() -> list[SlurmJob]:
            doc = self._json("observe", fmt.jobs_argv(finished_too=first))
            return self.job_cache.parse(doc, allow_newer=self.allow_newer)[1]

        def some(ids: list[JobId]) -> list[SlurmJob]:
            return self._jobs_by_id("observe", ids)

        some_or_none = some if fmt.filters_work else None
        sharing = fmt.node_sharing_field
        listed = self._listing(sharing)
        listing, names = listed if listed is not None else (None, {})
        # Where JSON cannot be asked for by id (22.05), how a job the saved state
        # managed ended is only in the full read with finished jobs: made when one of
        # them is not listed (an array task, watched by its task name, never is).
        force_full = (
            first and some_or_none is None and listing is not None
            and any(j not in listing for j in watched)
        )  # fmt: skip
        nulls = self._literal_nulls(listing) if listing and not force_full else None
        # every listing read prints the jobs' --exclude (22.05: the second listing's)
        from_text = partial(
            job_from_listing, gpu_types=node_gpu_types(nodes), node_sharing=sharing,
            literal_nulls=nulls, excluded_listed=True,
        )  # fmt: skip
        # Only a managed job's end is read (22.05: by a full read); others just leave.
        return self.listed.read(
            listing, full, some_or_none, force_full=force_full, from_text=from_text,
            watched=watched, names=names,
        )  # fmt: skip

    def _literal_nulls(self, listing: dict[JobId, Record]) -> dict[str, frozenset[str]]:
        """For the account and QOS that new or changed managed jobs print as "(null)"
        (unset, as on every job of a cluster without accounting, or a user's literal
        "(null)"): the jobs whose value is the literal one, from `squeue -A '(null)'`
        (or -q), which lists only those; the others' is unset. One text command per
        such field, only in a round that has such jobs, instead of every such job's
        JSON, when there are literal_null_filter_from of them or more: the first round
        after a start without accounting. (Fewer are read as JSON, with the round's
        other JSON, as before: the two listings cost about what the JSON of a few
        hundred jobs does, 0.1 s each at 5,000 jobs.) A field whose command fails is
        left out (those jobs' JSON is read)."""
        changed = self.listed.changed(listing)
        out: dict[str, frozenset[str]] = {}
        for name, flag in LITERAL_NULL_FIELDS.items():
            if sum(prints_null(listing[j], name) for j in changed) < self.literal_null_filter_from:
                continue
            # %A: the job id as the listing's JobID prints it (an array task's own id)
            argv = ["squeue", "-h", "-t", ACTIVE_JOB_STATES, flag, "(null)", "-o", "%A"]
            res = self.commands.run("list", argv, retry_timeouts=True)
            ids = res.stdout.split() if res.ok else []
            if res.ok and all(i.isdigit() for i in ids):
                out[name] = frozenset(ids)
        return out

    def between_rounds(self) -> None:
        """The safety net's full read (slurm_job_listing.FULL_READ_EVERY), made while
        the daemon waits for the next round instead of inside one: at 5,000 jobs it
        costs 1-2 s (squeue's JSON dump of every job and its parse), which would put
        every 10th round at 3-4 s. The next observe then reads only what changed since
        (Daemon.run calls this between rounds; without it observe reads every job
        itself when due). A failure is left to that observe, which reads every job
        when its listing fails. Called only once a round has been observed."""
        if not self.listed.full_read_due():
            return
        fmt = self.cli_format
        listed = self._listing(fmt.node_sharing_field)
        if listed is None:
            return
        doc = self._json("observe", fmt.jobs_argv(finished_too=False))
        _, everyone = self.job_cache.parse(doc, allow_newer=self.allow_newer)
        self.listed.refreshed(listed[0], everyone)

    def listing(self) -> tuple[dict[JobId, Record], dict[int, str]] | None:
        """Every waiting or running job's listing record, and the user names of uids a
        listing printed (see _listing); None when it could not be read."""
        return self._listing(self.cli_format.node_sharing_field)

    def _listing(self, node_sharing: str) -> tuple[dict[JobId, Record], dict[int, str]] | None:
        """Every waiting or running job's listing record, with the user name of the
        uids the text names (22.05); None (read every job's JSON instead) when squeue
        fails or prints something unreadable. Where --Format has no ExcNodes (22.05), a
        second listing (`squeue -o %A %u %x`, token-ended like the first) gives each
        job's --exclude, put in the record's excluded_nodes place, and its user's
        name: so a new managed job is built from its text there too, the first round
        after a start included, instead of every job's JSON being read."""
        token = new_token()
        excluded = self.cli_format.excluded_field
        argv, env = listing_command(token, node_sharing, excluded)
        res = self.commands.run("list", argv, env=env, retry_timeouts=True)
        listing = parse_listing(res.stdout, token) if res.ok else None
        if listing is not None and excluded is None:
            token = new_token()
            argv, env = extra_listing_command(token)
            res = self.commands.run("list", argv, env=env, retry_timeouts=True)
            extra = parse_extra_listing(res.stdout, token) if res.ok else None
            if extra is not None:
                return merge_extra_listing(listing, extra)
            listing = None
        if listing is None:
            log.warning(
                "squeue's job listing was unreadable (exit %s: %s); every job's JSON read "
                "instead", res.returncode, res.stderr.strip()[:200],
            )  # fmt: skip
            return None
        return listing, {}

    def read_ended(self, ids: list[JobId]) -> list[SlurmJob]:
        """The final records of managed jobs that left the waiting/running list since
        the last observe (one command, only in such a round), so that how they ended
        is known. A job slurmctld forgot already is not returned (view.add_vanished)."""
        if not self.cli_format.filters_work:  # 22.05 listed finished jobs already
            return []
        return self._jobs_by_id("ended", ids)

    def _jobs_by_id(self, kind: str, ids: list[JobId]) -> list[SlurmJob]:
        """These jobs' JSON records, whatever their state (one command; 23.02+)."""
        fmt = self.cli_format
        res = self.commands.run(kind, fmt.ended_jobs_argv(ids), retry_timeouts=True)
        if not res.ok:
            if "invalid job id" in res.stderr.lower():  # every one of them forgotten
                return []
            raise SlurmJsonError(f"{' '.join(res.argv)} failed: {res.stderr.strip()}")
        try:
            _, jobs = parse_jobs(json.loads(res.stdout), allow_newer=self.allow_newer)
        except json.JSONDecodeError as e:
            raise SlurmJsonError(f"{' '.join(res.argv)} printed no JSON ({e})") from None
        wanted = set(ids)
        # an array task's record has a number of its own: it is named by its task id
        # (28_3, arrays.task_job_id), as the daemon asked for it
        return [j for j in jobs if j.job_id in wanted or (j.task_id and j.task_id in wanted)]

    def _json(self, kind: str, argv: list[str]) -> dict:
        """Run a --json command. On 22.05, squeue/sinfo --json exit 0 with an empty
        list and an "errors" entry ("Failed while looking for jobs") when slurmctld
        is unreachable, and say nothing on stderr: such a document is retried like
        an unreachable controller, never read as "no jobs"."""
        c = self.commands
        for _ in attempts(c.retries, c.backoff, c.sleep):
            res = c.run(kind, argv, retry_timeouts=True)
            if not res.ok:
                raise SlurmJsonError(f"{' '.join(argv)} failed: {res.stderr.strip()}")
            try:
                doc = json.loads(res.stdout)
            except json.JSONDecodeError as e:
                raise SlurmJsonError(
                    f"{' '.join(argv)} printed no JSON ({e}); Slurm >= 22.05 is needed for --json"
                ) from None
            errors = doc.get("errors") if isinstance(doc, dict) else None
            if not errors:
                return doc
        assert errors  # the loop returned every document without errors
        raise SlurmUnreachable(
            f"{' '.join(argv)} reported {errors[0]} after {self.commands.retries + 1} tries; "
            "is slurmctld running and SLURM_CONF right?"
        )
