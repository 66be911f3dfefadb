"""Real users' submissions under the daemon (the scenario suite), on each
release's local cluster (CR_Core_Memory, node features = GPU types): the forms a
centre's users write, submitted with the gavel: comment beside plain jobs, the daemon
(`slurm-gavel run`, 4-s rounds) running them all once. Each test states what the user
expects of one form; they share one run per release (module fixture), so the suite
costs one daemon run, not one per form.

User holds (hold=user, da6b2d3) and arrays (0d1763a) landed: no form is marked xfail.
Not here: limits (partition MaxTime, QOS; tests/backends/slurm/test_eligibility_on_slurm.py)
and scancel during the grace (tests/backends/slurm/test_grace_on_slurm.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.integration.conftest import FINISHED, Scenario, new_scenario

pytestmark = pytest.mark.slurm

STEPS = 6
JOB_TYPE = "ResNet-18 (batch size 64)"


@dataclass
class Run:
    sc: Scenario
    ids: dict[str, str] = field(default_factory=dict)  # form -> job id
    submitted: dict[str, float] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # form -> sbatch's stderr
    states: dict[str, str] = field(default_factory=dict)

    def nodes(self, form: str) -> set[str]:
        return {s.node for s in self.sc.segments(self.ids[form])}

    def first_start(self, form: str) -> float:
        segs = self.sc.segments(self.ids[form])
        assert segs, f"{form} never started ({self.sc.slurm.why(self.ids[form])})"
        return segs[0].start

    def done_at(self, form: str) -> float:
        segs = self.sc.segments(self.ids[form])
        assert segs and segs[-1].how == "done", (form, segs)
        return segs[-1].end or 0.0


FORMS: dict[str, tuple[str, ...]] = {
    "plain": (),
    "typed_gres": ("--gres=gpu:p100:1",),
    "typed_gpus": ("--gpus=k80:1",),
    "constraint": ("--constraint=v100", "--exclude=v100-1"),
    "mem_per_gpu": ("--gres=gpu:1", "--mem-per-gpu=2000"),
    "cpus_per_gpu": ("--gpus=1", "--cpus-per-gpu=2"),
    "mem": ("--mem=4000",),
    "exclusive": ("--exclusive", "--gres=gpu:1"),
    "multi_node": ("-N", "2", "--gres=gpu:2"),
    "gpus_per_task": ("-n", "2", "--gpus-per-task=1"),
    "time_limit": ("--time=10",),
    "begin": ("--begin=now+25",),
    "hold": ("--hold",),
    "array": ("--array=0-2",),
}


def submit(run: Run, form: str, *extra: str) -> None:
    sc = run.sc
    argv = ("sbatch", "--parsable", "-p", "gpu", "-o", "/dev/null",
            f"--comment=gavel:type={JOB_TYPE}", *extra,
            str(sc.dir / "managed.sh"), str(sc.dir / "logs"), str(STEPS))  # fmt: skip
    res = sc.slurm.cmd(*argv, check=False)
    run.submitted[form] = time.time()
    if res.returncode != 0:
        run.refused[form] = res.stderr
        return
    run.ids[form] = res.stdout.strip().split(";")[0]
    sc.managed[run.ids[form]] = JOB_TYPE


@pytest.fixture(scope="module")
def run(slurm_session, tmp_path_factory) -> Iterator[Run]:
    slurm = slurm_session
    slurm.cancel_all()
    sc = new_scenario(slurm, tmp_path_factory.mktemp("submissions"))
    r = Run(sc)
    try:
        for form, extra in FORMS.items():
            submit(r, form, *extra)
        submit(r, "nodelist", "-w", "v100-2")
        if "plain" in r.ids:
            submit(r, "dependency", f"--dependency=afterok:{r.ids['plain']}")
        # a plain job's memory hog on p100-2: its GPUs are free, its memory is not
        hog = slurm.sbatch("-p", "gpu", "-w", "p100-2", "--mem=64000", "-o", "/dev/null",
                           "--wrap", "sleep 120")  # fmt: skip
        sc.daemon.start()
        waited = [j for f, j in r.ids.items() if f not in ("hold", "array")]
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            r.states = sc.states(list(r.ids.values()))
            if all(r.states[j] in FINISHED for j in waited):
                break
            time.sleep(1)
        r.states = sc.states(list(r.ids.values()))
        # the array's and the held job's states after the others are done
        time.sleep(8)
        r.states.update(sc.states([r.ids[f] for f in ("hold", "array") if f in r.ids]))
        r.ids["hog"] = hog
        yield r
    finally:
        sc.daemon.stop()
        slurm.cancel_all()


def completed(run: Run, form: str) -> None:
    assert form not in run.refused, run.refused[form]
    job = run.ids[form]
    assert run.states[job] == "COMPLETED", (form, run.states[job], run.sc.slurm.why(job))


@pytest.mark.parametrize(
    "form",
    ["plain", "mem", "exclusive", "multi_node", "gpus_per_task", "time_limit", "cpus_per_gpu"],
)
def test_a_job_with_this_form_runs_to_its_end(run, form):
    completed(run, form)


def test_mem_per_gpu_is_accepted_and_runs(run):
    """--mem-per-gpu with the GPU request it is relative to: never "Invalid generic
    resource (gres) specification"; its memory is kept per node."""
    completed(run, "mem_per_gpu")


def test_a_typed_gres_runs_only_on_its_type(run):
    completed(run, "typed_gres")
    assert {n.split("-")[0] for n in run.nodes("typed_gres")} == {"p100"}
    # and not where a plain job holds all the memory
    assert "p100-2" not in run.nodes("typed_gres")


def test_a_typed_gpus_request_runs_only_on_its_type(run):
    completed(run, "typed_gpus")
    assert {n.split("-")[0] for n in run.nodes("typed_gpus")} == {"k80"}


def test_a_constraint_and_an_exclude_bind(run):
    completed(run, "constraint")
    assert run.nodes("constraint") == {"v100-2"}


def test_a_nodelist_is_refused_with_the_reason(run):
    assert "nodelist" in run.refused and "nodelist" not in run.ids
    if run.sc.slurm.release != "22.05":  # 22.05 shows "Unspecified error"
        assert "--exclude" in run.refused["nodelist"]


def test_a_dependency_waits_for_the_job_it_names(run):
    completed(run, "dependency")
    assert run.first_start("dependency") >= run.done_at("plain")


def test_a_begin_time_is_kept(run):
    completed(run, "begin")
    assert run.first_start("begin") >= run.submitted["begin"] + 24


def test_a_job_held_at_submit_stays_held_until_its_user_releases_it(run):
    job = run.ids["hold"]
    assert run.states[job] == "PENDING" and not run.sc.segments(job)


def test_each_array_task_is_placed_and_runs_to_its_end(run):
    base = run.ids["array"]
    states = run.sc.states([f"{base}_{i}" for i in range(3)])
    assert set(states.values()) == {"COMPLETED"}, states


def test_no_round_failed(run):
    assert not run.sc.daemon.events("round_failed")
