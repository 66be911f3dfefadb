"""JobRecordCache (SlurmBackend.observe): unchanged squeue records are parsed once,
and the jobs are always exactly those parse_jobs gives. Captures from real daemons."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.from_json import _job, parse_jobs, parse_version
from slurm_gavel.backends.slurm.record_cache import FIELDS, JobRecordCache
from slurm_gavel.domain.comment_grammar import ManagedCommentError, parse_comment

DATA = Path(__file__).parents[1] / "data"
CAPTURES = [
    "22.05/squeue.json",
    "24.11/squeue-t-all.v0.0.40.json",
    "24.11/squeue-t-all.v0.0.42.json",
    "24.11/complex/squeue-t-all.v0.0.42+complex.json",
    "26.05/squeue-t-all.v0.0.45.json",
    "26.05/complex/squeue-t-all.v0.0.45+complex.json",
    "26.05/local-cluster/squeue-t-all.v0.0.45.json",
    # slurmrestd's /jobs (SlurmBackend observes through the same cache)
    "24.11/rest-v0.0.42-jobs.json",
    "26.05/rest-v0.0.45-jobs.json",
]


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("name", CAPTURES)
def test_fields_cover_everything_a_job_is_read_from(name):
    """A record cut down to FIELDS parses to the same SlurmJob, and garbage in any
    other field changes nothing: the cache compares every value _job depends on."""
    doc = load(name)
    version = parse_version(doc)
    for raw in doc["jobs"]:
        want = _job(raw, version)
        assert _job({k: raw[k] for k in FIELDS if k in raw}, version) == want
        noisy = {k: (v if k in FIELDS else {"garbage": [k]}) for k, v in raw.items()}
        assert _job(noisy, version) == want


@pytest.mark.parametrize("name", CAPTURES)
def test_cache_gives_exactly_what_parse_jobs_gives(name):
    doc = load(name)
    cache = JobRecordCache()
    assert cache.parse(doc) == parse_jobs(doc) and cache.reused == 0
    again = copy.deepcopy(doc)
    assert cache.parse(again) == parse_jobs(again)
    assert cache.reused == len(doc["jobs"])
    # one comment changed, one job gone, one exit code changed: those are read afresh
    changed = copy.deepcopy(doc)
    changed["jobs"][0]["comment"] = "gavel:type=A3C,scale=2"
    del changed["jobs"][1]
    last = changed["jobs"][-1]
    last["exit_code"] = {"return_code": 7, "status": ["ERROR"]} if "meta" in doc else 7 << 8
    _, got = cache.parse(changed)
    assert (_, got) == parse_jobs(changed)
    assert got[0].comment == "gavel:type=A3C,scale=2"
    assert cache.reused == len(changed["jobs"]) - 2


def test_another_release_starts_afresh():
    cache = JobRecordCache()
    cache.parse(load("24.11/squeue-t-all.v0.0.42.json"))
    doc = load("26.05/squeue-t-all.v0.0.45.json")
    assert cache.parse(doc) == parse_jobs(doc) and cache.reused == 0


def test_the_cli_backend_parses_through_the_cache():
    assert isinstance(cli_backend(env={}).transport.reader.job_cache, JobRecordCache)


def test_the_grammar_keeps_no_memo_and_refusals_are_raised_every_time():
    # a job's comment is read once per job (records.read_as_before), not memoised by
    # the grammar for every comment it ever saw
    assert not hasattr(parse_comment, "cache_info")
    for _ in range(2):
        with pytest.raises(ManagedCommentError, match="cache-2"):
            parse_comment("gavel:type=A3C,scale=-1", job_id="cache-2", max_weight=None)
