"""The shipped gavel-osdi2020-h200.json: Gavel's table plus an h200 column,
measured cells from the H200 profile records with the device and date, every other
cell an estimate, Gavel's columns as they were; the default table unchanged."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_gavel.core.cluster_rows import ESTIMATED, cluster_rows
from slurm_gavel.core.estimate import is_estimate
from slurm_gavel.domain.throughputs import H200_TABLE, load_table, shipped_tables

DATA = Path(__file__).resolve().parents[2] / "slurm_gavel" / "data"
RECORDS = DATA / "measurements" / "h200"
TABLE = load_table(H200_TABLE)


def _alone() -> dict[str, float]:
    doc = json.loads((RECORDS / "profile-alone.json").read_text())
    assert doc["setup"]["device_name"] == "NVIDIA H200"
    return {m["job_type"]: m["steps_per_s"] for m in doc["measurements"] if m["partner"] is None}


def test_measured_cells_are_the_profiles_with_device_and_date():
    measured = _alone()
    assert len(measured) == 7
    for job_type, rate in measured.items():
        assert TABLE.throughput(job_type, 1, "h200") == rate
        note = TABLE.note(job_type, 1, "h200")
        assert note is not None and "NVIDIA H200" in note and "2026-11-27" in note
        assert not is_estimate(TABLE, job_type, 1, "h200")
    assert "h200: slurm-gavel profile on NVIDIA H200, 2026-11-27" in TABLE.source


def test_every_other_cell_of_the_column_is_an_estimate():
    measured = _alone()
    for (job_type, sf), row in TABLE.alone.items():
        assert row["h200"] > 0, (job_type, sf)
        if not (sf == 1 and job_type in measured):
            assert is_estimate(TABLE, job_type, sf, "h200"), (job_type, sf)
    # multi-GPU cells scale the H200's own single-GPU figure as the job scales elsewhere
    r18 = "ResNet-18 (batch size 16)"
    assert TABLE.throughput(r18, 2, "h200") > TABLE.throughput(r18, 1, "h200")


def test_measured_pairs_on_one_h200():
    doc = json.loads((RECORDS / "profile-pairs.json").read_text())
    pairs = [m for m in doc["measurements"] if m["partner"] is not None]
    assert len(pairs) == 6
    for m in pairs:
        got = TABLE.pair(m["job_type"], m["partner"], 1, "h200")
        want = (m["steps_per_s"], m["partner_steps_per_s"])
        if m["job_type"] == m["partner"]:  # two jobs of one type: either is "a"
            got, want = sorted(got or ()), sorted(want)
        assert got == want
        assert not TABLE.pair_is_estimate(m["job_type"], m["partner"], 1, "h200")


def test_loaded_by_name_and_the_default_stays_gavels(tmp_path, monkeypatch):
    assert H200_TABLE in shipped_tables() and "gavel-osdi2020.json" in shipped_tables()
    default = load_table()
    assert default.gpu_types == ["k80", "p100", "v100"] and not default.notes
    for key, row in default.alone.items():
        assert {t: v for t, v in TABLE.alone[key].items() if t != "h200"} == row
    assert TABLE.unconsolidated == default.unconsolidated
    # a file of that name in the current folder wins over the shipped one
    monkeypatch.chdir(tmp_path)
    (tmp_path / H200_TABLE).write_text(json.dumps(default.to_json()))
    assert load_table(H200_TABLE).gpu_types == default.gpu_types


def test_gavels_columns_and_their_clusters_are_untouched():
    # no note on v100/p100/k80 (Gavel published them all), and a cluster of those
    # three still uses the table's own rows with nothing marked
    for key in TABLE.notes:
        assert key.rsplit("|", 1)[-1] == "h200", key
    rows = cluster_rows(TABLE, ["v100", "p100", "k80"])
    assert rows.complete and rows.marked_cells([(jt, sf) for jt, sf in TABLE.alone]) == ()


def test_a_cluster_with_h200s_marks_the_estimated_cells():
    rows = cluster_rows(TABLE, ["v100", "h200"])
    assert rows.marks("ResNet-50 (batch size 16)", 1) == {}
    assert rows.marks("ResNet-50 (batch size 64)", 1) == {"h200": ESTIMATED}


def test_the_shipped_column_is_what_the_builder_builds(tmp_path):
    script = DATA / "measurements" / "add_column.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # and it removes exactly the column it adds (idempotent from any earlier build)
    mod = runpy.run_path(str(script))
    bare = mod["without_column"](TABLE, "h200")
    assert "h200" not in bare.gpu_types and not bare.notes
    assert mod["build"](bare).to_json() == TABLE.to_json()
    assert bare.to_json() == load_table().to_json()


@pytest.mark.parametrize("job_type", ["A3C", "CycleGAN"])
def test_single_gpu_only_types_stay_single_gpu(job_type):
    assert TABLE.scale_factors(job_type) == [1]
