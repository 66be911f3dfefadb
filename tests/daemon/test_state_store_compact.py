"""The state file is written by json's C encoder (compact): indented, the pure-Python
encoder made each of a round's two saves of 5,000 jobs take about a second
(benchmarks/README.md, "A daemon round on each Slurm release")."""

from __future__ import annotations

import json

from slurm_gavel.daemon.state_store import StateStore


def test_state_is_saved_compact_and_reads_back(tmp_path):
    doc = {"round": 3, "jobs": {str(i): {"v100": i / 3, "name": "é\n"} for i in range(50)}}
    with StateStore(tmp_path / "s") as store:
        store.save(doc)
        loaded = store.load()
        assert loaded is not None and loaded == {"format": loaded["format"], **doc}
    text = (tmp_path / "s" / "state.json").read_text()
    assert "\n" not in text.strip() and ", " not in text and '": ' not in text
    assert json.loads(text)["jobs"]["7"]["v100"] == 7 / 3
