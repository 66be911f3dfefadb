"""CliReader on 22.05 (slurm/cli/reader.py): the second text listing (`squeue -o %A %u
%x`) gives the jobs' --exclude and user names, so that the first round after a start
builds jobs from their text instead of reading every job's JSON; a full read only when
a job the saved state managed is no longer listed, or the text cannot say a job; and
hostile values in the second listing make it unreadable, never misread."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli import reader as reader_module
from slurm_gavel.backends.slurm.cli.commands import CommandResult, SlurmCommands
from slurm_gavel.backends.slurm.cli.listing import LISTING_FIELDS, TOKEN_ALPHABET
from slurm_gavel.backends.slurm.cli.reader import CliReader

DATA = Path(__file__).parents[2] / "data"
TOKEN = "|0123456789abcdef|"  # the token tests/backends/data/22.05/listing.txt holds
SINFO_V = "slurm-wlm 22.05.8\n"
AT = {name: i for i, name in enumerate(LISTING_FIELDS)}


def captured_record(job_id: str) -> str:
    """Job 1 of the 22.05 capture: managed, held, account and QOS "(null)"."""
    raw = (DATA / "22.05" / "listing.txt").read_bytes()
    text = raw.decode("utf-8", "surrogateescape")
    (record,) = [r for r in text.split(TOKEN + "\n") if r.startswith(job_id + TOKEN)]
    return record + TOKEN + "\n"


class Slurm2205(SlurmCommands):
    """22.05's commands, answered from the captures: the listing (job 1), the second
    listing (its user and --exclude, or `extra` as given), the filtered listings (no
    literal "(null)"), and JSON for the nodes and for every job (counted)."""

    def __init__(self, extra: str | None = None) -> None:
        super().__init__(sleep=lambda s: None)
        self.extra = extra if extra is not None else f"1{TOKEN}root{TOKEN}k80-1{TOKEN}\n"
        self.full_reads: list[list[str]] = []

    def run(self, kind, argv, *, stdin=None, retry_timeouts=False, env=None) -> CommandResult:
        self.counts[kind] += 1
        argv = tuple(argv)
        if kind == "detect":
            return CommandResult(argv, 0, SINFO_V, "")
        if kind == "list" and env and "SQUEUE_FORMAT2" in env:
            return CommandResult(argv, 0, captured_record("1"), "")
        if kind == "list" and env and "SQUEUE_FORMAT" in env:
            assert env["SQUEUE_FORMAT"] == f"%A{TOKEN}%u{TOKEN}%x{TOKEN}"
            assert TOKEN not in " ".join(argv)  # the token is not on the command line
            return CommandResult(argv, 0, self.extra, "")
        if kind == "list":  # squeue -A/-q '(null)' -o %A: none is literal
            return CommandResult(argv, 0, "", "")
        if argv[0] == "sinfo":
            return CommandResult(argv, 0, (DATA / "22.05" / "sinfo.json").read_text(), "")
        if argv[0] == "scontrol":
            return CommandResult(argv, 0, "No reservations in the system\n", "")
        assert argv[:2] == ("squeue", "--json"), argv
        self.full_reads.append(list(argv))
        return CommandResult(argv, 0, (DATA / "22.05" / "squeue.json").read_text(), "")


@pytest.fixture(autouse=True)
def fixed_token(monkeypatch):
    monkeypatch.setattr(reader_module, "new_token", lambda: TOKEN)


def first_round(cmds: Slurm2205, watched: set[str]):
    r = CliReader(cmds)
    r.literal_null_filter_from = 1
    jobs = r.read_jobs(r.read_nodes(), first=True, watched=watched)
    return r, jobs


def test_the_first_round_after_a_start_builds_jobs_from_both_listings():
    cmds = Slurm2205()
    r, jobs = first_round(cmds, {"1"})
    assert cmds.full_reads == [] and r.listed.last_read == "none"
    (job,) = jobs
    assert (job.job_id, job.user, job.user_id) == ("1", "root", 0)
    assert job.needs.excluded == ("k80-1",) and job.qos == "" and job.account == ""
    assert cmds.counts["list"] == 4  # the listing, the second one, -A and -q '(null)'


def test_a_watched_job_no_longer_listed_reads_every_job_with_the_finished_ones():
    """How a job the saved state managed ended is only in 22.05's full read."""
    cmds = Slurm2205()
    r, _ = first_round(cmds, {"1", "99"})
    assert r.listed.last_read == "full"
    assert cmds.full_reads == [["squeue", "--json", "-t", "all"]]


@pytest.mark.parametrize(
    "extra",
    [
        # a value holding what looks like the end of a record, or the token itself
        f"1{TOKEN}root{TOKEN}k80-1\n2{TOKEN}x{TOKEN}\n",
        f"1{TOKEN}root{TOKEN}k80-1{TOKEN}x{TOKEN}\n",
        f"1{TOKEN}ro{TOKEN}ot{TOKEN}k80-1{TOKEN}\n",
        # the token's alphabet between '|' is not the token
        f"1{TOKEN}root{TOKEN}|{TOKEN_ALPHABET}|",
        # an id that is not a number, the same id twice, a record cut short
        f"1;x{TOKEN}root{TOKEN}{TOKEN}\n",
        f"1{TOKEN}root{TOKEN}{TOKEN}\n1{TOKEN}root{TOKEN}{TOKEN}\n",
        f"1{TOKEN}root{TOKEN}",
    ],
)
def test_a_hostile_second_listing_is_unreadable_and_every_job_is_read(extra):
    cmds = Slurm2205(extra)
    r, jobs = first_round(cmds, {"1"})
    assert r.listed.last_read == "full" and len(cmds.full_reads) == 1
    assert {j.job_id for j in jobs} >= {"1"}


@pytest.mark.parametrize(
    ("user", "excluded"),
    [
        ("root", "k80-1\nv100-1"),  # a newline in the --exclude: whitespace, not read
        ("root", "k80-1 v100-1"),
        ("root\nx", ""),  # a user name no login has: the uid is not named
        ("1000", ""),  # squeue's number for a uid it cannot name
        ("nobody", ""),  # its name for one it cannot name, where the JSON may differ
        ("", ""),
        ("r" * 100_000, ""),  # huge
    ],
    ids=["newline", "space", "user-newline", "number", "nobody", "empty", "huge"],
)
def test_values_the_text_cannot_say_read_the_json(user, excluded):
    """A managed job whose --exclude or user name the second listing cannot say exactly
    is read as JSON (22.05: every job's), never built from a guess."""
    cmds = Slurm2205(f"1{TOKEN}{user}{TOKEN}{excluded}{TOKEN}\n")
    r, _ = first_round(cmds, {"1"})
    assert r.listed.last_read == "full" and len(cmds.full_reads) == 1


def test_a_huge_exclude_list_or_one_of_bytes_not_utf8_is_read_back_whole():
    hosts = ",".join(f"n{i}" for i in range(20_000))
    cmds = Slurm2205(f"1{TOKEN}root{TOKEN}{hosts}{TOKEN}\n")
    r, (job,) = first_round(cmds, {"1"})
    assert r.listed.last_read == "none" and len(job.needs.excluded) == 20_000
    cmds = Slurm2205(f"1{TOKEN}root{TOKEN}n\udcff\udcfe{TOKEN}\n")  # (surrogateescape)
    r, (job,) = first_round(cmds, {"1"})
    assert r.listed.last_read == "none" and job.needs.excluded == ("n\udcff\udcfe",)


def test_a_job_the_second_listing_missed_is_read_as_json():
    """Job 1 left the waiting and running states between the two listings."""
    cmds = Slurm2205(f"2{TOKEN}root{TOKEN}{TOKEN}\n")
    r, _ = first_round(cmds, {"1"})
    assert r.listed.last_read == "full"


def test_24_11_and_later_run_no_second_listing():
    class Slurm2411(Slurm2205):
        def run(self, kind, argv, *, stdin=None, retry_timeouts=False, env=None):
            if kind == "detect" and argv[0] == "sinfo":
                return CommandResult(tuple(argv), 0, "slurm 24.11.1\n", "")
            if kind == "detect":
                return CommandResult(tuple(argv), 0, "data_parser/v0.0.42\n", "")
            assert not (env and "SQUEUE_FORMAT" in env)
            return super().run(kind, argv, stdin=stdin, retry_timeouts=retry_timeouts, env=env)

    listing = CliReader(Slurm2411()).listing()
    assert listing is not None and listing[1] == {}
