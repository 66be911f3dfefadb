"""squeue's data_parser flag +complex (24.11+), which SlurmBackend asks for because
it halves the JSON of a round (cli/json_format.COMPLEX_VALUES_SINCE): the jobs must read
exactly as from the default shape. Captures from the real daemons, taken back to back
by `capture.sh local` on tools/local-cluster --slurm 24.11 / 26.05
(tests/backends/data/<release>/complex/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_captures import scenario

from slurm_gavel.backends.slurm.cli.json_format import COMPLEX_VALUES_SINCE, CliFormat
from slurm_gavel.backends.slurm.fields import INFINITE, number
from slurm_gavel.backends.slurm.from_json import parse_jobs
from slurm_gavel.backends.slurm.releases import SlurmVersion

DATA = Path(__file__).parents[2] / "data"
NEWER = ("24.11", "26.05")
PARSER = {"24.11": "v0.0.42", "26.05": "v0.0.45"}


def captures(release: str) -> tuple[dict, dict]:
    folder = DATA / release / "complex"
    parser = PARSER[release]
    plain = json.loads((folder / f"squeue-t-all.{parser}.json").read_text())
    complex_ = json.loads((folder / f"squeue-t-all.{parser}+complex.json").read_text())
    return plain, complex_


@pytest.mark.parametrize("release", NEWER)
def test_complex_values_read_the_same_as_the_default_shape(release):
    plain, complex_ = captures(release)
    # the shapes really differ: plain numbers, null and "Infinity" instead of objects
    first = complex_["jobs"][0]
    assert isinstance(first["priority"], int) and isinstance(plain["jobs"][0]["priority"], dict)
    assert first["time_limit"] == "Infinity"
    assert len(json.dumps(complex_)) < 0.75 * len(json.dumps(plain))
    _, want = parse_jobs(plain)
    _, got = parse_jobs(complex_)
    assert got == want
    # the scenario's telling facts (capture.sh local), as 22.05 gives them
    by = {j.job_id: j for j in got}
    role = {r: by[i] for r, i in scenario(DATA / release / "complex").items()}
    assert role["ckpt"].state == "SPECIAL_EXIT" and role["ckpt"].held
    assert role["ckpt"].restarts == 1 and role["ckpt"].exit_code == 99
    assert role["bad"].state == "FAILED" and role["bad"].exit_code == 3
    assert role["held"].held and role["held"].priority == 0
    assert [(g.node, g.gpu_type, g.gpus) for g in role["multi"].gpu_slices] == [
        ("p100-1", "p100", 4),
        ("p100-2", "p100", 4),
    ]
    assert role["run1"].gpu_request == ("v100", 2) and role["run1"].nodes == ("v100-1",)


def test_infinity_and_null_are_numbers():
    assert number("Infinity") == INFINITE
    assert number(None) == 0
    with pytest.raises(ValueError):
        number("Infinityx")


@pytest.mark.parametrize(
    ("release", "parser", "flag"),
    [
        ((24, 11, 5), "v0.0.42", "--json=v0.0.42+complex"),
        ((26, 5, 5), "v0.0.45", "--json=v0.0.45+complex"),
        ((25, 5, 1), "v0.0.43", "--json=v0.0.43+complex"),
        # older than 24.11: not checked there, the plain flag
        ((23, 11, 1), "v0.0.40", "--json=v0.0.40"),
        ((22, 5, 8), None, "--json"),
    ],
)
def test_squeue_asks_for_complex_values_from_24_11(release, parser, flag):
    major, minor, micro = release
    fmt = CliFormat(SlurmVersion(major, minor, micro, plugin=parser or ""), parser)
    assert fmt.jobs_argv()[1] == flag
    assert fmt.ended_jobs_argv(["5"])[1] == flag
    # nodes keep the default shape (small; scontrol show nodes)
    assert "+" not in fmt.nodes_argv()[1]
    assert (release[:2] >= COMPLEX_VALUES_SINCE) == flag.endswith("+complex")
