"""A Slurm client configuration that loads no SPANK plugin, for tests that must reach
job_submit.lua with what our plugin would refuse in sbatch itself (the session cluster
loads it in the full suite: tests/spank/conftest.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path


def spank_free_conf(slurm) -> Path:  # type: ignore[no-untyped-def]
    """slurm.conf for a client with an empty plugstack, readable by plain users. In the
    run dir: a chroot release's client sees that folder, not the host's /tmp."""
    client = Path(tempfile.mkdtemp(prefix="client-", dir=slurm.run_dir))
    client.chmod(0o755)
    empty = client / "plugstack.conf"
    empty.write_text("")
    conf = client / "slurm.conf"
    lines = (slurm.run_dir / "slurm.conf").read_text().splitlines()
    conf.write_text(
        "\n".join(
            f"PlugStackConfig={empty}" if line.startswith("PlugStackConfig=") else line
            for line in lines
        )
        + "\n"
    )
    for f in (empty, conf):
        f.chmod(0o644)
    return conf
