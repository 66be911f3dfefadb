"""`report --state-dir`: rho is normalised by the cluster's GPUs per type, read from the
nodes the daemon saw, not by what its last round could use (a down node, or an
unmanaged job on a GPU at that moment, made the figure depend on when it ran)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_gavel.cli import main
from slurm_gavel.daemon.status_view import gpus_installed, status_view

SACCT = str(Path(__file__).parents[1] / "data" / "sacct" / "24.11" / "sacct.json")


def _node(name: str, gpu: str, gpus: object, usable: int, state: str = "idle") -> dict:
    return {"name": name, "gpu_type": gpu, "gpus": gpus, "partition": "gpu", "state": state,
            "usable": usable}  # fmt: skip


def _state_dir(tmp_path: Path, nodes: list, capacity: dict) -> Path:
    d = tmp_path / "state"
    d.mkdir()
    doc = {
        "format": "slurm-gavel-state/1",
        "daemon": {"policy": "max_min_fairness"},
        "cluster": {"capacity": capacity, "nodes": nodes},
        "jobs": {},
        "scheduler": {},
    }
    (d / "state.json").write_text(json.dumps(doc))
    return d


def _report(capsys, *args: str) -> dict:
    assert main(["report", "--input", SACCT, "--json", "-", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_nodes_gpus_count_not_what_the_last_round_could_use(tmp_path, capsys):
    # p100 node down and one k80 held by a plain job when the last round ran
    nodes = [_node("a", "v100", 2, 2), _node("b", "p100", 2, 0, "down"), _node("c", "k80", 2, 1)]
    d = _state_dir(tmp_path, nodes, {"v100": 2, "p100": 0, "k80": 1})
    assert _report(capsys, "--state-dir", str(d))["capacity"] == {"v100": 2, "p100": 2, "k80": 2}
    # --capacity still overrides
    got = _report(capsys, "--state-dir", str(d), "--capacity", "v100=8")
    assert got["capacity"] == {"v100": 8}


def test_a_view_without_the_nodes_gpus_falls_back_to_its_capacity(tmp_path, capsys):
    d = _state_dir(tmp_path, [], {"v100": 2, "k80": 1})
    assert _report(capsys, "--state-dir", str(d))["capacity"] == {"v100": 2, "k80": 1}


@pytest.mark.hostile(inputs=6)  # HOSTILE: a state or view file from another version
def test_odd_node_records_are_left_out_not_trusted():
    nodes = [
        _node("a", "v100", 4, 4),
        _node("a", "v100", 4, 4),  # listed twice (two partitions): counted once
        _node("b", "k80", True, 1),  # a bool is not a count
        _node("c", "k80", -3, 0),
        _node("d", "k80", 10**12, 0),
        _node("e", "k80", "4", 0),
        {"name": 5, "gpu_type": "k80", "gpus": 4},
        "not a node",
    ]
    assert gpus_installed(nodes) == {"v100": 4}
    dicts = [n for n in nodes if isinstance(n, dict) and isinstance(n["name"], str)]
    assert status_view({"cluster": {"nodes": dicts}})["gpus_installed"] == {"v100": 4}
