"""docs/frameworks/: the pages show the example files verbatim, and the examples run.

The signal -> held -> released -> resumed path of each framework is tested by
test_ranks_on_slurm.py, test_lightning_on_slurm.py and test_submitit_on_slurm.py; here
the pages' own scripts run to completion on the local cluster (unmanaged: the test
overrides the comment, as no daemon releases held jobs here).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = REPO / "docs" / "frameworks"
EXAMPLES = PAGES / "examples"
SHOWN = re.compile(r"<!-- file: examples/(\S+) -->\n```\w*\n(.*?)```\n", re.S)


def test_every_example_is_shown_verbatim_on_a_page() -> None:
    shown: dict[str, str] = {}
    for page in sorted(PAGES.glob("*.md")):
        for name, text in SHOWN.findall(page.read_text()):
            shown[name] = text
    assert set(shown) == {p.name for p in EXAMPLES.iterdir() if p.suffix in (".py", ".sbatch")}
    for name, text in shown.items():
        assert text == (EXAMPLES / name).read_text(), f"{name} differs from its page"
    assert {p.stem for p in PAGES.glob("*.md")} >= {"plain", "lightning", "submitit", "torchrun"}


def test_examples_parse() -> None:
    for p in EXAMPLES.iterdir():
        if p.suffix == ".sbatch":
            subprocess.run(["bash", "-n", str(p)], check=True)
            assert "#SBATCH --requeue" in p.read_text()
        elif p.suffix == ".py":
            compile(p.read_text(), str(p), "exec")


@pytest.mark.slurm
@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize(
    "script", ["plain.sbatch", "lightning.sbatch", "ddp.sbatch", "fsdp.sbatch"]
)
def test_example_runs_on_the_local_cluster(slurm, tmp_path, script: str) -> None:  # type: ignore[no-untyped-def]
    if script == "lightning.sbatch":
        pytest.importorskip("lightning")
    work = tmp_path / "w"
    shutil.copytree(EXAMPLES, work)
    work.chmod(0o700)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    job = slurm.sbatch(
        "-p", "gpu", "--comment=example", "--chdir", str(work),
        f"--export=ALL,PATH={path},GAVEL_TOTAL_STEPS=50,MASTER_ADDR=127.0.0.1,"
        f"MASTER_PORT={port}",
        str(work / script),
    )  # fmt: skip
    slurm.wait_state(job, "COMPLETED", timeout=300)
    (log,) = work.glob(f"gavel-*-{job}.out")
    assert "Traceback" not in log.read_text(), log.read_text()
