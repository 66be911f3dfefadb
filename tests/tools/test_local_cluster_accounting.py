"""`tools/local-cluster up --accounting`: its configuration (the daemons themselves run
in tests/integration/test_accounting_on_slurm.py, on every release)."""

from __future__ import annotations

import stat

import pytest

from slurm_gavel_dev import localcluster_accounting as acct
from slurm_gavel_dev.localcluster_conf import ClusterSpec, slurm_conf_text
from slurm_gavel_dev.localcluster_state import STATE_FILE


def test_without_accounting_nothing_changes(tmp_path):
    spec = ClusterSpec(topology="v100:1x2", port_base=20000)
    assert "AccountingStorageType=accounting_storage/none" in slurm_conf_text(spec, tmp_path)
    assert spec.ports() == [20000, 20001]


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_slurm_conf_names_slurmdbd_the_comment_and_the_gpu_tres(tmp_path, release):
    spec = ClusterSpec(topology="v100:1x2,k80:2x1", port_base=20000, accounting=True,
                       slurm=release)  # fmt: skip
    lines = slurm_conf_text(spec, tmp_path).splitlines()
    assert spec.ports() == [20000, 20001, 20002, 20003, 20004, 20005]
    assert (acct.dbd_port(spec), acct.mariadb_port(spec)) == (20004, 20005)
    for needed in (
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        "AccountingStoragePort=20004",
        "AccountingStoreFlags=job_comment",
        "AccountingStorageTRES=gres/gpu,gres/gpu:v100,gres/gpu:k80",
    ):
        assert needed in lines
    assert "AccountingStorageType=accounting_storage/none" not in lines
    # a chroot release's own munged, for the connections to slurmdbd too
    own = f"AccountingStoragePass={tmp_path}/munge/munge.socket"
    assert (own in lines) == (release != "22.05")


def test_slurmdbd_conf_is_private_to_slurm_user(tmp_path):
    spec = ClusterSpec(topology="v100:1x1", port_base=20000, accounting=True)
    (tmp_path / STATE_FILE).write_text("{}")
    acct._write_dbd_conf(spec, tmp_path, "s3cret")
    path = tmp_path / "slurmdbd.conf"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text().splitlines()
    assert "DbdPort=20002" in text and "StoragePort=20003" in text
    assert "StoragePass=s3cret" in text and "StorageHost=127.0.0.1" in text
    acct._write_dbd_conf(spec, tmp_path, "other")  # rewritten, never appended
    assert "StoragePass=other" in path.read_text() and "s3cret" not in path.read_text()
