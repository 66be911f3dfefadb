"""Which Slurm releases slurm-gavel reads, and which JSON format to ask each for.

Slurm's JSON comes from a "data_parser" plugin whose version (v0.0.38 .. v0.0.45)
fixes the shape of every record. Releases verified on real daemons (captures in
tests/backends/data/<release>/):

=========  ===========================  =======================================
release    CLI ``--json`` parsers       notes
=========  ===========================  =======================================
22.05      plain ``--json`` only        openapi/v0.0.38; squeue ignores -t/-j
24.11      v0.0.40, v0.0.41, v0.0.42    ``sinfo --json`` is grouped ("sinfo")
26.05      v0.0.42 .. v0.0.45           as 24.11
=========  ===========================  =======================================

Releases in between (23.02 .. 25.11) are accepted: their CLI lists its parsers
(``squeue --json=list``) and the newest one this module knows is picked; they
have no captures here. Older or newer releases are refused with the release
named and what to do (the data_parser override).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from slurm_gavel.backends.slurm.cli.commands import CommandResult
from slurm_gavel.errors import InputError

OLDEST_SUPPORTED = (22, 5)
NEWEST_KNOWN = (26, 5)
# data_parser versions whose shapes slurm_json reads, oldest first
KNOWN_PARSERS = tuple(f"v0.0.{n}" for n in range(38, 46))
# first release whose CLI takes --json=<data_parser> and honours squeue's -t/-j
PARSER_CHOICE_SINCE = (23, 2)
# First release checked to take the data_parser flag "+complex" for squeue (24.11 and
# 26.05, every parser they offer): plain numbers instead of {"set", "infinite",
# "number"} objects, null when unset, "Infinity" when infinite. The jobs read the same
# (tests/backends/data/<release>/complex/) from about half the bytes, and squeue takes
# about half the time to write them (5,000 jobs: 43 MB in 4.2 s -> 25 MB in 2.1 s on
# 26.05, benchmarks/README.md): the JSON dump, not slurmctld, is most of a round.
COMPLEX_VALUES_SINCE = (24, 11)
# First release checked to print whole-node jobs (--exclusive, or a partition's
# OverSubscribe=EXCLUSIVE) in squeue's Exclusive field ("NODE"); it prints "NO" in
# OverSubscribe for every job that does not oversubscribe. 22.05 and 24.11 have no
# Exclusive field and print such jobs "NO" in OverSubscribe (slurm/cli/listing.py).
EXCLUSIVE_FIELD_SINCE = (26, 5)


class SlurmReleaseError(InputError):
    """A Slurm release (or data_parser) slurm-gavel does not know."""


@dataclass(frozen=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int
    plugin: str  # e.g. "openapi/v0.0.38", "data_parser/v0.0.42", "" when absent

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

    @property
    def release(self) -> tuple[int, int]:
        return (self.major, self.minor)


_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_release(text: str) -> tuple[int, int, int] | None:
    """``slurm-wlm 24.11.5`` / ``slurm 22.05.8`` / ``24.11.5`` -> (24, 11, 5)."""
    m = _RELEASE.search(text or "")
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]))


def check_release(version: SlurmVersion, *, allow_newer: bool = False) -> None:
    """Refuse releases whose JSON this package was never checked against."""
    if version.release < OLDEST_SUPPORTED:
        raise SlurmReleaseError(
            f"Slurm {version} is older than 22.05, whose --json output slurm-gavel needs; "
            "upgrade Slurm to 22.05 or later"
        )
    if version.release > NEWEST_KNOWN and not allow_newer:
        raise SlurmReleaseError(
            f"Slurm {version} is newer than the newest release slurm-gavel knows "
            f"({NEWEST_KNOWN[0]}.{NEWEST_KNOWN[1]:02d}); upgrade slurm-gavel, or try it anyway "
            f"by naming a data_parser this Slurm offers (`squeue --json=list`) that "
            f"slurm-gavel knows ({KNOWN_PARSERS[-1]} or older): SLURM_GAVEL_DATA_PARSER=v0.0.NN "
            "(or SlurmCluster(data_parser=...))"
        )


def parser_version(name: str) -> str:
    """``data_parser/v0.0.42`` / ``v0.0.42`` -> ``v0.0.42``; unknown -> SlurmReleaseError."""
    short = name.strip().rsplit("/", 1)[-1]
    if short not in KNOWN_PARSERS:
        raise SlurmReleaseError(
            f"data_parser {name!r} is not one slurm-gavel reads (known: {', '.join(KNOWN_PARSERS)})"
        )
    return short


def pick_parser(offered: list[str], version: SlurmVersion) -> str:
    """The newest known data_parser among those the CLI lists (``--json=list``)."""
    known = [p for p in KNOWN_PARSERS if p in {o.strip().rsplit("/", 1)[-1] for o in offered}]
    if not known:
        raise SlurmReleaseError(
            f"Slurm {version} offers data_parser {', '.join(offered) or '(none)'}, none of "
            f"which slurm-gavel reads (known: {', '.join(KNOWN_PARSERS)}); upgrade slurm-gavel"
        )
    return known[-1]


# --- what to run on this release ---------------------------------------------------

# The job states a round needs from squeue (waiting or holding GPUs); finished jobs
# are asked for by id only when a managed job leaves this list (SlurmCluster).
ACTIVE_JOB_STATES = (
    "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,REQUEUED,REQUEUE_HOLD,REQUEUE_FED,"
    "SPECIAL_EXIT,RESV_DEL_HOLD,STAGE_OUT,SIGNALING,RESIZING,STOPPED"
)


@dataclass(frozen=True)
class CliFormat:
    """The commands that give this release's JSON, detected once (detect_cli)."""

    version: SlurmVersion  # from `sinfo -V` (plugin: the data_parser picked)
    data_parser: str | None  # None: plain --json (22.05 takes no version)
    allow_newer: bool = False  # an override named the parser for an unknown release

    @property
    def json_flag(self) -> str:
        return f"--json={self.data_parser}" if self.data_parser else "--json"

    @property
    def jobs_json_flag(self) -> str:
        """squeue's flag: +complex where checked (COMPLEX_VALUES_SINCE)."""
        if self.data_parser and self.version.release >= COMPLEX_VALUES_SINCE:
            return f"{self.json_flag}+complex"
        return self.json_flag

    @property
    def filters_work(self) -> bool:
        """22.05's squeue --json lists every job whatever -t/-j say (checked)."""
        return self.data_parser is not None

    @property
    def node_sharing_field(self) -> str:
        """The squeue --Format field that tells a whole-node job (NODE_SHARING)."""
        return "Exclusive" if self.version.release >= EXCLUSIVE_FIELD_SINCE else "OverSubscribe"

    def nodes_argv(self) -> list[str]:
        # 23.11+ sinfo --json groups alike nodes, so per-node GPU use comes from scontrol
        if self.data_parser:
            return ["scontrol", self.json_flag, "show", "nodes"]
        return ["sinfo", "--json"]

    def jobs_argv(self, *, finished_too: bool = False) -> list[str]:
        states = "all" if finished_too else ACTIVE_JOB_STATES
        return ["squeue", self.jobs_json_flag, "-t", states]

    def ended_jobs_argv(self, ids: list[str]) -> list[str]:
        return ["squeue", self.jobs_json_flag, "-t", "all", "-j", ",".join(ids)]


class _Runner(Protocol):
    def run(
        self, kind: str, argv: Sequence[str], *, retry_timeouts: bool = False
    ) -> CommandResult: ...


def detect_cli(commands: _Runner, data_parser: str | None = None) -> CliFormat:
    """The release (`sinfo -V`, no controller needed) and the newest known data_parser
    its CLI offers (`squeue --json=list`); two commands, counted as "detect".
    data_parser (an override) skips the newest-release check and the listing."""
    res = commands.run("detect", ["sinfo", "-V"], retry_timeouts=True)
    found = parse_release(res.stdout) if res.ok else None
    if found is None:
        raise SlurmReleaseError(
            f"cannot tell the Slurm release from `sinfo -V` (exit {res.returncode}: "
            f"{(res.stdout + res.stderr).strip()[:200]!r}); is the Slurm client installed "
            "and SLURM_CONF right?"
        )
    version = SlurmVersion(*found, plugin="")
    if data_parser:
        if version.release < OLDEST_SUPPORTED:
            check_release(version)
        chosen = parser_version(data_parser)
        return CliFormat(replace(version, plugin=chosen), chosen, allow_newer=True)
    check_release(version)
    if version.release < PARSER_CHOICE_SINCE:
        return CliFormat(version, None)
    res = commands.run("detect", ["squeue", "--json=list"], retry_timeouts=True)
    offered = [w for w in (res.stdout + "\n" + res.stderr).split() if "data_parser/" in w]
    if not res.ok or not offered:
        return CliFormat(version, None)  # a CLI without --json=VERSION: plain --json
    chosen = pick_parser(offered, version)
    return CliFormat(replace(version, plugin=chosen), chosen)
