"""daemon/lease.py: who leads among daemons sharing a directory, with a fake clock.

The safety property under test: at no instant may two daemons both be allowed to act
(may_act() is None), whatever the order of renewals, pauses and takeovers; and a
hostile or torn lease file never makes a standby act early nor a leader act late."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurm_gavel.daemon.lease import (
    LEASE_FORMAT,
    HaFiles,
    Leadership,
    LeaseRecord,
    Role,
    new_holder_id,
    parse_lease,
)

LEASE = 30.0
MARGIN = 7.5


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def daemon(tmp_path: Path, clock: Clock, name: str) -> Leadership:
    files = HaFiles(tmp_path)
    files.ensure()
    return Leadership(files, name, lease_s=LEASE, margin_s=MARGIN, clock=clock, wall=clock)


def acting(*ds: Leadership) -> list[str]:
    return [d.holder for d in ds if d.may_act() is None]


def test_the_first_daemon_of_an_empty_directory_leads_at_once(tmp_path):
    clock = Clock()
    a = daemon(tmp_path, clock, "a:1:x")
    assert a.poll() is True
    assert a.role is Role.LEADER and a.generation == 1
    assert a.took_over_because == "never held"
    rec = parse_lease(HaFiles(tmp_path).read_lease())
    assert rec is not None and (rec.holder, rec.generation) == ("a:1:x", 1)
    assert a.may_act() is None


def test_a_standby_waits_a_whole_unchanged_lease_then_takes_the_next_generation(tmp_path):
    clock = Clock()
    a, b = daemon(tmp_path, clock, "a:1:x"), daemon(tmp_path, clock, "b:2:y")
    assert a.poll()
    for _ in range(12):  # a renews every 10 s: b never takes over
        clock.advance(10)
        assert a.renew()
        assert b.poll() is False
        assert acting(a, b) == ["a:1:x"]
    # a stops renewing (killed): b takes over only once a whole lease passed by its
    # clock since it last saw the lease change, and a's window closed before that.
    died = clock.t
    clock.advance(LEASE - MARGIN)
    assert acting(a, b) == []  # a's window is shut: not yet b's
    clock.advance(MARGIN - 0.1)
    assert b.poll() is False
    clock.advance(0.1)
    assert b.poll() is True
    assert clock.t - died == pytest.approx(LEASE)
    assert b.generation == 2 and b.took_over_because == "expired"
    assert acting(a, b) == ["b:2:y"]
    assert a.role is Role.DEPOSED


def test_a_paused_leader_that_resumes_after_the_takeover_never_acts_again(tmp_path):
    clock = Clock()
    a, b = daemon(tmp_path, clock, "a:1:x"), daemon(tmp_path, clock, "b:2:y")
    assert a.poll()
    b.poll()
    clock.advance(LEASE + 1)  # a is SIGSTOPped
    assert b.poll()
    # a resumes: its renewal thread and its round both run again
    assert a.renew() is False  # sees claim 2
    assert a.role is Role.DEPOSED and "generation 2" in (a.why_deposed or "")
    assert a.may_act() is not None
    assert acting(a, b) == ["b:2:y"]


def test_a_resumed_leader_whose_renewal_lands_after_the_claim_is_still_fenced(tmp_path):
    """The race a check-then-write renewal allows: a renews just as b claims. b's claim
    is what counts; a's lease write does not bring it back."""
    clock = Clock()
    a, b = daemon(tmp_path, clock, "a:1:x"), daemon(tmp_path, clock, "b:2:y")
    assert a.poll()
    b.poll()
    clock.advance(LEASE)
    # b claims between a's check and a's write
    real_write = a.files.write_lease

    def write_after_claim(rec: LeaseRecord) -> None:
        assert b.poll()
        real_write(rec)

    a.files.write_lease = write_after_claim  # type: ignore[method-assign]
    assert a.renew() is False
    assert acting(a, b) == ["b:2:y"]


def test_the_leader_stops_acting_once_renewals_fail_even_with_nobody_taking_over(tmp_path):
    """Storage unwritable for the leader: it acts for lease - margin after its last
    renewal, no longer, though no standby claimed (it cannot know one will not)."""
    clock = Clock()
    a = daemon(tmp_path, clock, "a:1:x")
    assert a.poll()

    def refuse(rec: LeaseRecord) -> None:
        raise PermissionError(13, "Read-only file system")

    a.files.write_lease = refuse  # type: ignore[method-assign]
    clock.advance(10)
    assert a.renew() is False and a.role is Role.LEADER
    assert a.may_act() is None
    clock.advance(LEASE - MARGIN - 10 - 0.01)
    assert a.may_act() is None
    clock.advance(0.01)
    why = a.may_act()
    assert why is not None and "window" in why
    assert a.role is Role.DEPOSED  # for good: no renewal brings it back
    a.files.write_lease = HaFiles(tmp_path).write_lease  # type: ignore[method-assign]
    assert a.renew() is False and a.may_act() is not None


def test_two_standbys_racing_for_one_generation_make_exactly_one_leader(tmp_path):
    clock = Clock()
    a, b, c = (daemon(tmp_path, clock, f"{n}:1:x") for n in "abc")
    assert a.poll()
    b.poll(), c.poll()
    clock.advance(LEASE)
    results = [b.poll(), c.poll()]
    assert results == [True, False]
    assert b.generation == 2 and c.role is Role.STANDBY
    assert acting(a, b, c) == ["b:1:x"]
    # c, a standby again, watches b's lease afresh (no takeover while b renews)
    clock.advance(10)
    assert b.renew()
    assert c.poll() is False


def test_a_clean_stop_releases_the_lease_and_a_standby_takes_over_at_its_next_look(tmp_path):
    clock = Clock()
    a, b = daemon(tmp_path, clock, "a:1:x"), daemon(tmp_path, clock, "b:2:y")
    assert a.poll()
    assert b.poll() is False
    assert a.release()
    clock.advance(0.5)
    assert b.poll() is True and b.took_over_because == "released"
    assert acting(a, b) == ["b:2:y"]


def test_a_higher_claim_deposes_the_leader_at_its_next_check(tmp_path):
    clock = Clock()
    a = daemon(tmp_path, clock, "a:1:x")
    assert a.poll()
    assert HaFiles(tmp_path).claim(5, "someone:9:z")  # a gap: any higher claim counts
    assert a.may_act() is not None
    assert a.role is Role.DEPOSED


def test_a_shared_directory_that_cannot_be_read_deposes_the_leader(tmp_path):
    clock = Clock()
    a = daemon(tmp_path, clock, "a:1:x")
    assert a.poll()

    def broken() -> int:
        raise OSError(5, "Input/output error")

    a.files.highest_claim = broken  # type: ignore[method-assign]
    why = a.may_act()
    assert why is not None and "cannot be read" in why


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\xff garbage",
        b"{",
        b"[]",
        b'"x"',
        json.dumps({"format": "other"}).encode(),
        b"9" * 5000,
    ],
)
def test_garbage_in_the_lease_file_is_no_lease_and_expires_like_one(tmp_path, content):
    """A torn or hostile lease file: not parsed as a lease; a standby still waits a
    whole lease of it unchanged before taking over (garbage rewritten keeps it away:
    a writer of the shared directory owns the scheduler anyway)."""
    clock = Clock()
    files = HaFiles(tmp_path)
    files.ensure()
    assert files.claim(1, "old:1:x")
    files.lease_path.write_bytes(content)
    assert parse_lease(files.read_lease()) is None
    b = daemon(tmp_path, clock, "b:2:y")
    assert b.poll() is False
    clock.advance(LEASE - 1)
    assert b.poll() is False
    clock.advance(1)
    assert b.poll() is True and b.generation == 2


def record(**over: object) -> bytes:
    doc: dict[str, object] = {
        "format": LEASE_FORMAT, "holder": "h:1:a", "generation": 3, "renewals": 7,
        "renewed_at": 1.5e9, "lease_s": 30.0, "released": False,
    }  # fmt: skip
    doc.update(over)
    return json.dumps(doc).encode()


def test_a_well_formed_lease_parses():
    rec = parse_lease(record())
    assert rec == LeaseRecord("h:1:a", 3, 7, 1.5e9, 30.0, False)
    assert parse_lease(rec.to_bytes()) == rec


@pytest.mark.parametrize(
    "over",
    [
        {"generation": 10**13},
        {"generation": -1},
        {"generation": 1.5},
        {"generation": True},
        {"generation": "3"},
        {"renewals": 10**16},
        {"renewed_at": float("nan")},
        {"renewed_at": 1e300},
        {"lease_s": 0},
        {"lease_s": 1e9},
        {"holder": ""},
        {"holder": "x" * 201},
        {"holder": "evil\nholder"},
        {"holder": "a b"},
        {"holder": 7},
        {"released": "yes"},
    ],
)
def test_out_of_range_or_odd_lease_fields_are_no_lease(over):
    assert parse_lease(record(**over)) is None


def test_a_lease_file_naming_a_huge_or_backward_generation_does_not_steer_the_claims(tmp_path):
    """The generation comes from the claims (created O_EXCL), never from the lease
    file's word: a lease saying 10**12 or 0 leads to the next claim all the same."""
    clock = Clock()
    files = HaFiles(tmp_path)
    files.ensure()
    assert files.claim(1, "old:1:x")
    files.lease_path.write_bytes(record(generation=10**12, holder="old:1:x"))
    b = daemon(tmp_path, clock, "b:2:y")
    b.poll()
    clock.advance(LEASE)
    assert b.poll() and b.generation == 2
    files.lease_path.write_bytes(record(generation=0, holder="b:2:y"))  # backwards
    assert b.may_act() is None  # its claim is still the highest


def test_another_holders_lease_with_our_generation_does_not_make_us_lead(tmp_path):
    """A lease naming generation 2 under another holder: the claim file is what
    makes the leader, and a standby watching it sees it change (alive), no more."""
    clock = Clock()
    files = HaFiles(tmp_path)
    files.ensure()
    assert files.claim(1, "a:1:x")
    b = daemon(tmp_path, clock, "b:2:y")
    for i in range(5):
        files.lease_path.write_bytes(record(generation=1, holder="a:1:x", renewals=i))
        assert b.poll() is False
        clock.advance(10)
    assert b.role is Role.STANDBY and b.may_act() is not None


def test_odd_names_in_the_claims_folder_are_not_claims(tmp_path):
    files = HaFiles(tmp_path)
    files.ensure()
    for name in ("99x", "-3", "1e5", ".7", "9" * 13, "README"):
        (files.claims / name).write_text("x")
    assert files.highest_claim() == 0
    assert files.claim(1, "a:1:x") and not files.claim(1, "b:1:x")
    assert files.highest_claim() == 1
    assert files.claim_holder(1) == "a:1:x"


def test_heartbeats_are_bounded_and_odd_ones_skipped(tmp_path):
    files = HaFiles(tmp_path)
    files.ensure()
    files.heartbeat("b:2:y", {"holder": "b:2:y", "at": 5.0})
    (files.standbys / "bad.json").write_bytes(b"\xff{")
    (files.standbys / "evil.json").write_text(json.dumps({"holder": "a\nb", "at": 1}))
    (files.standbys / "nan.json").write_text('{"holder": "c:1:z", "at": NaN}')
    assert files.read_heartbeats() == [{"holder": "b:2:y", "at": 5.0}]
    files.drop_heartbeat("b:2:y")
    assert files.read_heartbeats() == []


def test_holder_ids_are_unique_per_process_start_and_parse():
    a, b = new_holder_id(), new_holder_id()
    assert a != b and str(os.getpid()) in a
    assert parse_lease(LeaseRecord(a, 1, 0, 1.0, 30.0).to_bytes()) is not None


def test_never_two_acting_over_a_seeded_schedule_of_pauses_and_failures(tmp_path, monkeypatch):
    """Three daemons, random pauses (a paused daemon does nothing) and new lives of
    deposed ones, over 150 steps per seed: at no step do two daemons may-act."""
    import random

    monkeypatch.setattr(os, "fsync", lambda fd: None)  # the logic, not the disk
    takeovers = 0
    for seed in range(20):
        rng = random.Random(seed)
        clock = Clock()
        root = tmp_path / str(seed)
        ds = [daemon(root, clock, f"d{i}:1:x") for i in range(3)]
        paused_until = [0.0] * 3
        for _ in range(150):
            clock.advance(rng.choice([0.1, 0.5, 1.0, 3.0, 10.0]))
            for i, d in enumerate(ds):
                if clock.t < paused_until[i]:
                    continue
                r = rng.random()
                if r < 0.02:
                    paused_until[i] = clock.t + rng.uniform(1, 3 * LEASE)
                elif d.role is Role.LEADER and r < 0.5:
                    d.renew()
                elif d.role is Role.STANDBY:
                    d.poll()
                elif d.role is Role.DEPOSED and r < 0.05:  # steps down: a new life
                    ds[i] = daemon(root, clock, f"d{i}:{int(clock.t)}:x")
            live = [d for i, d in enumerate(ds) if clock.t >= paused_until[i]]
            assert len(acting(*live)) <= 1, (seed, clock.t)
            # a paused daemon checked late is refused as well
            assert len(acting(*ds)) <= 1, (seed, clock.t)
        takeovers += HaFiles(root).highest_claim() - 1
    assert takeovers >= 20  # the schedule did depose leaders: the check was exercised
