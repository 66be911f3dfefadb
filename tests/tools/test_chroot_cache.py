"""The chroot cache of the newer Slurm releases (slurm_gavel_dev/localcluster_chroot.py):
only a build that completed counts; a killed or failed one is never taken for good.

mmdebstrap is replaced by a script on PATH (no network, no Slurm): these tests are
about the cache's bookkeeping, the real builds run in tools/setup and the Slurm tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_gavel_dev import localcluster_chroot as chroot
from slurm_gavel_dev.localcluster_conf import ClusterError

REL = chroot.release("24.11")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(chroot, "CACHE", tmp_path / "cache")
    if os.geteuid() != 0:
        pytest.skip("only root builds chroots")
    return tmp_path / "cache"


def _fake_mmdebstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """An `mmdebstrap` on PATH; it logs its calls. Its last argument but one is the target."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    script = bin_dir / "mmdebstrap"
    script.write_text(
        f'#!/bin/sh\necho "$@" >> {log}\ntarget=$(eval echo \\${{$(($#-1))}})\n{body}\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


def test_a_finished_build_is_used_without_building(cache, tmp_path, monkeypatch):
    root = cache / "24.11"
    root.mkdir(parents=True)
    (root / chroot.MARKER).write_text("24.11.5\n")
    log = _fake_mmdebstrap(tmp_path, monkeypatch, "exit 1")
    assert chroot.ensure_chroot(REL) == root
    assert not log.exists()


def test_a_killed_build_is_thrown_away_and_a_failed_one_leaves_nothing(
    cache, tmp_path, monkeypatch
):
    # What a build killed half-way leaves: its temp folder, and (older code, or a
    # hand copy) a tree without the marker.
    (cache / ".24.11.build-99999" / "usr").mkdir(parents=True)
    (cache / "24.11" / "usr" / "sbin").mkdir(parents=True)
    (cache / "24.11" / "usr" / "sbin" / "slurmctld").touch()
    log = _fake_mmdebstrap(tmp_path, monkeypatch, 'mkdir -p "$target/usr"; exit 3')
    with pytest.raises(ClusterError, match=r"mmdebstrap trixie failed \(3\)"):
        chroot.ensure_chroot(REL)
    assert "trixie" in log.read_text()  # it did try to build
    assert sorted(p.name for p in cache.iterdir()) == [".24.11.lock"]


def test_a_tree_without_the_right_slurm_is_not_kept(cache, tmp_path, monkeypatch):
    # mmdebstrap "succeeds" but the tree has no Slurm 24.11 in it.
    _fake_mmdebstrap(tmp_path, monkeypatch, 'mkdir -p "$target/usr/sbin"; exit 0')
    with pytest.raises(ClusterError, match=r"has Slurm \?, not 24\.11"):
        chroot.ensure_chroot(REL)
    assert sorted(p.name for p in cache.iterdir()) == [".24.11.lock"]


def test_sid_ignores_only_the_expiry_of_the_mirror_index(cache, tmp_path, monkeypatch):
    log = _fake_mmdebstrap(tmp_path, monkeypatch, "exit 1")
    with pytest.raises(ClusterError):
        chroot.ensure_chroot(chroot.release("26.05"))
    call = log.read_text()
    assert '--aptopt=Acquire::Check-Valid-Until "false"' in call and " sid " in call
    with pytest.raises(ClusterError):
        chroot.ensure_chroot(REL)
    assert "Check-Valid-Until" not in log.read_text().splitlines()[-1]
