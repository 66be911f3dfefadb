"""Incremental observe (slurm/cli/listing.py): the listing as each real release prints
it, hostile comments in it, and which jobs' JSON a round reads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli.listing import (
    FOLLOWS,
    GUARDS,
    JSON_ONLY,
    LISTING_FIELDS,
    NOT_LISTED,
    TOKEN_ALPHABET,
    IncrementalJobs,
    extra_listing_command,
    listing_command,
    merge_extra_listing,
    new_token,
    parse_extra_listing,
    parse_listing,
)
from slurm_gavel.backends.slurm.record_cache import FIELDS
from slurm_gavel.backends.slurm.records import SlurmJob

DATA = Path(__file__).parents[2] / "data"
TOKEN = "|0123456789abcdef|"  # the token the captures were made with (listing_command)
# Captured with listing_command(TOKEN, CliFormat.node_sharing_field: 26.05 "Exclusive";
# CliFormat.excluded_field: 22.05 None) and SLURM_TIME_FORMAT=%s on a fresh
# tools/local-cluster (2026-11-29, with the layout's, the deadline's, the reservation's and
# the time limit's fields, by tests/backends/data/capture.sh listing), jobs: 1 managed and
# held (`sbatch --hold`: job_submit.lua adds hold=user); 2-4 the two tasks of an array
# whose comment holds '|' and a newline with a fake record after it, and a comment of
# invalid UTF-8 bytes and "\r\n" with a year's time limit (which id each gets depends on
# when Slurm splits the array).
RELEASES = ["22.05", "24.11", "26.05"]


def captured(release: str) -> str:
    # as SlurmCommands decodes it (utf-8, surrogateescape, universal newlines)
    raw = (DATA / release / "listing.txt").read_bytes()
    return raw.decode("utf-8", "surrogateescape").replace("\r\n", "\n").replace("\r", "\n")


def test_the_listing_prints_every_field_a_job_is_read_from():
    """A field _job reads that the listing neither prints nor follows from a printed
    one would let a change go unseen until the next full read. The guards are printed
    for the text alone (whether a request says the GPUs a new run got)."""
    assert (set(LISTING_FIELDS) - set(GUARDS)) | set(FOLLOWS) | set(JSON_ONLY) == set(FIELDS)
    assert not set(JSON_ONLY) & set(LISTING_FIELDS)
    assert set(GUARDS) <= set(LISTING_FIELDS) and not set(GUARDS) & set(FIELDS)
    assert set(FOLLOWS.values()) <= set(LISTING_FIELDS)
    names = list(LISTING_FIELDS.values())
    assert names[0] == "JobID" and names[-1] == "Comment"


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_listing_reads_back_with_hostile_comments(release):
    listing = parse_listing(captured(release), TOKEN)
    # squeue's order, whichever it printed (records end with the token and a newline)
    order = [r.split(TOKEN, 1)[0] for r in captured(release).split(TOKEN + "\n") if r]
    assert listing is not None and list(listing) == order and sorted(order) == ["1", "2", "3", "4"]
    fields = listing
    assert fields["1"][-1] == "gavel:type=ResNet-18 (batch size 16),scale=1,hold=user"
    assert fields["1"][1] == "PENDING"
    # ids 2-4 go to the array's tasks and the invalid comment in the order Slurm splits
    # the array (captures differ): each job found by its comment, one field, one job
    array = [j for j, f in fields.items() if f[-1] == "plain x|y\nsecond line 1|PENDING"]
    bad = [j for j, f in fields.items() if f[-1].startswith("bad\udcff\udcfe")]
    assert len(array) == 2 and len(bad) == 1 and sorted([*array, *bad]) == ["2", "3", "4"]
    assert all(fields[j][1] == "RUNNING" for j in [*array, *bad])
    # a state change, a comment change: another record for that job only
    text = captured(release)
    for old, new in [("PENDING", "RUNNING"), ("hold=user", "hold=usex")]:
        changed = parse_listing(text.replace(old + TOKEN, new + TOKEN, 1), TOKEN)
        assert changed is not None and changed["1"] != listing["1"]
        assert {j: r for j, r in changed.items() if j != "1"} == {
            j: r for j, r in listing.items() if j != "1"
        }


@pytest.mark.parametrize("release", RELEASES)
def test_a_comment_that_guessed_the_token_makes_the_listing_unreadable(release):
    """Only a user who knew this command's random token could forge a record; even
    then the listing is refused (a full read follows), never half trusted."""
    text = captured(release)
    record = text.split(TOKEN + "\n")[0]  # job 1's record
    fake_ids = record.replace("1" + TOKEN, "3" + TOKEN, 1)  # a second record for job 3
    assert parse_listing(text + fake_ids + TOKEN + "\n", TOKEN) is None
    assert parse_listing(text.replace("plain x", "plain" + TOKEN + "x", 1), TOKEN) is None
    assert parse_listing(text + "junk" + TOKEN + "\n", TOKEN) is None
    assert parse_listing(text[:-1], TOKEN) is None  # cut short
    assert parse_listing("", TOKEN) == {}


def test_a_record_is_the_same_whatever_token_listed_it():
    text = captured("24.11")
    other = new_token()
    assert parse_listing(text.replace(TOKEN, other), other) == parse_listing(text, TOKEN)


def test_tokens_are_fresh_and_cannot_be_read_as_a_field_width():
    a, b = new_token(), new_token()
    assert a != b and a[0] == "|" and not a[0].isdigit()
    # at least as hard to guess as the 64 random bits of the token it replaced
    assert len(TOKEN_ALPHABET) ** (len(a) - 2) >= 2**64 and a[1:-1].isalnum()
    argv, env = listing_command(a)
    assert argv[:2] == ["squeue", "-h"] and env["SQUEUE_FORMAT2"].count(a) == len(LISTING_FIELDS)
    # not on the command line, which every user of the host can read in /proc
    assert not any(a in arg or "|" in arg for arg in argv), argv


# --- which jobs a round reads --------------------------------------------------------


def job(job_id: str, state: str = "PENDING", comment: str = "gavel:type=A3C") -> SlurmJob:
    return SlurmJob(
        job_id=job_id, state=state, reason="", comment=comment,
        partitions=("gpu",), nodes=(), gpu_request=None, gpu_slices=(), node_count=1,
        priority=0, restarts=0, submit_time=0, start_time=0, end_time=0, exit_code=None,
        account="", user="u",
    )  # fmt: skip


class Slurm:
    """What squeue would print: a listing record and a JSON record per job."""

    def __init__(self, n: int) -> None:
        self.jobs = {str(i): job(str(i)) for i in range(1, n + 1)}
        self.full_reads = 0
        self.asked: list[list[str]] = []

    def listing(self) -> dict[str, tuple[str, ...]]:
        return {j: (j, s.state, s.comment) for j, s in self.jobs.items()}

    def full(self) -> list[SlurmJob]:
        self.full_reads += 1
        return list(self.jobs.values())

    def some(self, ids: list[str]) -> list[SlurmJob]:
        self.asked.append(list(ids))
        return [self.jobs[j] for j in ids if j in self.jobs]


def rounds(inc: IncrementalJobs, s: Slurm, *, filters: bool = True) -> list[SlurmJob]:
    return inc.read(s.listing(), s.full, s.some if filters else None)


def test_only_new_and_changed_jobs_are_read_after_the_first_round():
    s, inc = Slurm(10), IncrementalJobs()
    assert inc.read(s.listing(), s.full, s.some, force_full=True) == s.full()
    s.full_reads = 0
    assert rounds(inc, s) == list(s.jobs.values()) and not s.asked and inc.last_read == "none"
    s.jobs["3"] = replace(s.jobs["3"], comment="gavel:type=ResNet-50")  # scontrol update
    s.jobs["5"] = replace(s.jobs["5"], state="RUNNING")
    s.jobs["11"] = job("11")  # submitted
    del s.jobs["7"]  # ended: gone from the listing (SlurmBackend reads how it ended)
    got = rounds(inc, s)
    assert s.asked == [["3", "5", "11"]] and s.full_reads == 0 and inc.last_json_jobs == 3
    assert got == list(s.jobs.values())  # the new records, the others as cached
    assert rounds(inc, s) == got and s.asked == [["3", "5", "11"]]


def test_a_changed_job_gone_before_its_json_is_read_is_left_out():
    s, inc = Slurm(4), IncrementalJobs()
    inc.read(s.listing(), s.full, s.some, force_full=True)
    listing = s.listing()
    listing["2"] += ("requeued",)
    del s.jobs["2"]  # and purged before the JSON read
    assert [j.job_id for j in inc.read(listing, s.full, s.some)] == ["1", "3", "4"]


def test_without_filtering_by_id_any_change_reads_every_job():
    """22.05: squeue --json ignores -j, so a change means one full read."""
    s, inc = Slurm(4), IncrementalJobs()
    inc.read(s.listing(), s.full, None, force_full=True)
    rounds(inc, s, filters=False)
    assert s.full_reads == 1 and inc.last_read == "none"
    del s.jobs["4"]
    rounds(inc, s, filters=False)
    assert s.full_reads == 2 and inc.last_read == "full"


def test_full_reads_as_a_safety_net_and_when_most_jobs_changed():
    s, inc = Slurm(10), IncrementalJobs(full_every=3)
    inc.read(s.listing(), s.full, s.some, force_full=True)
    rounds(inc, s), rounds(inc, s)
    assert s.full_reads == 1
    rounds(inc, s)  # the third round after a full read
    assert s.full_reads == 2 and inc.last_read == "full"
    for j in list(s.jobs)[:6]:
        s.jobs[j] = replace(s.jobs[j], state="RUNNING")
    rounds(inc, s)
    assert s.full_reads == 3 and not s.asked  # 6 of 10 changed: one dump, no id list


def test_an_unreadable_listing_means_a_full_read():
    s, inc = Slurm(3), IncrementalJobs()
    inc.read(s.listing(), s.full, s.some, force_full=True)
    assert inc.read(None, s.full, s.some) == list(s.jobs.values()) and s.full_reads == 2


# --- changed jobs built from their text ----------------------------------------------


def pending_from_text(record, last, users):
    """A stand-in for job_from_listing: describes a changed PENDING job from its text,
    nothing else (a job that started needs its JSON)."""
    if last is None or record[1] != "PENDING":
        return None
    return replace(last[1], comment=record[2])


def test_changed_jobs_the_text_describes_are_not_read_as_json():
    s, inc = Slurm(6), IncrementalJobs()
    inc.read(s.listing(), s.full, s.some, force_full=True, from_text=pending_from_text)
    s.jobs["2"] = replace(s.jobs["2"], comment="gavel:type=ResNet-50")
    s.jobs["3"] = replace(s.jobs["3"], state="RUNNING")
    s.jobs["7"] = job("7")  # new: no last record
    got = inc.read(s.listing(), s.full, s.some, from_text=pending_from_text)
    assert s.asked == [["3", "7"]] and (inc.last_json_jobs, inc.last_text_jobs) == (2, 1)
    assert got == list(s.jobs.values())
    # the job built from text is kept like one read as JSON while its record stays
    assert inc.read(s.listing(), s.full, s.some, from_text=pending_from_text) == got
    assert len(s.asked) == 1 and inc.last_read == "none"


def test_without_filtering_by_id_a_round_the_text_describes_reads_no_json():
    """22.05: changes the text describes in full cost no JSON at all; one it does not
    describe, or a job that left the listing, still means one full read."""
    s, inc = Slurm(4), IncrementalJobs()
    inc.read(s.listing(), s.full, None, force_full=True, from_text=pending_from_text)
    s.jobs["1"] = replace(s.jobs["1"], comment="gavel:type=ResNet-50")
    s.jobs["2"] = replace(s.jobs["2"], comment="gavel:type=A3C,scale=2")
    got = inc.read(s.listing(), s.full, None, from_text=pending_from_text)
    assert got == list(s.jobs.values()) and s.full_reads == 1
    assert (inc.last_read, inc.last_json_jobs, inc.last_text_jobs) == ("none", 0, 2)
    s.jobs["3"] = replace(s.jobs["3"], state="RUNNING")
    inc.read(s.listing(), s.full, None, from_text=pending_from_text)
    assert s.full_reads == 2 and inc.last_read == "full"
    s.jobs["1"] = replace(s.jobs["1"], comment="gavel:type=A3C")
    del s.jobs["4"]
    inc.read(s.listing(), s.full, None, from_text=pending_from_text)
    assert s.full_reads == 3


def test_a_full_read_between_rounds_stands_for_the_rounds_own():
    """SlurmBackend.between_rounds makes the safety net's full read while the daemon
    waits: the next read() then reads only what changed since, and a job that changed
    between that listing and its JSON is read again."""
    s, inc = Slurm(10), IncrementalJobs(full_every=3)
    assert not inc.full_read_due()  # nothing read yet: the first observe reads all
    inc.read(s.listing(), s.full, s.some, force_full=True)
    rounds(inc, s)
    assert not inc.full_read_due()
    rounds(inc, s)
    assert inc.full_read_due()  # the next read() would read every job
    listing = s.listing()
    s.jobs["4"] = replace(s.jobs["4"], state="RUNNING")  # between the two commands
    inc.refreshed(listing, s.full())
    assert not inc.full_read_due() and s.full_reads == 2
    rounds(inc, s)
    assert s.full_reads == 2 and inc.last_read == "changed" and s.asked == [["4"]]
    assert rounds(inc, s)[3].state == "RUNNING" and inc.last_read == "none"


def test_without_filtering_by_id_only_a_watched_job_leaving_reads_every_job():
    """22.05: a managed job that left the listing needs the full read (only it tells
    how the job ended); another user's job that ended needs none."""
    s, inc = Slurm(6), IncrementalJobs()
    inc.read(s.listing(), s.full, None, force_full=True)
    watched = {"1", "2"}  # the managed jobs of the last observe
    del s.jobs["5"]
    got = inc.read(s.listing(), s.full, None, watched=watched)
    assert s.full_reads == 1 and inc.last_read == "none"
    assert [j.job_id for j in got] == ["1", "2", "3", "4", "6"]
    del s.jobs["2"]
    inc.read(s.listing(), s.full, None, watched=watched)
    assert s.full_reads == 2 and inc.last_read == "full"


def test_without_filtering_by_id_an_array_task_leaving_reads_every_job():
    """22.05: an array task is watched by its task name (7_4) while its record has a
    number of its own (9); its leaving needs the full read too, or its end goes unseen
    (a false "left squeue" warning for a task that completed)."""
    s, inc = Slurm(3), IncrementalJobs()
    s.jobs["9"] = replace(job("9", "RUNNING"), task_id="7_4")
    inc.read(s.listing(), s.full, None, force_full=True)
    del s.jobs["9"]
    inc.read(s.listing(), s.full, None, watched={"1", "7_4"})
    assert s.full_reads == 2 and inc.last_read == "full"


# --- the uid's name, from one job's JSON ---------------------------------------------

UID = list(LISTING_FIELDS).index("user_id")


class Users(Slurm):
    """Jobs of several users, listed with their uid where squeue prints it."""

    def __init__(self, owners: dict[str, tuple[int, str]]) -> None:
        super().__init__(0)
        self.jobs = {
            j: replace(job(j), user=name, user_id=uid) for j, (uid, name) in owners.items()
        }

    def listing(self) -> dict[str, tuple[str, ...]]:
        out = {}
        for j, sj in self.jobs.items():
            values = ["x"] * len(LISTING_FIELDS)
            values[0], values[1], values[UID] = j, sj.state, str(sj.user_id)
            out[j] = tuple(values)
        return out


def named_from_text(record, last, users):
    """A stand-in for job_from_listing: a PENDING job from its text, with the name the
    JSON gave its uid (None where no name is known, as the real one)."""
    uid = int(record[UID])
    if record[1] != "PENDING" or uid not in users:
        return None
    return replace(job(record[0]), user=users[uid], user_id=uid)


def owners(**counts: int) -> dict[str, tuple[int, str]]:
    out, n = {}, 0
    for uid, (name, count) in enumerate(counts.items(), start=1000):
        for _ in range(count):
            n += 1
            out[str(n)] = (uid, name)
    return out


def test_the_first_read_names_each_uid_from_one_job_and_builds_the_rest_from_text():
    s, inc = Users(owners(ada=6, bob=4)), IncrementalJobs()
    got = inc.read(s.listing(), s.full, s.some, from_text=named_from_text)
    assert got == list(s.jobs.values())  # names included: what the JSON says
    assert s.asked == [["1", "7"]] and s.full_reads == 0  # one job per uid, one command
    assert (inc.last_read, inc.last_json_jobs, inc.last_text_jobs) == ("changed", 2, 8)
    assert inc.read(s.listing(), s.full, s.some, from_text=named_from_text) == got
    assert len(s.asked) == 1 and inc.last_read == "none"
    # a new user's jobs: one of them read, the other named by it; a lone one read
    s.jobs.update({"11": replace(job("11"), user="cy", user_id=1002)})
    s.jobs.update({"12": replace(job("12"), user="cy", user_id=1002)})
    s.jobs.update({"13": replace(job("13"), user="di", user_id=1003)})
    got = inc.read(s.listing(), s.full, s.some, from_text=named_from_text)
    assert s.asked[1:] == [["11", "13"]] and got == list(s.jobs.values())
    assert (inc.last_json_jobs, inc.last_text_jobs) == (2, 1)


def test_a_uid_whose_job_left_before_its_json_was_read_has_its_jobs_read():
    s, inc = Users(owners(ada=5)), IncrementalJobs()
    listing = s.listing()
    del s.jobs["1"]  # the seed: cancelled and purged between the listing and its JSON
    got = inc.read(listing, s.full, s.some, from_text=named_from_text)
    assert s.asked == [["1"], ["2", "3", "4", "5"]] and got == list(s.jobs.values())
    assert all(j.user == "ada" for j in got)


def test_no_job_is_read_for_its_name_when_the_round_reads_every_job_anyway():
    """Jobs the text cannot describe (over FULL_READ_FRACTION): one full read, no
    seed command before it; 22.05 (no filter by id): a full read too."""
    s, inc = Users(owners(ada=4)), IncrementalJobs()
    for j in ("1", "2", "3"):
        s.jobs[j] = replace(s.jobs[j], state="RUNNING")  # the stand-in needs JSON for these
    inc.read(s.listing(), s.full, s.some, from_text=named_from_text)
    assert s.full_reads == 1 and not s.asked and inc.last_read == "full"
    s, inc = Users(owners(ada=4)), IncrementalJobs()
    got = inc.read(s.listing(), s.full, None, from_text=named_from_text)
    assert s.full_reads == 1 and got == list(s.jobs.values())


def test_a_hostile_listing_cannot_name_a_uid():
    """The uid comes from squeue's UserID field (slurmctld's, not the user's); the name
    only ever from Slurm's JSON. A record whose uid is not a number names nothing, and
    the job is read as JSON."""
    s, inc = Users(owners(ada=6)), IncrementalJobs()
    listing = s.listing()
    listing["2"] = tuple("ada; rm -rf /" if i == UID else v for i, v in enumerate(listing["2"]))
    got = inc.read(listing, s.full, s.some, from_text=lambda r, last, users: (
        None if not r[UID].isdigit() else named_from_text(r, last, users)))  # fmt: skip
    assert s.asked == [["1", "2"]] and [j.user for j in got] == ["ada"] * 6


def test_the_exclude_field_is_listed_where_the_release_has_one():
    """22.05's --Format has no ExcNodes (only -o %x): JobID is printed in its place, and
    read by nothing (job_from_listing's excluded_listed). Memory in whole megabytes."""
    at = list(LISTING_FIELDS).index("excluded_nodes")
    for excluded, want in [("ExcNodes", "ExcNodes"), (None, "JobID")]:
        argv, env = listing_command(TOKEN, "OverSubscribe", excluded)
        names = [f.split(":0")[0] for f in env["SQUEUE_FORMAT2"].split(TOKEN + ",")]
        assert names[at] == want and len(names) == len(LISTING_FIELDS)
        assert "--noconvert" in argv
    old = parse_listing(captured("22.05"), TOKEN)
    assert old is not None and all(r[at] == j for j, r in old.items())


def test_without_filtering_by_id_the_listed_names_spare_the_full_read():
    """22.05: the second listing names the uids (merge_extra_listing), so the first
    read builds every job from its text instead of reading every job's JSON."""
    s, inc = Users(owners(ada=3, bob=2)), IncrementalJobs()
    names = {1000: "ada", 1001: "bob"}
    got = inc.read(s.listing(), s.full, None, from_text=named_from_text, names=names)
    assert got == list(s.jobs.values()) and s.full_reads == 0 and inc.last_read == "none"
    # without them (or with one uid left out) every job's JSON is read, as before
    inc = IncrementalJobs()
    inc.read(s.listing(), s.full, None, from_text=named_from_text, names={1000: "ada"})
    assert s.full_reads == 1 and inc.last_read == "full"


def test_a_uid_the_json_and_the_listing_name_differently_is_read_as_json():
    s, inc = Users(owners(ada=3)), IncrementalJobs()
    inc.read(s.listing(), s.full, None, force_full=True)  # the JSON named 1000 "ada"
    s.jobs["9"] = replace(job("9"), user="ada", user_id=1000)
    got = inc.read(s.listing(), s.full, None, from_text=named_from_text, names={1000: "eve"})
    assert s.full_reads == 2 and [j.user for j in got] == ["ada"] * 4
    s.jobs["10"] = replace(job("10"), user="ada", user_id=1000)
    inc.read(s.listing(), s.full, None, from_text=named_from_text, names={1000: "ada"})
    assert s.full_reads == 2 and inc.last_read == "none"


def test_the_second_listing_puts_the_exclude_in_its_place_and_names_uids():
    at = list(LISTING_FIELDS).index("excluded_nodes")
    record = ["x"] * len(LISTING_FIELDS)
    record[0], record[UID] = "1", "1000"
    listing = {"1": tuple(record), "2": tuple(["2", *record[1:]])}
    # job 2 left between the two listings; job 3 came after the first
    extra = {"1": ("ada", "k80-1"), "3": ("bob", "")}
    merged, names = merge_extra_listing(listing, extra)
    assert merged["1"][at] == "k80-1" and merged["2"][at] == NOT_LISTED
    assert set(merged) == {"1", "2"} and names == {1000: "ada"}
    assert [v for i, v in enumerate(merged["1"]) if i != at] == [
        v for i, v in enumerate(listing["1"]) if i != at
    ]
    # two names for one uid, or names no login has: the uid is not named
    for bad in ("ada\nx", "1000", "nobody", "", "a" * 65, "ada eve", "\udcff"):
        assert merge_extra_listing(listing, {"1": (bad, "")})[1] == {}, bad
    both = merge_extra_listing(listing, {"1": ("ada", ""), "2": ("eve", "")})
    assert both[1] == {}


def test_the_second_listing_reads_back_hostile_values_or_not_at_all():
    t = new_token()
    text = f"1{t}ada{t}a\nb|{TOKEN_ALPHABET}|{'n' * 100_000}\udcff{t}\n2{t}bob{t}{t}\n"
    got = parse_extra_listing(text, t)
    assert got == {"1": ("ada", f"a\nb|{TOKEN_ALPHABET}|{'n' * 100_000}\udcff"), "2": ("bob", "")}
    assert parse_extra_listing("", t) == {}
    for bad in (f"1{t}ada{t}{t}x{t}\n", f"1{t}ada{t}\n", f"x{t}ada{t}{t}\n",
                f"1{t}ada{t}{t}\n1{t}ada{t}{t}\n", f"1{t}ada{t}{t}"):  # fmt: skip
        assert parse_extra_listing(bad, t) is None, bad
    argv, env = extra_listing_command(t)
    assert t not in " ".join(argv) and env == {"SQUEUE_FORMAT": f"%A{t}%u{t}%x{t}"}
