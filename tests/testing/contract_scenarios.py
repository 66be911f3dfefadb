"""The contract's scenarios (slurm_contract.py): each runs on a Harness (the fake or a
real release), asserts what it must see whichever Slurm it runs on, and returns its
steps (label, observation), which test_contract_on_slurm.py compares between the
fake and the real cluster. A scenario names nodes and jobs only through the local
test cluster's layout (v100, p100, k80 nodes of 4 GPUs, partitions gpu and per type)."""

from __future__ import annotations

from collections.abc import Callable

from slurm_contract import Harness, Observation, Submit, observe, settle, state_of

from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.domain.model import JobId
from slurm_gavel.testing import OnSignal, Script

Steps = list[tuple[str, Observation]]
CHECKPOINTS = Script(on_signal=OnSignal.CHECKPOINT)


def _order(h: Harness, name: str, gpu_type: str, gpus: int, *nodes: str) -> StartOrder:
    return StartOrder(h.ids.get(name, name), "gpu", gpu_type, gpus, tuple(nodes))


def _start(h: Harness, orders: list[StartOrder]) -> dict[JobId, str]:
    """The backend's start: place, then release (SlurmBackend._start)."""
    failed: dict[JobId, str] = {}
    nodes = {n.name: n for n in h.transport.read_nodes()}
    h.transport.place(orders, nodes, failed)
    h.transport.release([o.job_id for o in orders if o.job_id not in failed], failed)
    return failed


def held_on_arrival(h: Harness) -> Steps:
    """The Lua holds a managed job on arrival (JobHeldUser, priority 0) and moves an
    untyped GPU request into scale=; a typed request stays, per node; a plain job runs."""
    h.submit(Submit("untyped", "gavel:type=A3C", gres="gpu:2"))
    h.submit(Submit("typed", "gavel:type=A3C", gres="gpu:p100:1"))
    h.submit(Submit("bare", "gavel:"))
    h.submit(Submit("plain", gres="gpu:k80:1"))
    obs = settle(h, lambda o: state_of("plain")(o) == "RUNNING")
    jobs = obs["jobs"]
    assert jobs["untyped"]["held"] and jobs["untyped"]["reason"] == "JobHeldUser", jobs
    assert jobs["untyped"]["comment"] == "gavel:type=A3C,scale=2"
    assert jobs["untyped"]["gpu_request"] is None
    assert jobs["typed"]["gpu_request"] == ("p100", 1)
    assert jobs["bare"]["comment"] == "gavel:" and jobs["bare"]["held"]
    assert jobs["plain"]["slices"] == (("k80-1", "k80", 1),), jobs["plain"]
    return [("submitted", obs)]


def place_and_release(h: Harness) -> Steps:
    """A held managed job placed (partition, nodes, GPUs set; still held), then released:
    it runs on the nodes named, with GPUs of their type; a typed one keeps its type."""
    h.submit(Submit("two", "gavel:type=A3C,scale=2", script=CHECKPOINTS))
    h.submit(Submit("typed", "gavel:type=A3C", gres="gpu:p100:1", script=CHECKPOINTS))
    steps: Steps = []
    failed: dict[JobId, str] = {}
    nodes = {n.name: n for n in h.transport.read_nodes()}
    two = _order(h, "two", "v100", 2, "v100-2")
    # its own partition, as the backend keeps it (26.05 refuses a Partition change made
    # within a second or two of the submission: "Resource temporarily unavailable")
    typed = StartOrder(h.ids["typed"], "gpu", "p100", 1, ("p100-2",), typed=True)
    h.transport.place([two, typed], nodes, failed)
    obs = observe(h, failed)
    assert obs["jobs"]["two"]["held"] and obs["jobs"]["two"]["gpu_request"] == (None, 2)
    assert obs["jobs"]["typed"]["gpu_request"] == ("p100", 1), obs["jobs"]["typed"]
    steps.append(("placed", obs))
    h.transport.release([two.job_id, typed.job_id], failed)
    obs = settle(h, lambda o: all(j["state"] == "RUNNING" for j in o["jobs"].values()))
    obs["failed"] = sorted(failed)
    assert obs["jobs"]["two"]["slices"] == (("v100-2", "v100", 2),), obs["jobs"]["two"]
    assert obs["jobs"]["typed"]["slices"] == (("p100-2", "p100", 1),)
    assert obs["nodes"]["v100-2"]["gpus_used"] == 2 and not failed
    steps.append(("released", obs))
    return steps


def requeue_hold_and_checkpoint(h: Harness) -> Steps:
    """requeuehold Incomplete of a running job: requeued and held (PENDING, one restart,
    eligible only after Slurm's delay); the checkpoint signal to a job that saves and
    exits 99: SPECIAL_EXIT, held, exit code 99; a job that ignores the signal runs on."""
    h.submit(Submit("stuck", "gavel:type=A3C,scale=1", script=Script(on_signal=OnSignal.IGNORE)))
    h.submit(Submit("saves", "gavel:type=A3C,scale=1", script=CHECKPOINTS))
    failed = _start(
        h, [_order(h, "stuck", "k80", 1, "k80-2"), _order(h, "saves", "k80", 1, "k80-2")]
    )
    running = settle(h, lambda o: all(j["state"] == "RUNNING" for j in o["jobs"].values()))
    assert not failed and running["nodes"]["k80-2"]["gpus_used"] == 2, running
    h.wait(2)  # the scripts set their traps
    bad = h.transport.send_signal([h.ids["stuck"], h.ids["saves"]], "USR1", failed)
    assert not bad, failed
    signalled = settle(h, lambda o: state_of("saves")(o) == "SPECIAL_EXIT")
    h.wait(2)
    signalled = observe(h, failed)
    assert signalled["jobs"]["stuck"]["state"] == "RUNNING", signalled
    saved = signalled["jobs"]["saves"]
    assert saved["held"] and saved["restarts"] == 1 and saved["exit_code"] == 99, saved
    h.transport.requeuehold([h.ids["stuck"], h.ids["saves"]], failed)
    held = settle(
        h, lambda o: state_of("stuck")(o) == "PENDING" and o["nodes"]["k80-2"]["gpus_used"] == 0
    )
    held["failed"] = sorted(failed)
    stuck = held["jobs"]["stuck"]
    assert stuck["held"] and stuck["restarts"] == 1 and stuck["eligible"] == "later", stuck
    assert held["jobs"]["saves"]["state"] == "SPECIAL_EXIT"  # requeuehold Incomplete skips it
    h.wait(1.5)  # never released within its requeue's second (Preemption.wait_out_...)
    failed = _start(
        h, [_order(h, "stuck", "v100", 1, "v100-1"), _order(h, "saves", "p100", 1, "p100-1")]
    )
    again = settle(h, lambda o: all(j["state"] == "RUNNING" for j in o["jobs"].values()))
    again["failed"] = sorted(failed)
    assert again["jobs"]["saves"]["slices"] == (("p100-1", "p100", 1),), again["jobs"]["saves"]
    assert again["jobs"]["stuck"]["restarts"] == 1 and again["jobs"]["stuck"]["eligible"] == "now"
    return [
        ("running", running),
        ("signalled", signalled),
        ("requeue-held", held),
        ("restarted", again),
    ]


def array_tasks(h: Harness) -> Steps:
    """An array's pending tasks, each a job (ARRAY_TASK); one placed and released alone
    runs, with a record of its own, while the others stay held."""
    h.submit(Submit("arr", "gavel:type=A3C,scale=1", array=range(0, 3), script=CHECKPOINTS))
    obs = observe(h)
    assert sorted(obs["jobs"]) == ["arr_0", "arr_1", "arr_2"], obs["jobs"]
    assert all(j["held"] for j in obs["jobs"].values())
    steps: Steps = [("submitted", obs)]
    failed = _start(h, [_order(h, f"{h.ids['arr']}_1", "v100", 1, "v100-1")])
    obs = settle(h, lambda o: state_of("arr_1")(o) == "RUNNING")
    obs["failed"] = sorted(failed)
    assert obs["jobs"]["arr_1"]["slices"] == (("v100-1", "v100", 1),), obs["jobs"]
    assert obs["jobs"]["arr_0"]["held"] and obs["jobs"]["arr_2"]["held"]
    steps.append(("task 1 started", obs))
    # the checkpoint signal naming the task reaches it alone; placed again, it runs there
    h.wait(2)  # its trap is set
    task = f"{h.ids['arr']}_1"
    bad = h.transport.send_signal([task], "USR1", failed)
    assert not bad, failed
    obs = settle(h, lambda o: state_of("arr_1")(o) == "SPECIAL_EXIT")
    obs["failed"] = sorted(failed)
    assert obs["jobs"]["arr_1"]["held"] and obs["jobs"]["arr_1"]["restarts"] == 1, obs["jobs"]
    assert all(obs["jobs"][t]["state"] == "PENDING" for t in ("arr_0", "arr_2"))
    steps.append(("task 1 checkpointed", obs))
    h.wait(1.5)  # never released within its requeue's second
    failed = _start(h, [_order(h, task, "k80", 1, "k80-2")])
    obs = settle(h, lambda o: state_of("arr_1")(o) == "RUNNING")
    obs["failed"] = sorted(failed)
    assert obs["jobs"]["arr_1"]["slices"] == (("k80-2", "k80", 1),), obs["jobs"]["arr_1"]
    assert obs["jobs"]["arr_0"]["held"] and obs["jobs"]["arr_2"]["held"]
    steps.append(("task 1 restarted elsewhere", obs))
    return steps


def dependency(h: Harness) -> Steps:
    """A managed job's dependency reads "afterok:JOB(unfulfilled)" while the job it waits
    on runs, and clears once that job has completed (for a held job, at Slurm's next
    periodic pass: up to a minute); a --begin in the future is an EligibleTime later."""
    h.submit(Submit("first", gres="gpu:k80:1", script=Script(runs_s=10)))
    h.submit(Submit("then", "gavel:type=A3C,scale=1", after=("afterok", "first")))
    h.submit(Submit("later", "gavel:type=A3C,scale=1", begin_in_s=3600))
    obs = settle(h, lambda o: state_of("first")(o) == "RUNNING")
    assert obs["jobs"]["then"]["dependency"] == "afterok:first(unfulfilled)", obs["jobs"]["then"]
    assert obs["jobs"]["later"]["eligible"] == "later"
    steps: Steps = [("waiting", obs)]
    obs = settle(h, lambda o: o["jobs"]["then"]["dependency"] == "", timeout_s=100)
    assert obs["jobs"]["first"]["state"] == "COMPLETED", obs["jobs"]["first"]
    assert obs["jobs"]["then"]["dependency"] == "" and obs["jobs"]["then"]["held"]
    steps.append(("cleared", obs))
    return steps


def give_back(h: Harness) -> Steps:
    """A held managed job given back (giveback.py): its comment relabelled and its GPU
    request put back, then released, it runs wherever Slurm puts it."""
    from slurm_gavel.backends.slurm.giveback import GiveBack, released_comment

    h.submit(Submit("refused", "gavel:type=A3C,scale=2", partition="k80"))
    failed: dict[JobId, str] = {}
    order = GiveBack(h.ids["refused"], released_comment("not in the table"), "gpu:2")
    h.transport.relabel([order], failed)
    h.transport.release([order.job_id], failed)
    obs = settle(h, lambda o: state_of("refused")(o) == "RUNNING")
    obs["failed"] = sorted(failed)
    job = obs["jobs"]["refused"]
    assert job["comment"].startswith("gavel-released: ") and job["gpu_request"] == (None, 2)
    assert job["slices"] == (("k80-1", "k80", 2),), job
    return [("given back", obs)]


def unknown_jobs(h: Harness) -> Steps:
    """Commands naming a job Slurm does not know fail for that job alone."""
    h.submit(Submit("held", "gavel:type=A3C,scale=1"))
    ghost = "4999999"
    steps: Steps = []
    for kind in ("release", "requeuehold", "place", "signal"):
        failed: dict[JobId, str] = {}
        t = h.transport
        if kind == "release":
            t.release([ghost], failed)
        elif kind == "requeuehold":
            t.requeuehold([ghost, h.ids["held"]], failed)
        elif kind == "place":
            t.place([StartOrder(ghost, "gpu", "v100", 1, ("v100-1",))], {}, failed)
        else:
            t.send_signal([ghost], "USR1", failed)
        obs = observe(h, failed)
        assert obs["failed"] == ["?" + ghost], (kind, failed)
        steps.append((kind, obs))
    return steps


def runs_end(h: Harness) -> Steps:
    """A run that exits 0 ends COMPLETED, one that exits 3 FAILED (NonZeroExitCode, its
    exit code), each read back with the nodes it ran on once it left the listing."""
    h.submit(Submit("ok", "gavel:type=A3C,scale=1", script=Script(runs_s=2)))
    h.submit(Submit("bad", "gavel:type=A3C,scale=1", script=Script(runs_s=2, exit_code=3)))
    failed = _start(h, [_order(h, "ok", "k80", 1, "k80-1"), _order(h, "bad", "p100", 1, "p100-1")])
    obs = settle(
        h, lambda o: all(j["state"] in ("COMPLETED", "FAILED") for j in o["jobs"].values())
    )
    obs["failed"] = sorted(failed)
    ok, bad = obs["jobs"]["ok"], obs["jobs"]["bad"]
    assert (ok["state"], ok["exit_code"], ok["nodes"]) == ("COMPLETED", 0, ("k80-1",)), ok
    assert (bad["state"], bad["reason"], bad["exit_code"]) == ("FAILED", "NonZeroExitCode", 3)
    # the daemon's requeue-hold reaching a job that has just ended (its grace ended
    # while it still ran): `Incomplete` leaves it ended, with no error
    h.transport.requeuehold([h.ids["ok"], h.ids["bad"]], failed)
    h.wait(2)
    after = observe(h, failed)
    assert after["jobs"]["ok"]["state"] == "COMPLETED" and after["jobs"]["ok"]["restarts"] == 0
    assert after["jobs"]["bad"]["state"] == "FAILED" and not failed, (after["jobs"], failed)
    return [("ended", obs), ("requeue-held after the end", after)]


def signal_without_a_handler(h: Harness) -> Steps:
    """The checkpoint signal to a batch script that has no handler for it (yet): the
    signal's default action kills the script, and the job ends FAILED, the signal
    recorded, not requeued (why the daemon does not signal a run in its first seconds)."""
    h.submit(Submit("bare", "gavel:type=A3C,scale=1", script=Script(on_signal=OnSignal.DIE)))
    failed = _start(h, [_order(h, "bare", "p100", 1, "p100-2")])
    running = settle(h, lambda o: state_of("bare")(o) == "RUNNING")
    running["failed"] = sorted(failed)
    h.wait(2)
    bad = h.transport.send_signal([h.ids["bare"]], "USR1", failed)
    assert not bad, failed
    ended = settle(h, lambda o: state_of("bare")(o) not in ("RUNNING", "COMPLETING"))
    ended["failed"] = sorted(failed)
    job = ended["jobs"]["bare"]
    assert (job["state"], job["restarts"], job["exit_signal"]) == ("FAILED", 0, 10), job
    return [("running", running), ("signalled", ended)]


def hold_a_released_job(h: Harness) -> Steps:
    """A released job Slurm cannot start yet (its node's GPUs are taken) waits on
    Resources; the daemon's `scontrol hold` holds it again (JobHeldAdmin)."""
    h.submit(Submit("blocker", gres="gpu:v100:4"))
    h.submit(Submit("waits", "gavel:type=A3C,scale=1"))
    settle(h, lambda o: state_of("blocker")(o) == "RUNNING")
    failed = _start(h, [_order(h, "waits", "v100", 1, "v100-1")])
    waiting = settle(h, lambda o: o["jobs"]["waits"]["reason"] == "Resources", timeout_s=15)
    waiting["failed"] = sorted(failed)
    assert not waiting["jobs"]["waits"]["held"], waiting["jobs"]["waits"]
    h.transport.hold([h.ids["waits"]], failed)
    held = observe(h, failed)
    assert held["jobs"]["waits"]["held"] and held["jobs"]["waits"]["reason"] == "JobHeldAdmin"
    return [("released, waiting", waiting), ("held again", held)]


def drained_node(h: Harness) -> Steps:
    """A node drained under a running job: the node reads DRAIN (its state still says
    its use), the job runs on; resumed, the flag is gone."""
    h.submit(Submit("runs", "gavel:type=A3C,scale=1", script=CHECKPOINTS))
    failed = _start(h, [_order(h, "runs", "k80", 1, "k80-2")])
    running = settle(h, lambda o: state_of("runs")(o) == "RUNNING")
    running["failed"] = sorted(failed)
    steps: Steps = [("running", running)]
    try:
        h.drain("k80-2", True)
        h.drain("p100-2", True)
        obs = settle(h, lambda o: o["nodes"]["k80-2"]["flags"] == ["DRAIN"])
        assert obs["nodes"]["k80-2"]["flags"] == ["DRAIN"], obs["nodes"]["k80-2"]
        assert obs["nodes"]["p100-2"]["flags"] == ["DRAIN"], obs["nodes"]["p100-2"]
        assert obs["jobs"]["runs"]["state"] == "RUNNING"
        steps.append(("drained", obs))
    finally:
        h.drain("k80-2", False)
        h.drain("p100-2", False)
    obs = settle(h, lambda o: not o["nodes"]["k80-2"]["flags"])
    assert not obs["nodes"]["k80-2"]["flags"] and not obs["nodes"]["p100-2"]["flags"], obs
    steps.append(("resumed", obs))
    return steps


def owner_holds(h: Harness) -> Steps:
    """A job's owner (a plain user) and the daemon's holds, through job_submit.lua: the
    owner's requeuehold of a running managed job requeues and holds it (Slurm calls no
    job_submit hook for it: its comment is not marked, it reads as the daemon's own
    requeue-hold); the owner cannot release the daemon's hold; the owner's hold of a
    waiting managed job marks it hold=user, which the daemon's release cannot undo, and
    the owner's release removes the key and leaves the job held, now by the daemon."""
    h.submit(Submit("runs", "gavel:type=A3C,scale=1", script=CHECKPOINTS, owner=True))
    h.submit(Submit("waits", "gavel:type=A3C,scale=1", script=CHECKPOINTS, owner=True))
    failed = _start(h, [_order(h, "runs", "k80", 1, "k80-1")])
    running = settle(h, lambda o: state_of("runs")(o) == "RUNNING")
    running["failed"] = sorted(failed)
    steps: Steps = [("running", running)]
    owner: list[tuple[str, str, bool]] = []

    def owns(verb: str, name: str) -> None:
        owner.append((verb, name, h.owns(verb, name)))

    owns("requeuehold", "runs")
    obs = settle(
        h, lambda o: state_of("runs")(o) == "PENDING" and o["nodes"]["k80-1"]["gpus_used"] == 0
    )
    obs["owner"] = list(owner)
    runs = obs["jobs"]["runs"]
    assert runs["held"] and runs["restarts"] == 1, runs
    assert runs["comment"] == "gavel:type=A3C,scale=1" and owner[-1][2], (runs, owner)
    steps.append(("requeue-held by its owner", obs))
    owns("release", "waits")  # the daemon's hold (the Lua's arrival hold): refused
    owns("hold", "waits")
    h.transport.release([h.ids["waits"]], failed)  # the daemon's release: refused too
    obs = observe(h, failed)
    obs["owner"] = list(owner)
    waits = obs["jobs"]["waits"]
    assert [ok for _, _, ok in owner] == [True, False, True], owner
    assert waits["comment"] == "gavel:type=A3C,scale=1,hold=user" and waits["held"], waits
    assert obs["failed"] == ["waits"], obs["failed"]
    steps.append(("held by its owner", obs))
    owns("release", "waits")
    obs = observe(h)
    obs["owner"] = list(owner)
    waits = obs["jobs"]["waits"]
    assert owner[-1][2] and waits["comment"] == "gavel:type=A3C,scale=1" and waits["held"]
    steps.append(("released by its owner", obs))
    return steps


def backend_rounds(h: Harness) -> Steps:
    """The unmodified SlurmBackend's rounds: a start, a preemption beside a start on the
    same GPU (the job checkpoints and is held), the preempted job started elsewhere
    while the other keeps its lease; what each act reports and each observe sees."""
    from slurm_gavel.backends.slurm.backend import SlurmBackend
    from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement

    h.submit(Submit("a", "gavel:type=A3C,scale=1", script=CHECKPOINTS))
    h.submit(Submit("b", "gavel:type=A3C,scale=1", script=CHECKPOINTS))
    backend = SlurmBackend(h.transport, clock=h.now, grace_s=30, poll_s=0.2)
    names = {v: k for k, v in h.ids.items()}

    def act(index: int, where: dict[str, tuple[str, str]]) -> Observation:
        snapshot = backend.observe()
        placement = RoundPlacement(
            index,
            h.now(),
            {
                h.ids[j]: JobPlacement(h.ids[j], t, (NodeSlice(node, 1),))
                for j, (t, node) in where.items()
            },
        )
        res = backend.act(placement)
        obs = settle(h, lambda o: not any(j["state"] == "PENDING" and not j["held"]
                                          for j in o["jobs"].values()))  # fmt: skip
        # the scenario's jobs only: on the real cluster the backend also sees what earlier
        # tests left in Slurm's memory (cancelled jobs, until MinJobAge)
        obs["round"] = {
            "seen": sorted((names[o.job.id], o.state.value) for o in snapshot.jobs
                           if o.job.id in names),
            "started": sorted(names[j] for j in res.started if j in names),
            "kept": sorted(names[j] for j in res.kept if j in names),
            "preempted": sorted(names[j] for j in res.preempted if j in names),
            "failed": sorted(names[j] for j, _ in res.failed if j in names),
        }  # fmt: skip
        return obs

    first = act(0, {"a": ("v100", "v100-1")})
    assert first["round"]["started"] == ["a"] and first["jobs"]["a"]["state"] == "RUNNING"
    h.wait(2)  # the script sets its trap
    second = act(1, {"b": ("v100", "v100-1")})
    assert second["round"]["preempted"] == ["a"] and second["round"]["started"] == ["b"]
    assert second["jobs"]["a"]["state"] == "SPECIAL_EXIT", second["jobs"]["a"]
    h.wait(1.5)
    third = act(2, {"a": ("p100", "p100-2"), "b": ("v100", "v100-1")})
    assert third["round"]["seen"] == [("a", "held"), ("b", "running")], third["round"]
    assert third["round"]["started"] == ["a"] and third["round"]["kept"] == ["b"]
    assert third["jobs"]["a"]["slices"] == (("p100-2", "p100", 1),)
    return [("started", first), ("preempted", second), ("restarted elsewhere", third)]


SCENARIOS: dict[str, Callable[[Harness], Steps]] = {
    f.__name__: f
    for f in (
        held_on_arrival,
        place_and_release,
        requeue_hold_and_checkpoint,
        array_tasks,
        dependency,
        give_back,
        unknown_jobs,
        runs_end,
        signal_without_a_handler,
        hold_a_released_job,
        owner_holds,
        drained_node,
        backend_rounds,
    )
}
