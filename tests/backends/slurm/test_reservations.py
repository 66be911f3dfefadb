"""Reservations (slurm/reservations.py) read from every release's captures, and what the
round makes of them on the captured 22.05 cluster: reserved nodes kept from the jobs
they do not admit, a reservation's jobs kept on its nodes or given back, several
partitions per job kept as the job's own list. No cluster needed."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.act_plan import plan_act
from slurm_gavel.backends.slurm.cli.argv import render_update
from slurm_gavel.backends.slurm.fields import time_limit, time_limit_text
from slurm_gavel.backends.slurm.from_json import parse_jobs, parse_nodes
from slurm_gavel.backends.slurm.giveback import give_back_orders
from slurm_gavel.backends.slurm.reservations import (
    Reservations,
    SlurmReservation,
    job_places,
    parse_reservations,
    parse_reservations_text,
)
from slurm_gavel.backends.slurm.view import build_view
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, NodeSlice, RoundPlacement

DATA = Path(__file__).parents[1] / "data"
HELD = "3"  # 22.05/scenario.txt: managed, held on arrival, partition gpu
RUN1 = "4"  # managed, running on v100-1 (2 GPUs)


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """scontrol's default text prints local times: the captures were made in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def captures() -> list[Path]:
    found = sorted(DATA.glob("*/reservations/scontrol-res.*.json"))
    found += sorted(DATA.glob("*/reservations/rest-*-reservations.json"))
    return found


def read(path: Path) -> list[SlurmReservation]:
    if path.suffix == ".txt":
        return parse_reservations_text(path.read_text())
    return parse_reservations(json.loads(path.read_text()))


# scontrol's text: as the daemon reads it (SLURM_TIME_FORMAT=%s, 22.05, where it has no
# --json) and in its default local time (.local.txt, every release)
ALL = captures() + sorted(DATA.glob("*/reservations/scontrol-show-res*.txt"))


def test_every_release_and_transport_is_captured():
    releases = {p.parts[-3] for p in ALL}
    assert releases == {"22.05", "24.11", "26.05"}
    assert {p.parts[-3] for p in DATA.glob("*/reservations/rest-*")} == releases


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_each_capture_reads_as_the_scenario(path):
    got = {r.name: r for r in read(path)}
    assert set(got) == {"maint1", "future1", "flex1", "notroot"}
    m, f, x, n = got["maint1"], got["future1"], got["flex1"], got["notroot"]
    assert m.nodes == {"v100-1"} and f.nodes == {"p100-1"} and x.nodes == {"k80-1"}
    assert n.nodes == {"p100-2"}
    assert m.users == ("root",) and m.accounts == () and f.accounts == ("root",)
    assert n.users == ("-root",)
    assert {"MAGNETIC"} <= f.flags and {"FLEX", "MAINT"} <= x.flags
    assert "IGNORE_JOBS" in m.flags and "MAGNETIC" not in m.flags
    for r in got.values():
        assert r.end - r.start == 3600
    assert abs(f.start - m.start - 3600) <= 5  # created seconds apart
    assert m.active(m.start + 1) and not f.active(m.start + 1) and f.active(f.start + 1)


def test_the_22_05_text_and_the_rest_json_agree():
    where = DATA / "22.05/reservations"
    rest = {r.name: r for r in read(where / "rest-v0.0.38-reservations.json")}
    assert {r.name: r for r in read(where / "scontrol-show-res.txt")} == rest
    assert {r.name: r for r in read(where / "scontrol-show-res.local.txt")} == rest


def cluster(resv_path: str = "22.05/reservations/rest-v0.0.38-reservations.json"):
    _, nodes = parse_nodes(json.loads((DATA / "22.05" / "sinfo.json").read_text()))
    _, jobs = parse_jobs(json.loads((DATA / "22.05" / "squeue.json").read_text()))
    items = tuple(read(DATA / resv_path))
    return nodes, jobs, {r.name: r for r in items}, Reservations(items)


def observe(jobs, changes=None, *, at=0.0, reservations=None, partitions=None):
    nodes, base, by_name, resv = cluster()
    now = by_name["maint1"].start + 10 + at
    jobs = [replace(j, **changes) if changes and j.job_id == HELD else j for j in base]
    if partitions is not None:
        jobs = [replace(j, partitions=partitions) if j.job_id == HELD else j for j in jobs]
    return build_view(nodes, jobs, None, now, reservations=reservations or resv)


def job(view, job_id=HELD):
    return next(o for o in view.snapshot.jobs if o.job.id == job_id)


def place(view, job_id, node, gpus=1, gpu_type=None):
    gpu_type = gpu_type or view.nodes[node].gpu_type
    jp = JobPlacement(job_id, gpu_type, (NodeSlice(node, gpus),))
    return plan_act(RoundPlacement(0, 0.0, {job_id: jp}), view, None)


def test_reserved_nodes_are_kept_from_jobs_the_reservations_do_not_admit():
    v = observe(None)
    held = job(v)
    # maint1 (active, not asked for), future1 (starts within an unlimited job's run),
    # flex1 and notroot (active): none of their nodes; v100-2 and k80-2 are free
    assert held.allowed is not None and held.allowed.nodes == {"v100-2", "k80-2"}
    assert "reserved nodes (flex1,future1,maint1,notroot)" in held.allowed.why
    plan = place(v, HELD, "v100-1")
    assert not plan.starts and "not placed on v100-1" in dict(plan.failed)[HELD]
    assert [o.nodes for o in place(v, HELD, "v100-2").starts] == [("v100-2",)]


def test_a_job_that_ends_before_a_reservation_starts_may_use_its_nodes():
    v = observe(None, {"time_limit_min": 30})  # ends well before future1 starts
    assert job(v).allowed.nodes == {"v100-2", "k80-2", "p100-1"}
    v = observe(None, {"time_limit_min": 90})  # would run into it: Slurm refuses
    assert "p100-1" not in job(v).allowed.nodes


def test_the_gpus_of_a_node_reserved_for_no_managed_job_are_no_capacity():
    nodes = {n.name: n for n in observe(None).snapshot.nodes}
    assert nodes["v100-1"].gpus_held_unmanaged == 4  # maint1: nobody here asks for it
    assert nodes["v100-2"].gpus_held_unmanaged == 0
    # with a job of maint1 waiting, its GPUs are the round's again (that job's only)
    nodes = {n.name: n for n in observe(None, {"reservation": "maint1"}).snapshot.nodes}
    assert nodes["v100-1"].gpus_held_unmanaged == 0  # run1's two GPUs are managed


def test_a_running_job_leaves_a_node_once_its_reservation_is_active():
    v = observe(None)
    run1 = job(v, RUN1)
    assert run1.state is JobState.RUNNING and run1.nodes == (NodeSlice("v100-1", 2),)
    assert "v100-1" not in run1.allowed.nodes  # maint1 is active: the round moves it


def test_a_running_job_keeps_its_place_until_a_reservation_begins():
    nodes, jobs, by_name, _ = cluster()
    soon = replace(by_name["maint1"], start=by_name["maint1"].start + 3000)
    now = by_name["maint1"].start + 10
    v = build_view(nodes, jobs, None, now, reservations=Reservations((soon,)))
    assert "v100-1" in job(v, RUN1).allowed.nodes  # runs on where it is
    assert "v100-1" not in job(v, HELD).allowed.nodes  # but nothing new starts there


def test_a_reservation_job_runs_inside_it_only():
    v = observe(None, {"reservation": "maint1"})
    held = job(v)
    assert held.allowed.nodes == {"v100-1"} and "reservation maint1" in held.allowed.why
    assert held.waiting_on is None and HELD not in v.give_back
    plan = place(v, HELD, "v100-2")
    assert not plan.starts and "not placed on v100-2" in dict(plan.failed)[HELD]
    (order,) = place(v, HELD, "v100-1").starts
    assert order.nodes == ("v100-1",)


def test_a_reservation_that_cannot_hold_the_job_gives_it_back_with_why():
    v = observe(None, {"reservation": "maint1"})
    v = observe(None, {"reservation": "maint1", "comment": held_comment(v) + ",scale=8"})
    why = v.give_back[HELD]
    assert "reservation maint1 has 4 GPUs" in why and "asks for 8" in why
    assert job(v).waiting_on == why  # the round skips it meanwhile
    (order,) = give_back_orders(dict(v.give_back), v.managed, {HELD: 8})
    assert order.comment.startswith("gavel-released: its reservation maint1 has 4 GPUs")


def test_a_reservation_job_keeps_its_layout_inside_it():
    """Both rules at once: a --reservation job whose request fixes its nodes (-N 2) is
    kept on its reservation's nodes with that node count, and given back when the
    reservation has fewer nodes than it asks (it would wait for ever)."""
    v = observe(None, {"reservation": "maint1"})
    two = {"reservation": "maint1", "node_count": 2, "comment": held_comment(v) + ",scale=2"}
    v = observe(None, two)
    held = job(v)
    assert held.job.node_count == 2 and held.allowed.nodes <= {"v100-1"}
    why = v.give_back[HELD]
    assert why == (
        "its reservation maint1 has 1 nodes the scheduler manages that fit its request, "
        "and it asks for 2 nodes"
    )
    assert held.waiting_on == why
    # on one node it fits (4 GPUs there): kept, not given back
    v = observe(None, {**two, "node_count": 1})
    assert HELD not in v.give_back and job(v).allowed.nodes == {"v100-1"}


def held_comment(v) -> str:
    return v.managed[HELD].comment


def test_a_reservation_that_is_gone_gives_the_job_back():
    v = observe(None, {"reservation": "gone"})
    assert v.give_back[HELD] == "its reservation gone does not exist (ended or deleted)"
    v = observe(None, {"reservation": "maint1"}, at=7200)  # maint1 has ended
    assert "does not exist" in v.give_back[HELD]


def test_a_job_of_a_reservation_not_started_waits_for_it():
    v = observe(None, {"reservation": "future1"})
    assert job(v).waiting_on.startswith("its reservation future1 starts at ")
    assert HELD not in v.give_back


def test_flex_lets_a_job_use_its_reservation_first_and_free_nodes_beside():
    v = observe(None, {"reservation": "flex1"})
    held = job(v)
    assert held.allowed.preferred == {"k80-1"}
    # other reservations' active nodes stay off; future1 does not block a FLEX job
    assert held.allowed.nodes == {"k80-1", "k80-2", "v100-2", "p100-1"}


def test_magnetic_admits_its_users_jobs_without_asking():
    nodes, jobs, by_name, _ = cluster()
    f = by_name["future1"]
    now = f.start + 10  # only future1 is active (the others ended as it began)
    resv = Reservations(tuple(by_name.values()))
    held = next(j for j in jobs if j.job_id == HELD)
    assert job_places(replace(held, account="root"), resv, nodes, now).off == frozenset()
    other = job_places(replace(held, account="physics", user="alice"), resv, nodes, now)
    assert other.off == {"p100-1"}


def test_a_user_exclusion_admits_everyone_else():
    r = SlurmReservation("x", frozenset({"n"}), 0, 0, users=("-root",), flags=frozenset())
    assert not r.admits("root", "") and r.admits("alice", "")
    r = replace(r, users=("alice", "bob"))
    assert r.admits("bob", "") and not r.admits("carol", "")


def test_unreadable_reservations_keep_every_job_off_flagged_nodes():
    nodes, jobs, _, _ = cluster()
    nodes = [replace(n, flags=n.flags | {"RESERVED"}) if n.name == "v100-2" else n for n in nodes]
    v = build_view(nodes, jobs, None, 1e9, reservations=Reservations(known=False))
    assert "v100-2" not in job(v).allowed.nodes
    assert {n.name: n for n in v.snapshot.nodes}["v100-2"].gpus_held_unmanaged == 4
    jobs = [replace(j, reservation="maint1") if j.job_id == HELD else j for j in jobs]
    v = build_view(nodes, jobs, None, 1e9, reservations=Reservations(known=False))
    assert "could not be read" in job(v).waiting_on and HELD not in v.give_back


def test_a_maint_reservation_does_not_drain_its_nodes():
    nodes, _, _, _ = cluster()
    k80 = next(n for n in nodes if n.name == "k80-1")
    assert not replace(k80, flags=frozenset({"MAINTENANCE", "RESERVED"})).drained


@pytest.mark.hostile
@pytest.mark.parametrize(
    "name",
    ["a b", "x,y", "../../etc", "\x1b[31mred", "'; rm -rf /", "é" * 400, "maint1 ", ","],
)
def test_hostile_reservation_names_are_given_back_with_a_plain_bounded_reason(name):
    v = observe(None, {"reservation": name})
    if name.strip(",") in ("",):
        assert HELD not in v.give_back  # no name at all: not a reservation job
        return
    (order,) = give_back_orders(dict(v.give_back), v.managed, {HELD: 1})
    assert order.comment.startswith("gavel-released: its reservation ")
    assert all(" " <= c <= "~" for c in order.comment) and len(order.comment) < 1024


@pytest.mark.hostile
def test_hostile_text_lines_do_not_break_the_22_05_reader():
    text = (DATA / "22.05/reservations/scontrol-show-res.txt").read_text()
    junk = "No reservations in the system\nReservationName= Nodes=x\nUsers=root\n=\n\x00\n"
    got = parse_reservations_text(junk + text + "StartTime=garbage ReservationName=z\n")
    assert [r.name for r in got] == ["maint1", "future1", "flex1", "notroot", "z"]
    assert got[-1].start == 0 and got[-1].nodes == frozenset()
    assert parse_reservations({"reservations": [None, 3, {"name": ""}, {}]}) == []


def test_time_limits_read_alike_from_json_and_text():
    assert time_limit(None) is None and time_limit({"infinite": True}) is None
    assert time_limit({"set": False, "infinite": False, "number": 0}) is None
    assert time_limit(1564) == 1564 and time_limit({"set": True, "number": 10}) == 10
    assert time_limit("Infinity") is None
    for text, minutes in [
        ("UNLIMITED", None),
        ("NOT_SET", None),
        ("10:00", 10),
        ("1:00:00", 60),
        ("1-02:04:00", 1564),
        ("2-00:00", 2880),
        ("5", 5),
        ("x-1:00", None),
        ("", None),
    ]:
        assert time_limit_text(text) == minutes, text


def test_several_partitions_keep_the_jobs_own_list():
    """-p gpu,v100: placed on a node of one of them, the update names the job's own list
    (Slurm starts it in the partition that holds the node); 26.05 refuses to change a
    waiting job's partition for a while after its submission or last change."""
    v = observe(None, partitions=("k80", "v100"))
    (order,) = place(v, HELD, "v100-2").starts
    assert order.partition == "k80,v100"
    assert "Partition=k80,v100 NumNodes=1-1 NodeList=v100-2" in render_update(order)
    # one partition: as before, the job's own when it holds the node
    (order,) = place(observe(None, partitions=("gpu",)), HELD, "v100-2").starts
    assert order.partition == "gpu"
    # none of its partitions holds the node: a partition that does
    (order,) = place(observe(None, partitions=("k80", "p100")), HELD, "v100-2").starts
    assert order.partition == "v100"
