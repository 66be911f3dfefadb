"""The commands that give this release's JSON through the CLI (detect_cli, CliFormat).

22.05's CLI takes plain ``--json`` and its squeue ignores -t/-j; 23.02 and later take
``--json=<data_parser>`` and filter; 24.11 and later take ``+complex`` (plain numbers);
26.05 prints whole-node jobs in squeue's Exclusive field. The releases and parsers
slurm-gavel reads are in slurm/releases.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from slurm_gavel.backends.slurm.cli.commands import CommandResult
from slurm_gavel.backends.slurm.records import ACTIVE_JOB_STATES
from slurm_gavel.backends.slurm.releases import (
    OLDEST_SUPPORTED,
    SlurmReleaseError,
    SlurmVersion,
    check_release,
    parse_release,
    parser_version,
    pick_parser,
)

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
# First release checked to have squeue's ExcNodes --Format field (22.05 has it only as
# -o %x): the listing prints a job's --exclude from it (slurm/cli/needs_from_text.py).
EXCLUDED_FIELD_SINCE = (24, 11)


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

    @property
    def excluded_field(self) -> str | None:
        """The squeue --Format field of a job's --exclude; None where there is none."""
        return "ExcNodes" if self.version.release >= EXCLUDED_FIELD_SINCE else None

    def nodes_argv(self) -> list[str]:
        # 23.11+ sinfo --json groups alike nodes, so per-node GPU use comes from scontrol
        if self.data_parser:
            return ["scontrol", self.json_flag, "show", "nodes"]
        return ["sinfo", "--json"]

    def reservations_argv(self) -> list[str]:
        """22.05's scontrol has no --json: its one-line text (reservations.py)."""
        if self.data_parser:
            return ["scontrol", self.json_flag, "show", "reservations"]
        return ["scontrol", "show", "reservation", "--oneliner"]

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
