"""Packaging by role: the job library alone, the scheduler's wheel without it.

The wheels are built from a copy of the sources (setuptools' build/ folder keeps stale
files between builds, which would hide a file missing from the package lists).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from running import python_module, run_ok

import slurm_gavel
from slurm_gavel.job import __version__

REPO = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "slurm_gavel", "conf", "workloads", "jobpkg"]

# Run inside the empty venv: import the job library and each of its modules (all but the
# adapters of the optional extras, which need their framework), use it without torch, and
# list every module that came from outside the standard library. A module that needs the
# rest of slurm_gavel fails here (tests/test_layering.py forbids the import itself).
IMPORT_CHECK = r"""
import importlib, os, pkgutil, sys, sysconfig, tempfile
import slurm_gavel.job as job
from pathlib import Path
extras = {"lightning", "submitit"}
modules = sorted(m.name for m in pkgutil.iter_modules(job.__path__))
for name in modules:
    if name not in extras:
        importlib.import_module("slurm_gavel.job." + name)
std = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib")}
third = sorted(
    name for name, m in list(sys.modules.items())
    if getattr(m, "__file__", None)
    and not name.startswith("slurm_gavel")
    and not any(os.path.realpath(m.__file__).startswith(s + os.sep) for s in std)
)
with tempfile.TemporaryDirectory() as d:
    folder = Path(d) / "ck"
    job.save_checkpoint(folder, 3, {"w": [1.0, 2.0]})
    ck = job.load_latest(folder)
print(job.__version__, sys.version_info[:2], ck.step, ck.state, "third:", third)
print("modules:", " ".join(modules))
"""


def _python39() -> str | None:
    """A Python 3.9 to prove the job package's floor, if this machine has one."""
    for cand in [shutil.which("python3.9"), *glob.glob("/root/.pyenv/versions/3.9*/bin/python3.9")]:
        if cand and subprocess.run([cand, "-c", "pass"], capture_output=True).returncode == 0:
            return cand
    return None


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        p = REPO / name
        if p.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info", "*.so", "*.o")
            shutil.copytree(p, src / name, ignore=ignore)
        else:
            shutil.copy2(p, src / name)
    out = tmp_path_factory.mktemp("wheels")
    for project in (src / "jobpkg", src):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "--disable-pip-version-check",
                "-w",
                str(out),
                str(project),
            ],
            check=True,
            capture_output=True,
        )
    return {
        "job": next(out.glob("slurm_gavel_job-*.whl")),
        "main": next(out.glob("slurm_gavel-*.whl")),
    }


def _names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if ".dist-info/" not in n}


# Slow (full tier only: tools/test --help): a wheel into a fresh venv, 15-22 s.
@pytest.mark.slow
def test_job_wheel_alone_in_an_empty_venv_imports_no_third_party_module(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    py = _python39() or sys.executable
    venv = tmp_path / "venv"
    subprocess.run([py, "-m", "venv", str(venv)], check=True, capture_output=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "-q", "--no-index", str(wheels["job"])], check=True)
    listed = subprocess.run([*pip, "list", "--format=freeze"], capture_output=True, text=True)
    installed = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert installed <= {"slurm-gavel-job", "pip", "setuptools"}, installed
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-c", IMPORT_CHECK],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout: the import must come from the venv
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[0] == __version__
    assert "third: []" in run.stdout, run.stdout
    assert "{'w': [1.0, 2.0]}" in run.stdout
    shipped = run.stdout.split("modules:")[1].split()
    assert {"checkpoint", "loop", "progress", "lightning"} <= set(shipped), shipped
    assert "jobtypes" not in shipped  # the admin tool: slurm_gavel.commands.jobtypes
    if py != sys.executable:
        assert "(3, 9)" in run.stdout


def test_job_library_parses_as_python_3_9() -> None:
    import ast

    for path in sorted((REPO / "slurm_gavel" / "job").glob("*.py")):
        ast.parse(path.read_text(), str(path), feature_version=(3, 9))
        if path.name not in ("__init__.py", "_errors.py", "_version.py"):
            # annotations such as `int | None` are strings only with this import
            assert "from __future__ import annotations" in path.read_text(), path


def test_the_two_wheels_own_disjoint_files(wheels: dict[str, Path]) -> None:
    job, main = _names(wheels["job"]), _names(wheels["main"])
    assert not job & main
    assert all(n.startswith("slurm_gavel/job/") for n in job)
    assert "slurm_gavel/job/py.typed" in job
    assert {"slurm_gavel/py.typed", "slurm_gavel/examples/trace.csv"} <= main
    assert "slurm_gavel/reference/workloads/runner.py" in main
    # the development tooling (local cluster, demo) is not shipped
    assert not any(n.startswith("slurm_gavel_dev/") for n in main)
    with zipfile.ZipFile(wheels["main"]) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
        lic = next(n for n in z.namelist() if n.endswith("/LICENSE"))
        assert z.read(lic) == (REPO / "LICENSE").read_bytes()
    assert f"Requires-Dist: slurm-gavel-job=={__version__}" in text
    core = [
        line
        for line in text.splitlines()
        if line.startswith("Requires-Dist") and "extra" not in line
    ]
    for role_only in ("torch", "matplotlib", "cvxpy", "lightning", "submitit"):
        assert not any(role_only in line for line in core), (role_only, core)


def test_package_list_covers_the_source_tree() -> None:
    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    tree = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "slurm_gavel").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert tree - {"slurm_gavel.job"} <= listed, tree - listed


def test_versions_and_licence_agree() -> None:
    main = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    job = tomllib.loads((REPO / "jobpkg" / "pyproject.toml").read_text())["project"]
    assert main["version"] == job["version"] == __version__ == slurm_gavel.__version__
    assert main["license"] == job["license"] == {"text": "Apache-2.0"}
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]
    assert "Version 2.0" in (REPO / "LICENSE").read_text()[:200]
    out = subprocess.run(
        [sys.executable, "-m", "slurm_gavel", "--version"], capture_output=True, text=True
    )
    assert out.stdout.strip() == f"slurm-gavel {__version__}"


@pytest.mark.slow
@pytest.mark.torch
def test_simulate_and_profile_work_from_the_wheels(wheels: dict[str, Path], tmp_path: Path) -> None:
    """No checkout around: the example trace and the workloads come from the wheel."""
    pytest.importorskip("torch")
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(wheels["main"]),
            str(wheels["job"]),
        ],
        check=True,
    )
    # The wheel's copy first on the path (before this checkout's editable install).
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import slurm_gavel.job, slurm_gavel; print(slurm_gavel.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(site))
    sim = run_ok(
        python_module("slurm_gavel", "simulate", "--no-progress", "--policy", "slurm_fifo"),
        env=env,
        cwd=tmp_path,
    )
    assert f"trace: {site}/slurm_gavel/examples/trace.csv" in sim.stdout
    out = str(tmp_path / "t.json")
    profile = ["profile", "--types", "ResNet-18 (batch size 16)", "--seconds", "1", "--tiny"]
    prof = run_ok(
        python_module("slurm_gavel", *profile, "--device", "cpu", "--out", out),
        env=env,
        cwd=tmp_path,
    )
    assert "steps/s" in prof.stdout + prof.stderr
