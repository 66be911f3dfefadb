"""Emulated GPU speed of a job that shares its GPU with another job (gres/shard pairs).

On a real GPU two jobs on one GPU slow each other down; Gavel's table holds how much
(its pair cells: each job's steps/s when co-located). The fake GPUs of the local cluster
do not, so a paced job (workloads/emulate.py) asks Slurm every few seconds whether it
shares a GPU, and paces at its pair cell while it does, at its own speed while alone.

Who shares is read from Slurm, not from the daemon's placement: two running jobs
holding shards of the same GPU index of the same node (``gres_detail``, parsed like the
daemon does: backends/slurm/shard_pairs.shard_partners). The daemon's placement says what it
asked for; a pair Slurm split across two GPUs (first fit) does not slow on a real GPU,
and neither must it here. The partner's job type comes from its comment, which its
owner wrote: it is parsed with the daemon's own parser, and a partner that is not a
managed job of a type with a pair cell leaves the job at its own speed, said once.

    GAVEL_EMULATE_PAIR_INTERVAL=2   seconds between looks (default 2; 0: never look)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from slurm_gavel.backends.slurm.cli.commands import SlurmCommands
from slurm_gavel.backends.slurm.cli.json_format import CliFormat, detect_cli
from slurm_gavel.backends.slurm.from_json import SlurmJsonError, parse_jobs
from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.backends.slurm.releases import SlurmReleaseError
from slurm_gavel.backends.slurm.shard_pairs import shard_partners
from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable
from slurm_gavel.domain.comment_grammar import ManagedCommentError, parse_comment
from slurm_gavel.domain.throughputs import ThroughputTable, load_table
from slurm_gavel.errors import InputError
from slurm_gavel.job.progress import ProgressReporter
from workloads.emulate import ENV_TABLE, Pacer

ENV_PAIR_INTERVAL = "GAVEL_EMULATE_PAIR_INTERVAL"
DEFAULT_INTERVAL = 2.0


def interval_from(env: Mapping[str, str]) -> float:
    """Seconds between looks at Slurm (0: pairing is not emulated)."""
    text = env.get(ENV_PAIR_INTERVAL)
    if not text:
        return DEFAULT_INTERVAL
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{ENV_PAIR_INTERVAL}={text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{ENV_PAIR_INTERVAL} must be >= 0 and finite (got {text})")
    return value


@dataclass(frozen=True)
class Sharing:
    """What this job's GPU looks like now, and the rate that follows."""

    partner: str | None  # the job id sharing the GPU (as Slurm reports), None alone
    partner_type: str | None  # its job type, when it is a managed job
    rate: float  # emulated steps/s
    why: str  # one line, for the job's output
    at_pair_cell: bool = False  # paced at the table's pair cell

    def line(self, job_id: str) -> str:
        return f"[slurm-gavel emulate] job {job_id} {self.why}"


def sharing_of(
    me: str,
    jobs: list[SlurmJob],
    job_type: str,
    scale_factor: int,
    gpu: str,
    table: ThroughputTable,
    factor: float,
    solo_rate: float,
) -> Sharing:
    """The job's sharing from Slurm's jobs: its shard partner, the pair cell's rate."""
    pid = shard_partners(jobs).get(me)
    if pid is None:
        return Sharing(None, None, solo_rate, f"alone on its GPU: {solo_rate:.3g} steps/s")
    partner = next(sj for sj in jobs if sj.job_id == pid)
    try:
        spec = parse_comment(partner.comment, job_id=pid, max_weight=None)
    except ManagedCommentError:
        spec = None
    if spec is None:
        return Sharing(
            pid,
            None,
            solo_rate,
            f"shares its GPU with job {pid}, not a managed job (its type is unknown): "
            f"paced alone, {solo_rate:.3g} steps/s",
        )
    cell = table.pair(job_type, spec.job_type, scale_factor, gpu)
    if cell is None or not cell[0] > 0:
        return Sharing(
            pid,
            spec.job_type,
            solo_rate,
            f"shares its GPU with job {pid} ({spec.job_type}); the table has no pair "
            f"cell for them on {gpu}: paced alone, {solo_rate:.3g} steps/s",
        )
    rate = cell[0] * factor
    return Sharing(
        pid,
        spec.job_type,
        rate,
        f"paired with job {pid} ({spec.job_type}) on {gpu}: {rate:.3g} steps/s = "
        f"pair cell {cell[0]:.3g} x {factor:g}",
        at_pair_cell=True,
    )


def follow(watch: PairWatch | None, pacer: Pacer, progress: ProgressReporter | None = None) -> None:
    """After a step: pace at the pair cell while Slurm shows the job sharing its GPU,
    and name the partner in the progress report (its rate window restarts with each
    change: the daemon learns the pair cell from it, slurm_gavel/job/progress.py)."""
    rate = watch.poll() if watch is not None else None
    if rate is not None:
        pacer.set_rate(rate)
    if progress is not None and watch is not None and watch.current is not None:
        progress.set_partner(watch.current.partner)


def watch_for(
    job_type: str,
    scale_factor: int,
    gpu: str,
    factor: float,
    solo_rate: float,
    env: Mapping[str, str],
) -> PairWatch | None:
    """The watch of a paced Slurm job (None outside Slurm or with the interval 0).
    Raises ValueError on a bad GAVEL_EMULATE_PAIR_INTERVAL."""
    interval = interval_from(env)
    if interval == 0 or not env.get("SLURM_JOB_ID"):
        return None
    return PairWatch(
        job_id=env["SLURM_JOB_ID"],
        job_type=job_type,
        scale_factor=scale_factor,
        gpu=gpu,
        table=load_table(env.get(ENV_TABLE) or None),
        factor=factor,
        solo_rate=solo_rate,
        fetch=slurm_jobs(),
        interval=interval,
        say=lambda line: print(line, flush=True),
    )


def slurm_jobs(commands: SlurmCommands | None = None) -> Callable[[], list[SlurmJob]]:
    """A function returning the running jobs as the daemon's CLI backend reads them
    (release detected on first use)."""
    cmds = commands or SlurmCommands(timeout=10.0, retries=1)
    fmt: list[CliFormat] = []

    def fetch() -> list[SlurmJob]:
        if not fmt:
            fmt.append(detect_cli(cmds))
        res = cmds.run("emulate", ["squeue", fmt[0].jobs_json_flag, "-t", "RUNNING"])
        if not res.ok:
            raise SlurmJsonError(f"squeue failed: {res.stderr.strip()[:200]}")
        try:
            doc = json.loads(res.stdout)
        except json.JSONDecodeError as e:
            raise SlurmJsonError(f"squeue printed no JSON ({e})") from None
        return parse_jobs(doc, allow_newer=True)[1]

    return fetch


@dataclass
class PairWatch:
    """Looks at Slurm every ``interval`` seconds; ``poll`` returns the new rate and
    prints one line when the job's sharing changed."""

    job_id: str
    job_type: str
    scale_factor: int
    gpu: str
    table: ThroughputTable
    factor: float
    solo_rate: float
    fetch: Callable[[], list[SlurmJob]]
    interval: float = DEFAULT_INTERVAL
    clock: Callable[[], float] = time.monotonic
    say: Callable[[str], None] = print
    current: Sharing | None = None
    next_look: float = 0.0
    paired_s: float = 0.0  # time spent paced at a pair cell
    _since: float | None = None
    _failed: bool = False

    def poll(self) -> float | None:
        now = self.clock()
        if now < self.next_look:
            return None
        self.next_look = now + self.interval
        try:
            jobs = self.fetch()
        except (SlurmUnreachable, SlurmJsonError, SlurmReleaseError, InputError, OSError) as e:
            if not self._failed:  # keep the current rate; say so once
                self.say(f"[slurm-gavel emulate] job {self.job_id} cannot read Slurm ({e})")
                self._failed = True
            return None
        s = sharing_of(
            self.job_id,
            jobs,
            self.job_type,
            self.scale_factor,
            self.gpu,
            self.table,
            self.factor,
            self.solo_rate,
        )
        old = self.current
        if old is not None and (old.partner, old.rate) == (s.partner, s.rate):
            return None
        self._close(now)
        self.current = s
        self._since = now if s.at_pair_cell else None
        if old is not None or s.partner is not None:  # no line for "alone" at start
            self.say(s.line(self.job_id))
        return s.rate

    def _close(self, now: float) -> None:
        if self._since is not None:
            self.paired_s += now - self._since
        self._since = None

    def finish(self) -> None:
        """Close the paired time (the run ends)."""
        self._close(self.clock())
