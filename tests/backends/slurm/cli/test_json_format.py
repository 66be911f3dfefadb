"""Release detection and the data_parser choice, from what each real release's CLI
printed (tests/backends/data/<release>/version.txt and json-list.txt), and the
refusal of releases slurm-gavel does not know."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli.commands import CommandResult
from slurm_gavel.backends.slurm.cli.json_format import detect_cli
from slurm_gavel.backends.slurm.records import ACTIVE_JOB_STATES, RUNNING_STATES, WAITING_STATES
from slurm_gavel.backends.slurm.releases import SlurmReleaseError, parse_release

DATA = Path(__file__).parents[2] / "data"
# what 22.05's squeue said to --json=list (checked on the host's 22.05.8)
NO_JSON_ARG = "squeue: option '--json' doesn't allow an argument\n"


class CliOutput:
    """Answers `sinfo -V` and `squeue --json=list` with a release's captured text."""

    def __init__(self, version: str, json_list: str | None = None, list_rc: int = 0):
        self.version, self.json_list, self.list_rc = version, json_list, list_rc
        self.argvs: list[tuple[str, ...]] = []

    @classmethod
    def captured(cls, release: str) -> CliOutput:
        listing = DATA / release / "json-list.txt"
        return cls(
            (DATA / release / "version.txt").read_text(),
            listing.read_text() if listing.exists() else None,
        )

    def run(self, kind: str, argv, *, retry_timeouts: bool = False) -> CommandResult:
        assert retry_timeouts  # detection only reads
        assert kind == "detect"
        self.argvs.append(tuple(argv))
        if argv[:2] == ["sinfo", "-V"]:
            return CommandResult(tuple(argv), 0, self.version, "")
        if self.json_list is None:
            return CommandResult(tuple(argv), 64, "", NO_JSON_ARG)
        return CommandResult(tuple(argv), self.list_rc, self.json_list, "")


def test_release_text():
    assert parse_release("slurm-wlm 24.11.5\n") == (24, 11, 5)
    assert parse_release("slurm 22.05.8") == (22, 5, 8)
    assert parse_release("sinfo: fatal: Could not establish a configuration source") is None


@pytest.mark.parametrize(
    ("release", "parser", "nodes", "jobs"),
    [
        ("22.05", None, ["sinfo", "--json"], ["squeue", "--json"]),
        (
            "24.11",
            "v0.0.42",
            ["scontrol", "--json=v0.0.42", "show", "nodes"],
            ["squeue", "--json=v0.0.42+complex"],
        ),
        (
            "26.05",
            "v0.0.45",
            ["scontrol", "--json=v0.0.45", "show", "nodes"],
            ["squeue", "--json=v0.0.45+complex"],
        ),
    ],
)
def test_each_release_gets_its_newest_known_parser(release, parser, nodes, jobs):
    cli = CliOutput.captured(release)
    fmt = detect_cli(cli)
    assert f"{fmt.version.major}.{fmt.version.minor:02d}" == release
    assert fmt.data_parser == parser and not fmt.allow_newer
    assert fmt.nodes_argv() == nodes
    assert fmt.jobs_argv() == [*jobs, "-t", ACTIVE_JOB_STATES]
    assert fmt.filters_work == (parser is not None)  # 22.05 ignores -t and -j
    # 22.05 is known to take no version: `squeue --json=list` is not even asked
    assert len(cli.argvs) == (1 if release == "22.05" else 2)


def test_active_states_are_every_waiting_and_running_state():
    """The -t list and the states the snapshot reads as waiting/running must agree,
    or a job in a missing state would look finished (asked for by id every round)."""
    assert set(ACTIVE_JOB_STATES.split(",")) == RUNNING_STATES | WAITING_STATES


def test_a_release_between_known_ones_takes_the_newest_parser_it_lists():
    fmt = detect_cli(CliOutput("slurm 25.05.3\n", "data_parser/v0.0.41\ndata_parser/v0.0.43\n"))
    assert fmt.data_parser == "v0.0.43" and fmt.version.plugin == "v0.0.43"
    # a CLI that takes no --json=VERSION falls back to plain --json (and no filters)
    fmt = detect_cli(CliOutput("slurm 23.02.7\n", None))
    assert fmt.data_parser is None and fmt.jobs_argv()[:2] == ["squeue", "--json"]


def test_unknown_releases_are_refused_naming_the_release_and_the_way_out():
    with pytest.raises(
        SlurmReleaseError, match=r"Slurm 27\.05\.1 is newer .*SLURM_GAVEL_DATA_PARSER"
    ):
        detect_cli(CliOutput("slurm 27.05.1\n", "data_parser/v0.0.46\n"))
    with pytest.raises(SlurmReleaseError, match=r"Slurm 21\.08\.8 is older than 22\.05.*upgrade"):
        detect_cli(CliOutput("slurm 21.08.8\n"))
    with pytest.raises(SlurmReleaseError, match=r"none of which slurm-gavel reads"):
        detect_cli(CliOutput("slurm 26.05.1\n", "data_parser/v0.0.46\n"))
    with pytest.raises(SlurmReleaseError, match=r"cannot tell the Slurm release .*SLURM_CONF"):
        detect_cli(CliOutput("sinfo: fatal: Could not establish a configuration source"))


def test_the_override_reads_a_newer_release_with_a_known_parser():
    cli = CliOutput("slurm 27.05.1\n", "data_parser/v0.0.46\n")
    fmt = detect_cli(cli, "v0.0.45")
    assert fmt.data_parser == "v0.0.45" and fmt.allow_newer
    assert len(cli.argvs) == 1  # no listing: the override is taken as given
    with pytest.raises(SlurmReleaseError, match=r"data_parser 'v0\.0\.99' is not one"):
        detect_cli(cli, "v0.0.99")
    with pytest.raises(SlurmReleaseError, match=r"older than 22\.05"):
        detect_cli(CliOutput("slurm 21.08.8\n"), "v0.0.38")
