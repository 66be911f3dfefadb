import json
import math
from pathlib import Path

import pytest

from slurm_gavel.domain.problem import ProblemError, load_problem, parse_problem, problem_to_json

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "examples" / "problem.json"


def minimal(**job):
    j = {"id": "1", "throughput": {"v100": 2.0, "k80": 1.0}, **job}
    return {"cluster": {"v100": 2, "k80": 2}, "jobs": [j]}


def test_example_problem_round_trips():
    p = load_problem(EXAMPLE)
    assert len(p.jobs) == 8 and p.gpu_types == ["v100", "p100", "k80"]
    again = parse_problem(json.loads(json.dumps(problem_to_json(p))))
    assert again == p


def test_defaults_and_absent_type_means_cannot_run():
    p = parse_problem(
        {"cluster": {"v100": 2, "k80": 2}, "jobs": [{"id": 7, "throughput": {"v100": 1}}]}
    )
    j = p.jobs[0]
    assert (j.id, j.scale_factor, j.priority_weight) == ("7", 1, 1.0)
    assert j.throughput == {"v100": 1.0, "k80": 0.0}


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"jobs": []}, "missing key 'cluster'"),
        ({"cluster": {"v100": 1}, "jobs": []}, "list is empty"),
        (minimal(throughput={"v100": -1.0}), "out of range; it must be >= 0"),
        (minimal(throughput={"v100": math.nan}), "not a finite number"),
        (minimal(throughput={"a100": 1.0}), "unknown GPU type 'a100'"),
        (minimal(scale_factor=4), "more than any type has"),
        (minimal(scale_factor=1.5), "not a whole number"),
        (minimal(throughput={"v100": 0, "k80": 0}), "zero on every GPU type"),
        (minimal(priority_weight=0), "priority_weight"),
        ({"cluster": {"v100": 2}, "jobs": [{"throughput": {"v100": 1}}]}, "missing key 'id'"),
    ],
)
def test_bad_input_names_the_field(doc, needle):
    with pytest.raises(ProblemError, match=needle):
        parse_problem(doc)


def test_duplicate_ids_rejected():
    doc = minimal()
    doc["jobs"].append(dict(doc["jobs"][0]))
    with pytest.raises(ProblemError, match="duplicate job id"):
        parse_problem(doc)


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ProblemError, match="cannot read"):
        load_problem(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "cluster": ,\n}')
    with pytest.raises(ProblemError, match="line 2"):
        load_problem(bad)


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'{"cluster": {"v100": 1}, "jobs": [], "x": "\xff"}', "not UTF-8 text (byte 0xff"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"cluster": {"v100": 1}, "jobs": "x"}', "jobs: expected a list"),
    ],
    ids=["non-utf8", "deep", "bad-field"],
)
def test_allocate_with_a_hostile_problem_file_is_exit_2_naming_the_file(
    tmp_path, capsys, content, needle
):
    # Before: non-UTF-8 bytes and deep nesting ended in tracebacks.
    from slurm_gavel.cli import main

    path = tmp_path / "problem.json"
    path.write_bytes(content)
    assert main(["allocate", "--problem", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"slurm-gavel allocate: error: {path}: ")
    assert needle in err and err.count("\n") == 1


def test_problem_job_written_out_init_is_the_dataclass_one():
    """ProblemJob has a written-out __init__ (the round builds one per job per re-solve):
    the same fields in order, defaults, keywords, equality and immutability."""
    from dataclasses import FrozenInstanceError, fields, replace

    from slurm_gavel.domain.model import ProblemJob

    j = ProblemJob("7", "A3C", {"v100": 1.0})
    assert [f.name for f in fields(j)] == list(vars(j))
    assert vars(j) == {
        "id": "7", "job_type": "A3C", "throughput": {"v100": 1.0}, "scale_factor": 1,
        "priority_weight": 1.0, "steps_remaining": None, "time_since_start": 0.0,
        "account": None, "slo": None,
    }  # fmt: skip
    k = ProblemJob(id="7", job_type="A3C", throughput={"v100": 1.0}, slo=5.0, account="a")
    assert replace(j, slo=5.0, account="a") == k
    with pytest.raises(FrozenInstanceError):
        k.slo = 1.0  # type: ignore[misc]
