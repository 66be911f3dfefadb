"""Node states as each supported Slurm release reports them -> what the daemon does.

Records come from captures of the real daemons (tests/backends/data/<release>/),
with their state fields set to each state: 22.05 writes a lower-case base state
plus ``state_flags``, 24.11 and 26.05 (scontrol --json and slurmrestd) a list, base
first. DRAIN, FAIL, DOWN and NOT_RESPONDING are also checked on the live cluster
(tests/integration/test_node_outages.py); REBOOT and POWERED_DOWN only here: the
local cluster has no RebootProgram and no power saving, so Slurm refuses to set them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.from_json import parse_nodes
from slurm_gavel.domain.cluster_model import NodeState

DATA = Path(__file__).parents[1] / "data"

CAPTURES = {
    "22.05": "sinfo.json",
    "24.11": "scontrol-nodes.v0.0.42.json",
    "26.05": "scontrol-nodes.v0.0.45.json",
    "26.05-rest": "rest-v0.0.45-nodes.json",
}

# (base state, flags) as slurmctld reports them -> the daemon's NodeState
CASES = [
    ("IDLE", [], NodeState.UP),
    ("MIXED", ["COMPLETING"], NodeState.UP),
    ("ALLOCATED", [], NodeState.UP),
    # slurmd stopped: NOT_RESPONDING within a ping or a failed RPC, DOWN after
    # SlurmdTimeout (checked on 22.05: "mixed" + state_flags ["NOT_RESPONDING"], then
    # "down" + ["NOT_RESPONDING"])
    ("MIXED", ["NOT_RESPONDING"], NodeState.NOT_RESPONDING),
    ("ALLOCATED", ["NOT_RESPONDING"], NodeState.NOT_RESPONDING),
    ("MIXED", ["DRAIN", "NOT_RESPONDING"], NodeState.NOT_RESPONDING),
    ("DOWN", ["NOT_RESPONDING"], NodeState.DOWN),
    ("DOWN", [], NodeState.DOWN),
    ("UNKNOWN", ["DRAIN", "NOT_RESPONDING"], NodeState.DOWN),  # never registered
    ("IDLE", ["DRAIN"], NodeState.DRAINED),
    ("MIXED", ["DRAIN"], NodeState.DRAINED),
    ("IDLE", ["FAIL"], NodeState.FAILING),
    ("MIXED", ["FAIL"], NodeState.FAILING),
    ("IDLE", ["POWERED_DOWN"], NodeState.POWERED_DOWN),
    ("IDLE", ["POWERING_DOWN"], NodeState.POWERED_DOWN),
    ("DOWN", ["POWERED_DOWN"], NodeState.POWERED_DOWN),
    ("IDLE", ["POWERING_UP"], NodeState.POWERED_DOWN),
    ("MIXED", ["REBOOT_REQUESTED"], NodeState.REBOOTING),
    ("DOWN", ["REBOOT_ISSUED"], NodeState.REBOOTING),
    ("IDLE", ["DRAIN", "REBOOT_REQUESTED"], NodeState.REBOOTING),
]


def record_doc(capture: str, base: str, flags: list[str]) -> dict:
    release = capture.split("-")[0]
    doc = json.loads((DATA / release / CAPTURES[capture]).read_text())
    rec = copy.deepcopy(doc["nodes"][-1])
    if isinstance(rec["state"], str):  # 22.05
        rec["state"], rec["state_flags"] = base.lower(), list(flags)
    else:
        rec["state"] = [base, *flags]
    doc["nodes"] = [rec]
    return doc


@pytest.mark.parametrize("capture", sorted(CAPTURES))
@pytest.mark.parametrize(("base", "flags", "expect"), CASES)
def test_each_state_on_each_release(capture, base, flags, expect):
    _, (node,) = parse_nodes(record_doc(capture, base, flags))
    assert node.condition is expect, (capture, base, flags)


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_slurmd_start_time_is_read_on_every_release(capture):
    doc = record_doc(capture, "IDLE", [])
    rec = doc["nodes"][0]
    if isinstance(rec.get("slurmd_start_time"), dict):
        rec["slurmd_start_time"] = {"set": True, "infinite": False, "number": 1795531932}
    else:
        rec["slurmd_start_time"] = 1795531932
    _, (node,) = parse_nodes(doc)
    assert node.slurmd_start_time == 1795531932


def test_only_up_nodes_take_work():
    from slurm_gavel.domain.cluster_model import Node

    for state in NodeState:
        n = Node("n", "v100", 4, state=state)
        assert n.usable_gpus == (4 if state is NodeState.UP else 0), state
