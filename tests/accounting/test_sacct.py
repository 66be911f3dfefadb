"""sacct parsing, `trace from-sacct` and `report` on output captured from real slurmdbd.

tests/data/sacct/<release>/ holds `sacct -a -X -D --json` and `sacct -P` (delimiter
DELIM) of tests/integration/test_accounting_on_slurm.py's run on that release
(SLURM_GAVEL_SACCT_CAPTURE): 9 managed one-GPU jobs the daemon time-shared on 6
GPUs (so several were requeued), one plain k80 job whose comment is HOSTILE, and one
job without GPUs in account biology.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sacct_runs import sacct_run as run

from slurm_gavel.accounting.sacct import (
    SacctError,
    SacctRun,
    by_job,
    parse_json,
    parse_parsable,
    parse_text,
)
from slurm_gavel.accounting.sacct_trace import MappingError, load_mapping, to_trace
from slurm_gavel.accounting.usage_report import add_fairness, job_facts, summarise
from slurm_gavel.cli import main
from slurm_gavel.domain.throughputs import load_table

DATA = Path(__file__).parents[1] / "data" / "sacct"
RELEASES = ("22.05", "24.11", "26.05")
DELIM = "|#7f3a#|"
HOSTILE = (
    "evil\x1b]0;pwned\x07\n999|x|root|physics|gpu|COMPLETED|2026-01-01T00:00:00|"
    "2026-01-01T00:00:00|2026-01-01T01:00:00|3600|gres/gpu:v100=8,gres/gpu=8|gavel:type=A3C"
)
TABLE = load_table()


def captured(release: str) -> list[SacctRun]:
    return parse_json(json.loads((DATA / release / "sacct.json").read_text()))


def key(r: SacctRun) -> tuple:
    return (r.job_id, r.state, r.user, r.account, r.comment, sorted(r.gpus.items()), r.elapsed)


@pytest.mark.parametrize("release", RELEASES)
def test_json_runs_of_each_release(release):
    runs = captured(release)
    jobs = by_job(runs)
    assert len(jobs) == 11
    managed = [j for j, rs in jobs.items() if rs[0].comment.startswith("gavel:type=")]
    assert len(managed) == 9
    for job_id in managed:
        rs = jobs[job_id]
        assert [r.state for r in rs] == ["REQUEUED"] * (len(rs) - 1) + ["COMPLETED"], job_id
        assert all(r.gpu_total == 1 and r.gpu_type in ("v100", "p100", "k80") for r in rs)
        assert all(r.start is not None and r.end is not None and r.submit for r in rs)
    assert sum(len(jobs[j]) for j in managed) > 9, "the capture has no requeued run"
    plain = [rs[0] for rs in jobs.values() if rs[0].comment == HOSTILE]
    assert len(plain) == 1 and plain[0].gpus == {"k80": 1} and plain[0].state == "COMPLETED"
    other = [rs[0] for rs in jobs.values() if rs[0].account == "biology"]
    assert len(other) == 1 and other[0].gpu_total == 0


@pytest.mark.hostile
@pytest.mark.parametrize("release", RELEASES)
def test_parsable_reads_the_same_runs_and_no_forged_record(release):
    text = (DATA / release / "sacct-P.txt").read_text()
    runs, bad = parse_parsable(text, DELIM)
    assert bad == 0
    assert sorted(map(key, runs)) == sorted(map(key, captured(release)))
    assert "999" not in {r.job_id for r in runs}
    # With a delimiter users know ('|', sacct's default), the comment forges a job:
    # why `query` picks a random one.
    forged, _ = parse_parsable(text.replace(DELIM, "|"))
    assert "999" in {r.job_id for r in forged}


@pytest.mark.parametrize("release", RELEASES)
def test_trace_from_each_capture(release):
    runs = captured(release)
    jobs, skipped = to_trace(runs, TABLE)
    assert len(jobs) == 9
    assert dict(skipped.reasons) == {
        "no GPUs": 1,
        "no gavel: comment and no mapping rule matches": 1,
    }
    assert jobs[0].arrival_time == 0
    assert [j.arrival_time for j in jobs] == sorted(j.arrival_time for j in jobs)
    grouped = by_job(runs)
    for job in jobs:
        rs = grouped[job.id]
        assert job.job_type in rs[0].comment and job.scale_factor == 1
        row = TABLE.row(job.job_type, 1)
        expected = sum(r.elapsed * row[r.gpu_type] for r in rs)  # type: ignore[index]
        assert job.total_steps == pytest.approx(expected, abs=1e-3)
        assert job.account == "physics"


@pytest.mark.parametrize(
    "comment, reason",
    [
        ("GAVEL:type=A3C", "gavel: comment breaks the grammar"),
        (" gavel:type=A3C", "gavel: comment breaks the grammar"),
        ("gavel:type=A3C\n999|x|root", "gavel: comment breaks the grammar"),
        ("gavel:type=A3C,weight=1e9", "gavel: comment breaks the grammar"),
        ("gavel:type=A3C,scale=-1", "gavel: comment breaks the grammar"),
        ("gavel:type=" + "A" * 300, "gavel: comment breaks the grammar"),
        ("gavel:type=$(rm -rf /)", "gavel: comment breaks the grammar"),
        ("gavel:type=Not A Job", "job type not in the throughput table"),
        ("rm -rf / \x1b[2J", "no gavel: comment and no mapping rule matches"),
        ("", "no gavel: comment and no mapping rule matches"),
    ],
)
@pytest.mark.hostile
def test_hostile_comments_are_skipped_with_a_reason(comment, reason):
    jobs, skipped = to_trace([run(comment=comment)], TABLE)
    assert jobs == [] and dict(skipped.reasons) == {reason: 1}


def test_skip_reasons_and_kept_states():
    runs = [
        run(job_id="1", state="CANCELLED"),
        run(job_id="2", start=None, elapsed=0.0),
        run(job_id="3", gpus={}, gpu_total=2),
        run(job_id="4", gpus={"v100": 1, "k80": 1}, gpu_total=2),
        run(job_id="5", gpus={"h100": 1}),
        run(job_id="6", comment="gavel:type=A3C", gpus={"v100": 2}, gpu_total=2),
        run(job_id="7", state="REQUEUED", gpus={"v100": 1}),
        run(job_id="7", submit=1200.0, start=1300.0, gpus={"k80": 2}, gpu_total=2),
        run(job_id="8", state="TIMEOUT"),
    ]
    jobs, skipped = to_trace(runs, TABLE)
    assert jobs == []
    assert dict(skipped.reasons) == {
        "ended CANCELLED (kept: COMPLETED)": 1,
        "ended TIMEOUT (kept: COMPLETED)": 1,
        "never ran": 1,
        "GPU type not recorded, or several types at once": 2,
        "GPU type not in the throughput table": 1,
        "throughput table has no figures at this GPU count": 1,  # A3C only at 1 GPU
        "GPU count changed between runs": 1,
    }
    jobs, _ = to_trace(runs, TABLE, states=["COMPLETED", "TIMEOUT"])
    assert [j.id for j in jobs] == ["8"]


@pytest.mark.hostile(inputs=3)
def test_the_comments_weight_and_slo_go_into_the_trace_capped(tmp_path):
    from slurm_gavel.simulate.traces import load_trace, save_trace

    runs = [
        run(job_id="1", comment="gavel:type=A3C,weight=0.25,slo=3600"),
        run(job_id="2", comment="gavel:type=A3C,weight=1000"),  # above the cap
        run(job_id="3", comment="gavel:type=A3C,steps=999999999"),  # declared, not done
    ]
    jobs, _ = to_trace(runs, TABLE)
    assert [(j.priority_weight, j.slo) for j in jobs] == [(0.25, 3600), (1.0, None), (1.0, None)]
    assert jobs[2].total_steps == pytest.approx(100 * TABLE.row("A3C", 1)["v100"], abs=1e-3)
    save_trace(jobs, tmp_path / "t.csv")
    back = load_trace(tmp_path / "t.csv", TABLE)
    assert [(j.id, j.priority_weight, j.slo) for j in back] == [
        ("1", 0.25, 3600), ("2", 1.0, None), ("3", 1.0, None)
    ]  # fmt: skip


def test_a_moved_job_did_work_at_each_types_rate():
    runs = [
        run(state="REQUEUED", elapsed=60.0, gpus={"k80": 1}),
        run(submit=1100.0, start=1200.0, elapsed=30.0, gpus={"v100": 1}),
    ]
    (job,), _ = to_trace(runs, TABLE)
    row = TABLE.row("A3C", 1)
    assert job.total_steps == pytest.approx(60 * row["k80"] + 30 * row["v100"], abs=1e-3)
    assert job.arrival_time == 0


def test_mapping_file_names_types_and_refuses_mistakes(tmp_path):
    path = tmp_path / "map.yaml"
    path.write_text(
        "- match: {name: 'resnet*', account: physics}\n  type: ResNet-50 (batch size 64)\n"
        "- match: {user: bob}\n  type: A3C\n"
    )
    rules = load_mapping(path, TABLE)
    runs = [
        run(job_id="1", comment="", name="resnet-a"),
        run(job_id="2", comment="", user="bob"),
        run(job_id="3", comment="", name="resnet-b", account="biology"),
        run(job_id="4", comment="gavel:type=CycleGAN", user="bob"),  # the comment wins
    ]
    jobs, skipped = to_trace(runs, TABLE, rules)
    assert {j.id: j.job_type for j in jobs} == {
        "1": "ResNet-50 (batch size 64)", "2": "A3C", "4": "CycleGAN",
    }  # fmt: skip
    assert skipped.total == 1
    for text, words in [
        ("{a: 1}", "a list of rules"),
        ("- match: {node: x}\n  type: A3C\n", "match on name, user"),
        ("- match: {name: x}\n  type: Nope\n", "not in the throughput table"),
        ("- match: {name: x}\n", "exactly the keys"),
        ("- [", "not valid YAML"),
    ]:
        path.write_text(text)
        with pytest.raises(MappingError, match=words):
            load_mapping(path, TABLE)
    path.write_bytes(b"- match: {name: '\xff'}\n")
    with pytest.raises(MappingError, match="UTF-8"):
        load_mapping(path, TABLE)


def test_json_shapes_and_errors():
    doc = {"jobs": [{"job_id": 5, "state": {"current": ["CANCELLED"]}, "time": {
        "submission": {"set": True, "infinite": False, "number": 100},
        "start": {"set": False, "infinite": False, "number": 0}, "end": 0, "elapsed": 0},
        "tres": {"allocated": [{"type": "gres", "name": "gpu:v100", "count": 2}]},
        "comment": {"job": None}}]}  # fmt: skip
    (r,) = parse_json(doc)
    assert (r.job_id, r.state, r.submit, r.start, r.comment) == ("5", "CANCELLED", 100.0, None, "")
    assert r.gpus == {"v100": 2} and r.gpu_total == 2
    with pytest.raises(SacctError, match="no 'jobs' list"):
        parse_json({"meta": {}})
    with pytest.raises(SacctError, match="sacct reported errors"):
        parse_json({"jobs": [], "errors": [{"error": "Unable to contact slurmdbd"}]})
    with pytest.raises(SacctError, match="not valid JSON"):
        parse_text("{nope", "f")
    with pytest.raises(SacctError, match="lacks"):
        parse_parsable("JobID|State\n1|COMPLETED\n")


def test_report_on_captures():
    for release in RELEASES:
        runs = captured(release)
        facts = job_facts(runs, TABLE)
        assert len(facts) == 10  # the job without GPUs is not judged
        managed = [f for f in facts if f.job_type != "(plain)"]
        requeued = sum(1 for r in runs if r.state == "REQUEUED")
        assert sum(f.restarts for f in managed) == requeued > 0
        add_fairness(facts, TABLE, {"v100": 2, "p100": 2, "k80": 2})
        assert all(f.rho is not None and f.rho > 0 for f in managed)
        rows = {r["group"]: r for r in summarise(facts, "type")}
        assert rows["A3C"]["jobs"] == 3 and rows["(plain)"]["rho"]["mean"] is None
        gpu_s = sum(r.elapsed for r in runs if r.gpu_total)
        total_h = sum(h for r in rows.values() for h in r["gpu_hours"].values())
        assert total_h == pytest.approx(gpu_s / 3600, abs=1e-3)
        (everyone,) = summarise(facts, None)
        assert everyone["group"] == "all" and everyone["finished"] == 10


def test_daemon_restart_counts_win_when_higher():
    facts = job_facts([run(job_id="7")], TABLE, {"7": 3})
    assert facts[0].restarts == 3


@pytest.mark.hostile(inputs=1)  # the capture's HOSTILE comment, in the terminal table
def test_report_command_table_json_and_plot(tmp_path, capsys, monkeypatch):
    src = str(DATA / "24.11" / "sacct.json")
    cap = ["--capacity", "v100=2,p100=2,k80=2"]
    assert main(["report", "--input", src, "--by", "user", *cap]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("GROUP") and "root" in out and "\x1b" not in out
    assert main(["report", "--input", src, "--json", *cap]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["by"] == "all" and doc["groups"][0]["jobs"] == 10
    assert main(["report", "--input", src, "--json", "-", *cap]) == 0
    assert json.loads(capsys.readouterr().out) == doc
    assert main(["report", "--input", src, "--json", str(tmp_path / "r.json"), *cap]) == 0
    assert json.loads((tmp_path / "r.json").read_text()) == doc
    assert capsys.readouterr().out.startswith("GROUP")  # the table still on stdout
    assert not (Path.cwd() / "-").exists()
    assert main(["report", "--input", src, "--capacity", "v100=two"]) == 2
    assert "--capacity" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails: not installed
    assert main(["report", "--input", src, "--plot", str(tmp_path / "p"), *cap]) == 2
    assert "matplotlib" in capsys.readouterr().err


def test_trace_command_writes_a_trace_the_simulator_reads(tmp_path, capsys):
    from slurm_gavel.simulate.traces import load_trace

    out = tmp_path / "t.csv"
    assert main(["trace", "from-sacct", "--input", str(DATA / "26.05" / "sacct.json"),
                 "-o", str(out)]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "9 jobs kept, 2 skipped" in err and "no GPUs" in err
    assert len(load_trace(out, TABLE)) == 9
    assert main(["trace", "from-sacct", "--input", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err


FAKE_SACCT = """#!{python}
# A sacct without --json (before 21.08): prints the capture with the delimiter asked for.
import sys
args = sys.argv[1:]
open({log!r}, "a").write(" ".join(args) + "\\n")
if "--json" in args:
    sys.exit("sacct: unrecognized option '--json'")
delim = args[args.index("--delimiter") + 1]
sys.stdout.write(open({capture!r}).read().replace({old!r}, delim))
"""


@pytest.mark.hostile(inputs=1)  # the capture's forged record, through query()'s own delimiter
def test_query_falls_back_to_parsable_with_a_random_delimiter(tmp_path, monkeypatch):
    from slurm_gavel.accounting.sacct import query

    capture = DATA / "22.05" / "sacct-P.txt"
    fake = tmp_path / "sacct"
    log = tmp_path / "argv.log"
    fake.write_text(FAKE_SACCT.format(python=sys.executable, log=str(log),
                                      capture=str(capture), old=DELIM))  # fmt: skip
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    runs, bad, form = query("now-1day", "now", ["gpu"])
    assert form == "parsable" and bad == 0
    assert sorted(map(key, runs)) == sorted(map(key, captured("22.05")))
    assert "999" not in {r.job_id for r in runs}
    first, second = log.read_text().splitlines()
    assert first == "-a -X -D -S now-1day -E now -r gpu --json"
    delim = second.split("--delimiter ")[1].split(" ")[0]
    assert len(delim) == 18 and delim != DELIM  # "|" + 16 random hex digits + "|"
    runs2, _, _ = query("now-1day")
    delim2 = log.read_text().splitlines()[-1].split("--delimiter ")[1].split(" ")[0]
    assert delim2 != delim and len(runs2) == len(runs)


@pytest.mark.hostile
def test_a_saved_parsable_file_is_read_with_a_warning_and_json_without(tmp_path, capsys):
    """sacct -P saved with its own '|': a comment holding '|' and newlines can forge
    records in it, so reading one says so; a JSON file reads quietly."""
    saved = tmp_path / "sacct-P.txt"
    saved.write_text((DATA / "22.05" / "sacct-P.txt").read_text().replace(DELIM, "|"))
    out = tmp_path / "t.csv"
    assert main(["trace", "from-sacct", "--input", str(saved), "-o", str(out)]) == 0
    assert "comment can forge records; save sacct --json" in capsys.readouterr().err
    js = str(DATA / "26.05" / "sacct.json")
    assert main(["trace", "from-sacct", "--input", js, "-o", str(out)]) == 0
    assert "forge" not in capsys.readouterr().err
