"""sacct's JSON values read through the backends' readers (backends/slurm/fields.py:
number, state_list, the GRES/TRES reader) against sacct.py's own readers they replaced,
kept below verbatim as they were (commit 896bad6): identical on every value of the
captured output of each release (tests/data/sacct/) and on the shapes sacct writes;
the values no sacct writes where the two differ are listed (DIFFERS_ON_PURPOSE)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from slurm_gavel.accounting.sacct import _epoch, _json_gpus, _number, _state, parse_json

DATA = Path(__file__).parents[1] / "data" / "sacct"


# --- the old readers, verbatim --------------------------------------------------------


def old_number(value: Any) -> float | None:
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def old_epoch(value: Any) -> float | None:
    n = old_number(value)
    return n if n is not None and n > 0 else None


def old_state(value: Any) -> str:
    if isinstance(value, Mapping):
        value = value.get("current")
    if isinstance(value, list):
        value = "REQUEUED" if "REQUEUED" in value[1:] else (value[0] if value else "")
    return (value if isinstance(value, str) else "").split(" ")[0]


def old_json_gpus(tres: list[Mapping[str, Any]]) -> tuple[dict[str, int], int]:  # sacct JSON
    typed: dict[str, int] = {}
    total = 0
    for item in tres:
        if item.get("type") != "gres":
            continue
        name = item.get("name") if isinstance(item.get("name"), str) else ""
        count = item.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            continue
        if name == "gpu":
            total = count
        elif name.startswith("gpu:"):
            typed[name[4:]] = typed.get(name[4:], 0) + count
    return typed, max(total, sum(typed.values()))


def test_json_tres_names_read_as_before():
    def gres(name: str | None, count: int, kind: str = "gres") -> dict[str, Any]:
        return {"type": kind, "name": name, "count": count}

    cases = [
        [gres("gpu", 2), gres("gpu:v100", 2)],
        [gres("gpu:v100", 1), gres("gpu:v100", 1)],
        [gres("gpu:k80", 0), gres("gpu", -2)],
        [gres("shard", 4), gres("gpumem", 9)],
        [gres("gpu", 4, "cpu"), gres(None, 1)],
        [gres("gpu", 1), gres("gpu", 3)],
        [gres("gpu:v100", 1)],
        [],
    ]
    for tres in cases:
        assert _json_gpus(tres) == old_json_gpus(tres), tres
    for path in sorted(DATA.rglob("sacct.json")):
        for job in json.loads(path.read_text())["jobs"]:
            tres = job["tres"]["allocated"]
            want = old_json_gpus([t for t in tres if isinstance(t.get("count"), int)])
            assert _json_gpus(tres) == want
    # names no sacct writes: an empty or ':'-holding type is no type
    assert old_json_gpus([{"type": "gres", "name": "gpu:", "count": 1}]) == ({"": 1}, 1)
    assert _json_gpus([{"type": "gres", "name": "gpu:", "count": 1}]) == ({}, 0)


NUMBERS = [
    0, 1, 1764024336, -2, None, {"set": True, "infinite": False, "number": 100},
    {"set": False, "infinite": False, "number": 0}, {"set": True, "infinite": True, "number": 0},
    {"set": False, "infinite": False, "number": 7}, {"number": 5},
]  # fmt: skip
STATES = [
    "COMPLETED", "REQUEUED", "CANCELLED by 1000", "", None, 5, ["COMPLETED"],
    ["PENDING", "REQUEUED"], ["FAILED"], [], {"current": ["PENDING", "REQUEUED"]},
    {"current": "TIMEOUT"}, {"current": None}, {"current": []}, ["REQUEUED"],
]  # fmt: skip
# Values no sacct writes, where fields.number/state_list read otherwise: (reader, value,
# old, new). Times, counts and IDs are integers on every release; states upper case.
DIFFERS_ON_PURPOSE = [
    ("number", 1.5, 1.5, 1),  # fields.number truncates a float
    ("number", "100", None, 100),  # and reads a digit string (24.11's meta.slurm.version)
    ("number", {"set": True, "number": None}, None, 0),
    ("number", {}, None, 0),  # an object without a number: fields.number's unset
    ("state", "PENDING+REQUEUED", "PENDING+REQUEUED", "REQUEUED"),  # 22.05's '+' flags
    ("state", "completed", "completed", "COMPLETED"),
    ("state", ["COMPLETED", 5], "COMPLETED", ""),
]


def _all_values(key: str) -> list[Any]:
    out = []
    for path in sorted(DATA.rglob("sacct.json")):
        for job in json.loads(path.read_text())["jobs"]:
            if key == "state":
                out.append(job["state"])
            elif key == "job_id":
                out.append(job["job_id"])
            else:
                out.extend(job["time"].values())
                out.extend(t.get("count") for t in job["tres"]["allocated"])
    return out


@pytest.mark.hostile(inputs=len(NUMBERS) + len(STATES))
def test_numbers_and_states_read_as_before():
    for value in [*NUMBERS, *_all_values("numbers"), *_all_values("job_id")]:
        if isinstance(value, Mapping) and "number" not in value:
            continue  # time.system/user/total: {seconds, microseconds}, not read here
        assert _number(value) == old_number(value), value
        assert _epoch(value) == old_epoch(value), value
    for value in [*STATES, *_all_values("state")]:
        assert _state(value) == old_state(value), value


@pytest.mark.parametrize("reader, value, before, now", DIFFERS_ON_PURPOSE)
def test_values_no_sacct_writes(reader, value, before, now):
    old, new = (old_number, _number) if reader == "number" else (old_state, _state)
    assert old(value) == before and new(value) == now


def test_a_record_without_an_id_or_times_still_reads():
    (run,) = parse_json({"jobs": [{"job_id": None, "time": {"elapsed": None}}]})
    assert (run.job_id, run.elapsed, run.start, run.state) == ("?", 0.0, None, "")
    assert isinstance(run.elapsed, float)
