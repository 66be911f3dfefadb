"""`simulate --submit` on a real slurmctld of each release: the runs go out as one job
array, run on the cluster's nodes, and come back as the table and JSON `--workers 1`
prints, byte for byte; a failing task fails the command, whole; sbatch's refusal is
said. The array is an ordinary job: no gavel comment (not even from a user's
SBATCH_COMMENT), no SPANK plugin needed (the test cluster loads none).

The tasks run this interpreter, as a centre's nodes run one installed on a shared
path. The 24.11 and 26.05 clusters run jobs inside a chroot, which sees /tmp and the
repository only: the test binds this interpreter's install and its venv into the
cluster's view of the chroot (read only), as a centre mounts its software tree.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_gavel.cli import main
from slurm_gavel.simulate import array
from slurm_gavel_dev import localcluster_chroot as chroot

pytestmark = pytest.mark.slurm

RUNS = [
    "simulate", "--generate", "8", "--interarrival", "900", "--row-spread", "0.3",
    "--no-wall-time", "--no-progress",
    "--policy", "max_min_fairness", "--policy", "slurm_fifo",
    "--knowledge", "learned", "--knowledge", "oracle",
]  # fmt: skip


# Never bound over the chroot's own: its Slurm, libraries and python3 live there.
SYSTEM = {Path("/"), Path("/usr"), Path("/usr/local"), Path("/opt")}


def _interpreter_paths(run_dir: Path) -> list[Path]:
    """What this interpreter needs that the chroot does not see already: its venv
    (pyvenv.cfg), its install (a prefix of its own, e.g. pyenv's, whole: libpython
    too), or for the system's interpreter its executable and import paths alone;
    and every import path outside those (PYTHONPATH, an editable install)."""
    base = Path(sys.base_prefix).resolve()
    want = [Path(sys.prefix).resolve()]
    want += [Path(sys.executable).resolve()] if base in SYSTEM else [base]
    want += [Path(p).resolve() for p in sys.path if p and Path(p).is_dir()]
    seen = [b for b, _ in chroot.binds(run_dir)]
    out: list[Path] = []
    for path in sorted(set(want), key=lambda p: len(p.parts)):
        if path in SYSTEM or any(q == path or q in path.parents for q in seen + out):
            continue
        out.append(path)
    return out


@pytest.fixture
def cluster(slurm, monkeypatch, tmp_path) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """The cluster, this process's Slurm commands pointed at it, the working directory a
    fresh one, and (in a chroot) this interpreter visible to the jobs."""
    for k, v in slurm.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    mounted: list[Path] = []
    made: list[Path] = []  # mount points made in the chroot (shared by its clusters)
    if chroot.release(slurm.release).in_chroot:
        view = (slurm.run_dir / "root").resolve()
        for path in _interpreter_paths(slurm.run_dir):
            inside = view / path.relative_to("/")
            made += [p for p in [inside, *inside.parents] if not p.exists()]
            if path.is_dir():
                inside.mkdir(parents=True, exist_ok=True)
                # files: the chroot's own; bare folders: mount points made before
                shadowed = any(not f.is_dir() for f in inside.rglob("*"))
            else:
                inside.parent.mkdir(parents=True, exist_ok=True)
                inside.touch()
                shadowed = inside.stat().st_size > 0
            if shadowed:  # the chroot's own (its python3's packages): never bound over
                continue
            subprocess.run(["mount", "--bind", str(path), str(inside)], check=True)
            mounted.append(inside)
            subprocess.run(["mount", "-o", "remount,bind,ro", str(inside)], check=True)
    try:
        yield slurm
    finally:
        for inside in reversed(mounted):
            subprocess.run(["umount", str(inside)], check=False)
        # The chroot as found: the empty mount points go (one another cluster of the
        # release has mounted on stays: busy).
        for point in sorted(made, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                if point.is_dir():
                    point.rmdir()
                elif point.stat().st_size == 0:
                    point.unlink()


def _run(argv: list[str], out: Path, capsys) -> tuple[int, bytes, str, str]:  # type: ignore[no-untyped-def]
    code = main([*argv, "--json", str(out)])
    cap = capsys.readouterr()
    return code, (out.read_bytes() if out.exists() else b""), cap.out, cap.err


def test_an_array_gives_the_output_of_one_worker_byte_for_byte(
    cluster, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("SBATCH_COMMENT", "gavel:type=A3C")  # a user's default comment
    code, alone, out1, err = _run([*RUNS, "--workers", "1"], tmp_path / "one.json", capsys)
    assert code == 0, err
    argv = [*RUNS, "--submit", "--submit-dir", str(tmp_path / "sweeps")]
    argv += ["--submit-throttle", "3", "--submit-time", "5", "--submit-timeout", "240"]
    code, arrayed, out2, err = _run(argv, tmp_path / "array.json", capsys)
    assert code == 0, err
    assert arrayed == alone and out2 == out1
    assert len(json.loads(arrayed)) == 4
    job = re.search(r"submitted Slurm job array (\d+): 4 task\(s\)", err)
    assert job, err
    # an ordinary job: no gavel comment, so no daemon would take it for a managed one
    info = cluster.cmd("scontrol", "show", "job", "--oneliner", job.group(1), check=False)
    comments = re.findall(r"\bComment=(\S*)", info.stdout)
    assert not any(c.startswith("gavel:") for c in comments), info.stdout
    assert list((tmp_path / "sweeps").iterdir()) == []  # gathered, then cleaned


def test_a_failing_task_fails_the_command_with_its_id_and_stderr(cluster, tmp_path, capsys):
    # Every task's interpreter is /bin/false: each task exits 1 (FAILED).
    argv = [*RUNS, "--submit", "--submit-python", "/bin/false", "--submit-timeout", "120"]
    code, data, out, err = _run(argv, tmp_path / "x.json", capsys)
    assert code == 1, err
    assert data == b"" and out == ""  # no table, no JSON
    found = re.search(r"array task (\d) of Slurm job (\d+) ended FAILED; its stderr: (\S+)", err)
    assert found, err
    folder = next(tmp_path.glob("slurm-gavel-sweep-*"))
    assert found.group(3) == f"{folder}/task-{found.group(1)}.err"
    assert (folder / "task.py").exists()  # kept for the post-mortem
    # the rest of the array is not left to run
    left = cluster.cmd("squeue", "--noheader", f"--jobs={found.group(2)}", check=False)
    assert not re.search(r"\b(PD|R)\b", left.stdout), left.stdout


def test_sbatch_refusing_the_array_is_said(cluster, tmp_path, capsys):
    argv = [*RUNS, "--submit", "--submit-partition", "no_such_partition"]
    code, data, out, err = _run(argv, tmp_path / "x.json", capsys)
    assert code == 2 and data == b"" and out == ""
    assert "sbatch refused the array:" in err and "artition" in err, err
    assert list(tmp_path.glob("slurm-gavel-sweep-*")) == []  # nothing ran, nothing kept


class _HeldArray:
    """The real sbatch with --hold added, then `then(job_id)`: a test's way to act on
    the array before any task can start (the scheduler starts one within 0.1 s)."""

    def __init__(self, then) -> None:  # type: ignore[no-untyped-def]
        self.real = array.SlurmCommands()
        self.then = then
        self.task_states = self.real.task_states
        self.cancel = self.real.cancel

    def submit(self, argv: list[str], env: dict[str, str]) -> str:
        job_id = self.real.submit([argv[0], "--hold", *argv[1:]], env)
        self.then(job_id)
        return job_id


def test_a_cancelled_task_fails_the_command(cluster, tmp_path, capsys, monkeypatch):
    def cancel_task_1_release_the_rest(job_id: str) -> None:
        cluster.cmd("scancel", f"{job_id}_1")
        cluster.cmd("scontrol", "release", job_id)

    held = _HeldArray(cancel_task_1_release_the_rest)
    monkeypatch.setattr(array, "SlurmCommands", lambda: held)
    code, data, out, err = _run([*RUNS, "--submit"], tmp_path / "x.json", capsys)
    assert code == 1 and data == b"" and out == ""
    # Slurm drops a task cancelled while pending from squeue at once
    said = r"array task 1 of Slurm job \d+ left the queue without running .*; its stderr: "
    assert re.search(said, err), err


def test_the_timeout_cancels_the_array(cluster, tmp_path, capsys, monkeypatch):
    ids: list[str] = []
    held = _HeldArray(ids.append)  # held, never released: it cannot finish
    monkeypatch.setattr(array, "SlurmCommands", lambda: held)
    argv = [*RUNS, "--submit", "--submit-timeout", "2"]
    code, data, out, err = _run(argv, tmp_path / "x.json", capsys)
    assert code == 1 and data == b"" and out == ""
    assert f"Slurm job {ids[0]}: not finished after --submit-timeout 2 s; cancelled it" in err
    assert cluster.wait_state(f"{ids[0]}_0", "CANCELLED", "GONE", timeout=30)
