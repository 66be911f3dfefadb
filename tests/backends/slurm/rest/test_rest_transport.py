"""SlurmBackend through slurmrestd (unix socket, rest_auth/local) on the real
local cluster of each Slurm release (22.05, 24.11, 26.05): the same behaviour as
SlurmBackend, through the REST API where the release's API version allows it
(node list from v0.0.40, requeue from v0.0.45) and scontrol where it does not."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.backends.slurm.rest.versions import choose_version, offered_versions
from slurm_gavel.domain.cluster_model import JobState
from slurm_gavel_dev.localcluster_rest import rest_up
from tests.backends.slurm.placements import placement

pytestmark = pytest.mark.slurm

JOB = str(Path(__file__).parents[2] / "jobs" / "checkpoint_job.sh")


@pytest.fixture
def rest(slurm):
    sock = rest_up(slurm.run_dir)
    return lambda **kw: rest_backend(sock, env=slurm.env, poll_s=0.2, **{"grace_s": 10.0, **kw})


def managed(slurm, tmp_path: Path, name: str, scale: int = 1) -> str:
    return slurm.sbatch(
        f"--comment=gavel:type=A3C,scale={scale}",
        "-p",
        "gpu",
        "-o",
        "/dev/null",
        JOB,
        str(tmp_path / name),
    )


def test_rest_observe_matches_cli(slurm, rest, tmp_path):
    # The capacity asserted below needs every GPU free but the k80 job's.
    left = slurm.cancel_all(wait_s=180)
    assert not left, f"earlier tests still hold GPUs or nodes after 180 s: {left}"
    managed(slurm, tmp_path, "x")
    other = slurm.sbatch("-p", "k80", "--gres=gpu:k80:2", "-o", "/dev/null", "--wrap", "sleep 60")
    slurm.wait_state(other, "RUNNING")
    a = rest().observe()
    b = cli_backend(env=slurm.env).observe()
    assert a.nodes == b.nodes
    # Finished jobs of earlier tests: slurmrestd's /jobs lists them until MinJobAge,
    # squeue -t (24.11+) does not; both backends agree on every job not done.
    live_a = [(j.job, j.state) for j in a.jobs if j.state is not JobState.DONE]
    assert live_a == [(j.job, j.state) for j in b.jobs if j.state is not JobState.DONE]
    assert a.capacity() == b.capacity()
    gpus: dict[str, int] = {}
    for n in a.nodes:
        gpus[n.gpu_type] = gpus.get(n.gpu_type, 0) + n.gpus
    assert gpus == {"v100": 8, "p100": 8, "k80": 8}
    # Usable K80s: 6 (8 less `other`'s 2) on a quiet cluster, fewer while a node is
    # not usable, so at most 6.
    assert 0 < a.capacity()["k80"] <= 6


NEWEST = {"22.05": "v0.0.38", "24.11": "v0.0.42", "26.05": "v0.0.45"}


def test_rest_speaks_the_newest_version_the_server_offers(slurm, rest):
    """Before: /slurm/v0.0.38 on every release; 24.11 and 26.05 answer HTTP 404."""
    b = rest()
    spec = b.transport.rest.request("discover", "GET", "/openapi/v3")
    assert b.transport.api.version == choose_version(offered_versions(spec))
    assert b.transport.api.version == NEWEST.get(slurm.release, b.transport.api.version)
    assert b.transport.api.node_list == (b.transport.api.version != "v0.0.38")
    assert b.transport.api.requeue == (b.transport.api.version >= "v0.0.45")


def test_rest_start_preempt_resume(slurm, rest, tmp_path):
    job = managed(slurm, tmp_path, "r", scale=2)
    b = rest()
    b.observe()
    res = b.act(placement(0, {job: ("v100", [("v100-2", 2)])}))
    assert res.started == (job,) and not res.failed, res
    slurm.wait_state(job, "RUNNING")
    assert slurm.show(job)["NodeList"] == "v100-2"
    # The node list goes through the REST API where the version can set one.
    assert b.transport.commands.counts["place-nodes"] == (0 if b.transport.api.node_list else 1)
    time.sleep(0.8)
    b.observe()
    res = b.act(placement(1, {}))
    assert res.preempted == (job,) and not res.failed
    assert b.transport.commands.counts["requeuehold"] == 0
    slurm.wait_state(job, "SPECIAL_EXIT", "PENDING")  # exit 99 (the act did not wait)
    obs = {j.job.id: j for j in b.observe().jobs}[job]
    assert obs.state is JobState.HELD and obs.restarts == 1
    res = b.act(placement(2, {job: ("p100", [("p100-1", 1), ("p100-2", 1)])}))
    assert res.started == (job,), res
    slurm.wait_state(job, "RUNNING")
    assert slurm.show(job)["NodeList"] == "p100-[1-2]"
    log = tmp_path / "r.log"
    deadline = time.monotonic() + 10
    while "start restart=1" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)  # RUNNING comes before the script's first line
    assert "start restart=1" in log.read_text()
    assert b.transport.rest.counts["signal"] == 1 and b.transport.rest.counts["release"] == 2
    assert b.transport.commands.total == (0 if b.transport.api.node_list else 2)


def test_rest_signal_reaches_the_batch_shell_only_where_the_version_can_say_so(
    slurm, rest, tmp_path
):
    """As `scancel --batch`: 24.11+ send BATCH_JOB and the job's steps (srun) do not
    get the checkpoint signal; 22.05's API has no such flag and signals them all.
    (Without the flag 24.11 signals the steps only, never the batch shell: the
    assertion on "batch" fails then, checked by removing it.)"""
    out = tmp_path / "signals.log"
    script = tmp_path / "steps.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"trap 'echo batch >> {out}' USR1\n"
        f"srun -n1 bash -c \"trap 'echo step >> {out}' USR1; echo ready >> {out}; "
        'while true; do sleep 0.2 & wait $!; done" &\n'
        "while true; do sleep 0.2 & wait $!; done\n"
    )
    job = slurm.sbatch("--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null", str(script))
    b = rest()
    b.observe()
    assert b.act(placement(0, {job: ("v100", [("v100-2", 1)])})).started == (job,)
    slurm.wait_state(job, "RUNNING")
    deadline = time.monotonic() + 20
    while "ready" not in (out.read_text() if out.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "ready" in out.read_text(), slurm.why(job)
    failed: dict[str, str] = {}
    assert b.transport.send_signal([job], "USR1", failed) == set() and not failed
    time.sleep(2)
    got = out.read_text().split()
    assert "batch" in got
    assert ("step" in got) == (not b.transport.api.signal_batch_flag), got


def test_rest_without_cli_places_by_type_partition_only(slurm, rest, tmp_path):
    job = managed(slurm, tmp_path, "t")
    b = rest(pin_nodes_with_cli=False)
    b.observe()
    res = b.act(placement(0, {job: ("k80", [("k80-2", 1)])}))
    if b.transport.api.node_list:
        # 24.11+: the node list goes in the REST update; no scontrol needed at all.
        assert res.started == (job,), res
        slurm.wait_state(job, "RUNNING")
        assert slurm.show(job)["NodeList"] == "k80-2"
        assert b.transport.commands.total == 0
        return
    # 22.05: its partition "gpu" mixes types: refused, since the type could not be enforced.
    assert "mixes GPU types" in dict(res.failed)[job]
    assert slurm.show(job)["Priority"] == "0"
    b = rest(pin_nodes_with_cli=False, managed_partitions={"v100", "p100", "k80"})
    slurm.cmd("scontrol", "update", f"JobId={job}", "Partition=k80")
    b.observe()
    res = b.act(placement(1, {job: ("k80", [("k80-2", 1)])}))
    assert res.started == (job,), res
    slurm.wait_state(job, "RUNNING")
    assert slurm.show(job)["NodeList"].startswith("k80-")  # Slurm picked the k80 node
    assert b.transport.commands.total == 0  # no command-line tool was used


def test_rest_requeuehold_and_unmanaged_untouched(slurm, rest, tmp_path):
    other = slurm.sbatch(
        "-p", "v100", "--gres=gpu:v100:1", "-o", "/dev/null", "--wrap", "sleep 300"
    )
    job = slurm.sbatch_ignoring_the_signal()
    b = rest(grace_s=1.0)
    b.observe()
    b.act(placement(0, {job: ("v100", [("v100-2", 1)])}))
    slurm.wait_state(job, "RUNNING")
    b.observe()
    res = b.act(placement(1, {}))
    assert res.preempted == (job,) and not res.failed, res
    time.sleep(1.5)  # its grace is over: the next act requeue-holds it
    b.observe()
    res = b.act(placement(2, {}))
    assert res.preempted == (job,) and not res.failed, res
    # v0.0.45 (26.05) requeues through the API, older versions with scontrol.
    assert b.transport.commands.counts["requeuehold"] == (0 if b.transport.api.requeue else 1)
    assert b.transport.rest.counts["requeuehold"] == (1 if b.transport.api.requeue else 0)
    slurm.wait_state(job, "PENDING")
    obs = {j.job.id: j for j in b.observe().jobs}[job]
    assert obs.state is JobState.HELD and obs.restarts == 1
    assert slurm.state(other) == "RUNNING"
    b_off = rest(grace_s=0.5, cli_fallback=False)
    b_off.observe()
    b_off.act(placement(2, {job: ("v100", [("v100-2", 1)])}))
    slurm.wait_state(job, "RUNNING")
    b_off.observe()
    b_off.act(placement(3, {}))
    time.sleep(1.0)  # its grace is over: the next act requeue-holds it
    b_off.observe()
    res = b_off.act(placement(4, {}))
    if b_off.transport.api.requeue:
        assert res.preempted == (job,) and not res.failed, res
        slurm.wait_state(job, "PENDING")
    else:
        assert "cannot requeue" in dict(res.failed)[job]
        assert slurm.state(job) == "RUNNING"  # left running, reported; never cancelled
    assert b_off.transport.commands.counts["requeuehold"] == 0


@pytest.mark.hostile(inputs=1)  # HOSTILE: a comment that is not UTF-8, through slurmrestd
def test_rest_observe_survives_a_comment_that_is_not_utf8(slurm, rest, tmp_path):
    """slurmrestd copies a comment's bytes into /jobs as they are: one job whose
    comment is not UTF-8 (any user can write one) must not fail the observe of every
    job. Before: "HTTP 200, not JSON" on each release, every round."""
    mine = managed(slurm, tmp_path, "utf")
    # argv with surrogates: Python passes them to sbatch as the raw bytes 0xff 0xfe
    theirs = slurm.sbatch("-p", "gpu", "--hold", "-o", "/dev/null",
                          "--comment=bad\udcff\udcfe x", "--wrap", "sleep 60")  # fmt: skip
    seen = {j.job.id: j for j in rest().observe().jobs}
    assert seen[mine].state is JobState.PENDING and theirs not in seen  # not managed


def test_rest_and_cli_read_the_same_reservations(slurm, rest):
    """Both transports read Slurm's reservations (slurmrestd's /reservations; scontrol's
    text on 22.05, its --json later) into the same records."""
    name = "gavel_rest_resv"
    slurm.cmd("scontrol", "delete", f"ReservationName={name}", check=False)
    slurm.cmd(
        "scontrol", "create", "reservation", f"ReservationName={name}", "Nodes=p100-2",
        "StartTime=now+600", "Duration=30", "Users=root", "Flags=MAGNETIC,FLEX",
    )  # fmt: skip
    try:
        via_rest = {r.name: r for r in rest().transport.read_reservations()}
        via_cli = {r.name: r for r in cli_backend(env=slurm.env).transport.read_reservations()}
    finally:
        slurm.cmd("scontrol", "delete", f"ReservationName={name}", check=False)
    assert via_rest == via_cli and name in via_rest
    r = via_rest[name]
    assert r.nodes == {"p100-2"} and r.users == ("root",) and {"MAGNETIC", "FLEX"} <= r.flags
    assert r.end - r.start == 1800 and r.start > time.time() + 500
