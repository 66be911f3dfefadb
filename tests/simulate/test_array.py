"""simulate/array.py: `simulate --submit` splits the runs into array tasks and gathers
the very table and JSON `--workers 1` prints; failures fail the command, whole.

No Slurm here: a fake runs each task by executing the generated batch script in this
process (the real script, its real arguments), in an order of its choosing. The real
cluster's test is tests/integration/test_simulate_array_on_slurm.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import subprocess
from pathlib import Path

import pytest

from slurm_gavel.cli import main
from slurm_gavel.simulate import array
from slurm_gavel.simulate.array import ArrayOptions, RunOutput, check_options

SMALL = ["--generate", "12", "--interarrival", "900", "--no-progress", "--no-wall-time"]
FOUR_RUNS = [
    "simulate", *SMALL, "--row-spread", "0.3",
    "--policy", "max_min_fairness", "--policy", "slurm_fifo",
    "--knowledge", "learned", "--knowledge", "oracle",
]  # fmt: skip


class FakeSlurm:
    """sbatch runs every task at once (the real script, in this process), in `order`;
    tasks in `fail` end FAILED with a line on their stderr, without running."""

    def __init__(self, order: str = "forward", fail: tuple[int, ...] = (), hang: bool = False):
        self.order, self.fail, self.hang = order, fail, hang
        self.submitted: list[list[str]] = []
        self.envs: list[dict[str, str]] = []
        self.cancelled: list[str] = []
        self.states: dict[int, str] = {}

    def submit(self, argv: list[str], env: dict[str, str]) -> str:
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        self.submitted.append(argv)
        self.envs.append(env)
        spec = next(a for a in argv if a.startswith("--array=")).removeprefix("--array=")
        n = int(spec.split("%")[0].split("-")[1]) + 1
        err = next(a for a in argv if a.startswith("--error=")).removeprefix("--error=")
        indices = list(range(n))
        if self.order == "reverse":
            indices.reverse()
        for i in indices:
            if self.hang:
                self.states[i] = "PENDING"
            elif i in self.fail:
                Path(err.replace("%a", str(i))).write_text("Traceback ...\nboom: task died\n")
                self.states[i] = "FAILED"
            else:
                self.states[i] = "COMPLETED" if run_task(Path(argv[-1]), i) == 0 else "FAILED"
        return "4242"

    def task_states(self, job_id: str) -> dict[int, str] | None:
        assert job_id == "4242"
        return dict(self.states)

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


def run_task(script: Path, index: int) -> int:
    """The batch script as Slurm runs it for one task (its stdout is the task's log)."""
    old = os.environ.get("SLURM_ARRAY_TASK_ID")
    os.environ["SLURM_ARRAY_TASK_ID"] = str(index)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        if old is None:
            os.environ.pop("SLURM_ARRAY_TASK_ID")
        else:
            os.environ["SLURM_ARRAY_TASK_ID"] = old
    return 0


@pytest.fixture
def fake(monkeypatch) -> FakeSlurm:
    slurm = FakeSlurm()
    monkeypatch.setattr(array, "SlurmCommands", lambda: slurm)
    return slurm


def _outputs(argv: list[str], tmp_path: Path, capsys, name: str) -> tuple[int, bytes, str, str]:
    path = tmp_path / f"{name}.json"
    code = main([*argv, "--json", str(path)])
    cap = capsys.readouterr()
    return code, (path.read_bytes() if path.exists() else b""), cap.out, cap.err


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_submit_gives_the_table_and_json_of_one_worker_byte_for_byte(
    tmp_path, capsys, monkeypatch, order
):
    slurm = FakeSlurm(order=order)
    monkeypatch.setattr(array, "SlurmCommands", lambda: slurm)
    monkeypatch.chdir(tmp_path)
    trace = ["--trace-job", "3", "--trace-job-out", "{}.jsonl"]
    code, alone, out1, _ = _outputs(
        [*FOUR_RUNS, *trace[:3], "one.jsonl", "--workers", "1"], tmp_path, capsys, "one"
    )
    assert code == 0
    code, arrayed, out2, err = _outputs(
        [*FOUR_RUNS, *trace[:3], "array.jsonl", "--submit", "--submit-dir", "sweeps"],
        tmp_path,
        capsys,
        "array",
    )
    assert code == 0, err
    assert arrayed == alone and out2 == out1
    assert (tmp_path / "array.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert (tmp_path / "one.jsonl").stat().st_size > 0  # the trace lines went through
    summaries = json.loads(arrayed)
    assert len({json.dumps(s, sort_keys=True) for s in summaries}) == 4  # the runs differ
    assert "submitted Slurm job array 4242: 4 task(s)" in err
    # one array of 4 tasks; its folder removed once gathered, the parent left
    assert len(slurm.submitted) == 1 and "--array=0-3" in slurm.submitted[0]
    assert list((tmp_path / "sweeps").iterdir()) == []


def test_submit_sweep_rates_gives_the_same_points(tmp_path, capsys, fake, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["simulate", "--generate", "10", "--sweep-rates", "2,6", "--no-wall-time"]
    argv += ["--policy", "isolated", "--policy", "fifo", "--no-progress"]
    one = _outputs([*argv, "--workers", "1"], tmp_path, capsys, "one")
    arr = _outputs([*argv, "--submit", "--submit-throttle", "2"], tmp_path, capsys, "arr")
    assert one[0] == arr[0] == 0
    assert arr[1:3] == one[1:3]
    assert [(p["rate_jobs_per_hour"], p["policy"]) for p in json.loads(arr[1])] == [
        (2, "isolated"), (2, "fifo"), (6, "isolated"), (6, "fifo"),
    ]  # fmt: skip
    assert "--array=0-3%2" in fake.submitted[0]


def test_a_failed_task_fails_the_command_with_its_id_and_stderr(tmp_path, capsys, monkeypatch):
    slurm = FakeSlurm(fail=(2,))
    monkeypatch.setattr(array, "SlurmCommands", lambda: slurm)
    monkeypatch.chdir(tmp_path)
    code, data, out, err = _outputs(
        [*FOUR_RUNS, "--submit", "--submit-dir", "sw"], tmp_path, capsys, "x"
    )
    assert code == 1
    assert data == b"" and out == ""  # no table, no JSON: never a partial sweep
    folder = next((tmp_path / "sw").iterdir())
    assert f"array task 2 of Slurm job 4242 ended FAILED; its stderr: {folder}/task-2.err" in err
    assert "boom: task died" in err and "incomplete" in err
    assert slurm.cancelled == ["4242"]  # the rest of the array is not left running
    assert (folder / "task.py").exists()  # kept for the post-mortem


def test_a_task_that_wrote_no_result_fails_the_command(tmp_path, capsys, fake, monkeypatch):
    monkeypatch.chdir(tmp_path)
    real = array.write_output

    def lose_run_1(folder, index, out):
        if index != 1:
            real(folder, index, out)

    monkeypatch.setattr(array, "write_output", lose_run_1)
    monkeypatch.setattr(array, "gather", _no_settle(array.gather))
    code, data, out, err = _outputs([*FOUR_RUNS, "--submit"], tmp_path, capsys, "x")
    assert code == 1 and data == b"" and out == ""
    assert "array task 1 of Slurm job 4242 ended COMPLETED without a result" in err


def _no_settle(gather):
    return lambda *a, **k: gather(*a, **{**k, "settle_s": 0.0})


@pytest.mark.hostile(inputs=6)
def test_a_result_of_another_run_or_malformed_is_refused(tmp_path):
    out = RunOutput({"policy": "fifo", "jobs": 3})
    path = tmp_path / "run-0.json"
    path.write_bytes(array.output_bytes(out, 0))
    assert array.read_output(path, 0, "fifo").summary == out.summary
    with pytest.raises(ValueError, match="a run of 'fifo', not of 'las'"):
        array.read_output(path, 0, "las")
    with pytest.raises(ValueError, match="not task 1's result"):
        array.read_output(path, 1, "fifo")
    for timeline in ('{"times": 3}', '{"times": [], "ends": [], "by_type": [1]}', "[]"):
        text = '{"format": 1, "index": 0, "summary": {"policy": "fifo"}, "job_trace": []'
        path.write_text(text + f', "timeline": {timeline}}}')
        with pytest.raises(ValueError, match="no utilisation timeline"):
            array.read_output(path, 0, "fifo")
    path.write_text('{"format": 1, "index": 0, "summary": [1, 2')
    with pytest.raises(ValueError, match="unreadable result"):
        array.read_output(path, 0, "fifo")
    with pytest.raises(array.ArrayError, match="wrote a bad result"):
        array.gather(tmp_path, "7", ["fifo"], {0: "COMPLETED"}, settle_s=0)


def test_the_timeout_cancels_the_array_and_fails(tmp_path, capsys, monkeypatch):
    slurm = FakeSlurm(hang=True)
    monkeypatch.setattr(array, "SlurmCommands", lambda: slurm)
    monkeypatch.chdir(tmp_path)
    argv = [*FOUR_RUNS, "--submit", "--submit-timeout", "0.3"]
    code, data, out, err = _outputs(argv, tmp_path, capsys, "x")
    assert code == 1 and data == b"" and out == ""
    assert "Slurm job 4242: not finished after --submit-timeout 0.3 s; cancelled it" in err
    assert slurm.cancelled == ["4242"]


def test_the_wait_polls_until_every_task_ended():
    seen = [
        None,  # squeue did not answer: ask again
        {0: "RUNNING", 1: "PENDING"},
        {0: "COMPLETED", 1: "COMPLETING"},
        {0: "COMPLETED", 1: "COMPLETED"},
    ]

    class Slow:
        def task_states(self, job_id):
            return seen.pop(0)

    sleeps: list[float] = []
    got = array.wait(Slow(), "1", 2, Path("/x"), ArrayOptions(), sleep=sleeps.append)  # type: ignore[arg-type]
    assert got == {0: "COMPLETED", 1: "COMPLETED"} and len(sleeps) == 3
    assert sleeps == sorted(sleeps)  # backing off


def test_squeue_failing_for_ten_minutes_ends_the_wait(tmp_path):
    now = [0.0]

    class Down:
        def __init__(self) -> None:
            self.cancelled: list[str] = []

        def task_states(self, job_id):
            return None if now[0] > 5 else {0: "RUNNING"}

        def cancel(self, job_id):
            self.cancelled.append(job_id)

    def sleep(s: float) -> None:
        now[0] += s

    slurm = Down()
    with pytest.raises(array.ArrayError, match="squeue has not answered about Slurm job 8"):
        array.wait(slurm, "8", 1, tmp_path, ArrayOptions(), clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    assert 600 < now[0] < 620 and slurm.cancelled == ["8"]


def test_a_job_gone_from_the_queue_ends_the_wait():
    class Gone:
        def task_states(self, job_id):
            return {}

    assert array.wait(Gone(), "1", 2, Path("/x"), ArrayOptions(), sleep=lambda _: None) == {}  # type: ignore[arg-type]


def test_a_task_cancelled_while_pending_fails_the_wait_at_once(tmp_path):
    # Slurm drops a pending task it cancels from the listing: task 1 never shows.
    class Dropped:
        def __init__(self) -> None:
            self.cancelled: list[str] = []

        def task_states(self, job_id):
            return {0: "RUNNING", 2: "PENDING"}

        def cancel(self, job_id):
            self.cancelled.append(job_id)

    slurm = Dropped()
    with pytest.raises(array.ArrayError, match="array task 1 of Slurm job 5 left the queue"):
        array.wait(slurm, "5", 3, tmp_path, ArrayOptions(), sleep=lambda _: None)  # type: ignore[arg-type]
    assert slurm.cancelled == ["5"]


def test_a_pending_task_without_result_is_not_waited_for(tmp_path):
    def no_sleep(_s):
        raise AssertionError("waited for a task that never ran")

    with pytest.raises(array.ArrayError, match=r"task 0 .* without running"):
        array.gather(tmp_path, "5", ["fifo"], {0: "PENDING"}, sleep=no_sleep)


def test_squeue_lines_are_read_per_task():
    text = "77_0 COMPLETED\n77_1 RUNNING\n77_[2-3%1] PENDING\n78_0 FAILED\nodd line here\n"
    assert array.parse_states(text, "77") == {0: "COMPLETED", 1: "RUNNING"}


@pytest.mark.hostile
def test_sbatch_gets_an_argument_list_and_no_gavel_comment(tmp_path, capsys, fake, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SBATCH_COMMENT", "gavel:type=A3C")  # a user's default comment
    argv = [*FOUR_RUNS, "--submit", "--submit-partition", "gpu,debug", "--submit-account"]
    argv += ["lab-1", "--submit-qos", "normal", "--submit-time", "0-00:10", "--submit-throttle"]
    code, *_ = _outputs([*argv, "3"], tmp_path, capsys, "x")
    assert code == 0
    sb = fake.submitted[0]
    assert sb[:3] == ["sbatch", "--parsable", "--array=0-3%3"]
    for opt in ("--partition=gpu,debug", "--account=lab-1", "--qos=normal", "--time=0-00:10"):
        assert opt in sb
    assert not any(a.startswith("--comment") for a in sb)
    assert "SBATCH_COMMENT" not in fake.envs[0]
    assert fake.envs[0].get("PATH") == os.environ.get("PATH")  # the rest is inherited


def test_the_real_client_runs_argument_lists_without_a_shell(monkeypatch, tmp_path):
    calls: list[tuple[list[str], dict]] = []

    def fake_run(argv, **kw):
        calls.append((argv, kw))
        out = {"sbatch": "991;cluster\n", "squeue": "991_0 COMPLETED\n", "scancel": ""}
        return subprocess.CompletedProcess(argv, 0, out[argv[0]], "")

    monkeypatch.setattr(array.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(array.subprocess, "run", fake_run)
    slurm = array.SlurmCommands()
    assert slurm.submit(["sbatch", "x"], {"A": "1"}) == "991"
    assert slurm.task_states("991") == {0: "COMPLETED"}
    slurm.cancel("991")
    assert [c[0][0] for c in calls] == ["sbatch", "squeue", "scancel"]
    assert all(isinstance(c[0], list) and not c[1].get("shell") for c in calls)
    assert calls[0][1]["env"] == {"A": "1"}


def test_sbatch_refusing_the_array_says_why(monkeypatch, tmp_path):
    def refuse(argv, **kw):
        msg = "sbatch: error: invalid partition specified: nope\n"
        return subprocess.CompletedProcess(argv, 1, "", msg)

    monkeypatch.setattr(array.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(array.subprocess, "run", refuse)
    with pytest.raises(array.InputError, match=r"sbatch refused the array: .*invalid partition"):
        array.SlurmCommands().submit(["sbatch", "x"], {})
    with pytest.raises(array.InputError, match="sbatch refused"):
        array.run_array(["--generate", "3"], ["fifo"], check_options(ArrayOptions(tmp_path)))
    assert list(tmp_path.iterdir()) == []  # nothing ran: its folder is not left behind


def test_no_sbatch_on_path_is_said_plainly(monkeypatch):
    monkeypatch.setattr(array.shutil, "which", lambda name: None)
    with pytest.raises(array.InputError, match="needs Slurm's sbatch on PATH"):
        array.SlurmCommands().submit(["sbatch", "x"], {})


HOSTILE = [
    (["--submit-partition", "gpu; rm -rf ~"], "--submit-partition 'gpu; rm -rf ~'"),
    (["--submit-partition", "gpu debug"], "no spaces"),
    (["--submit-partition", "gpu,"], "comma-separated"),
    (["--submit-account", "$(id)"], "a Slurm name is letters"),
    (["--submit-qos", "a\nb"], "a Slurm name is letters"),
    (["--submit-time", "10; scancel -u x"], "Slurm's time format"),
    (["--submit-time", "1:2:3:4"], "Slurm's time format"),
    (["--submit-throttle", "0"], "at least 1 task"),
    (["--submit-timeout", "nan"], "seconds > 0"),
    (["--submit-timeout", "-5"], "seconds > 0"),
    (["--submit-dir", "runs\nx"], "control characters"),
    (["--submit-dir", "runs%j"], "Slurm reads '%'"),
    (["--submit-dir", "a\\b"], "Slurm reads '%'"),
    (["--submit-python", "python3"], "absolute path"),
    (["--submit-python", "/opt/my python/bin/python"], "without spaces"),
    (["--submit-python", "/opt/py\n#!/bin/sh"], "control characters"),
    (["--submit-python", "/" + "p" * 300], "too long for a #! line"),
    (["--workers", "2"], "leave out --workers"),
]


@pytest.mark.hostile
@pytest.mark.parametrize(("extra", "said"), HOSTILE)
def test_hostile_submit_values_are_refused_before_sbatch(
    extra, said, tmp_path, capsys, fake, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code = main([*FOUR_RUNS, "--submit", *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert said in err
    assert fake.submitted == []  # nothing reached Slurm
    assert not (tmp_path / "x.json").exists()


@pytest.mark.hostile
def test_a_working_directory_slurm_would_misread_needs_a_submit_dir(
    tmp_path, capsys, fake, monkeypatch
):
    odd = tmp_path / "runs%j"
    odd.mkdir()
    monkeypatch.chdir(odd)
    assert main([*FOUR_RUNS, "--submit"]) == 2
    assert "Slurm reads '%'" in capsys.readouterr().err and fake.submitted == []
    assert main([*FOUR_RUNS, "--submit", "--submit-dir", str(tmp_path / "ok")]) == 0
    assert len(fake.submitted) == 1


@pytest.mark.hostile(inputs=3)
def test_hostile_paths_are_literals_in_the_script(tmp_path):
    # A working directory or argument with quotes, newlines and shell text is a string
    # of the script, never code: the script compiles and holds it unchanged.
    cwd = str(tmp_path / "we'ird\"\n$(touch pwned);")
    argv = ["--trace", "a\nb'; import os; os.system('x') #"]
    text = array.task_script("/usr/bin/python3", cwd, argv, tmp_path / "f\nx")
    code = compile(text, "task.py", "exec")
    assert text.startswith("#!/usr/bin/python3\n")
    assert cwd in code.co_consts and str(tmp_path / "f\nx") in code.co_consts
    assert repr(argv) in text
    assert text.count("\nos.system") == 0


def test_the_default_interpreter_is_the_running_one_by_its_path(monkeypatch):
    monkeypatch.setattr("sys.executable", "/venvs/sim/bin/python")
    assert check_options(ArrayOptions()).python == "/venvs/sim/bin/python"
    assert check_options(ArrayOptions(python="/opt/py/bin/python3")).python == (
        "/opt/py/bin/python3"
    )


@pytest.mark.parametrize("index", ["4", "-1", "x"])
def test_a_task_index_outside_the_runs_is_refused(index, tmp_path, capsys):
    code = main([*FOUR_RUNS, "--submit-task", str(tmp_path), index])
    assert code == 2
    assert "this command has runs 0..3" in capsys.readouterr().err


def test_a_task_writes_its_result_and_nothing_of_the_submitters(tmp_path, capsys):
    saved = tmp_path / "saved.csv"
    argv = [*FOUR_RUNS, "--save-trace", str(saved), "--json", str(tmp_path / "o.json")]
    assert main([*argv, "--submit-task", str(tmp_path), "2"]) == 0
    assert capsys.readouterr().out == ""
    assert [p.name for p in tmp_path.iterdir()] == ["run-2.json"]
    out = array.read_output(tmp_path / "run-2.json", 2, "slurm_fifo")
    assert out.summary["knowledge"]["mode"] == "learned"


def test_an_interrupted_wait_cancels_the_array(tmp_path, monkeypatch):
    slurm = FakeSlurm(hang=True)

    def interrupted(job_id):
        raise KeyboardInterrupt

    monkeypatch.setattr(slurm, "task_states", interrupted)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        array.run_array(FOUR_RUNS[1:], ["a", "b"], check_options(ArrayOptions()), slurm)
    assert slurm.cancelled == ["4242"]  # nothing left running for a command gone


def test_submit_plots_the_same_data_as_one_worker(tmp_path, capsys, fake, monkeypatch):
    # --plot draws from each run's utilisation timeline: gathered from the tasks, its
    # CSVs are the runs' own.
    monkeypatch.chdir(tmp_path)
    argv = ["simulate", *SMALL, "--policy", "max_min_fairness", "--policy", "fifo"]
    assert main([*argv, "--plot", "one"]) == 0
    assert main([*argv, "--plot", "arr", "--submit"]) == 0
    capsys.readouterr()
    csvs = sorted(p.name for p in (tmp_path / "one").glob("*.csv"))
    assert "utilisation_fifo.csv" in csvs
    for name in csvs:
        assert (tmp_path / "arr" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
