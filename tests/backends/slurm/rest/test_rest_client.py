"""RestClient's rules (slurm/rest/client.py): an action that got no answer is never
sent twice, a request that never left is retried, a refused token is re-read once.
The answers are the real daemons' (tests/backends/data/rest/<release>/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rest_replay import load, replay

from slurm_gavel.backends.slurm.rest.auth import SlurmRestAuthError, TokenSource
from slurm_gavel.backends.slurm.rest.client import RestClient
from slurm_gavel.backends.slurm.rest.documents import note_rest_errors
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.backends.slurm.slurm_errors import SlurmActionTimedOut, SlurmUnreachable

OK = (200, {"meta": {}, "errors": [], "warnings": []})


def client(sock: Path, **kw) -> tuple[RestClient, list[float]]:
    sleeps: list[float] = []
    return RestClient(sock, timeout=0.5, retries=3, backoff=0.1, sleep=sleeps.append, **kw), sleeps


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/slurm/v0.0.42/job/7"), ("DELETE", "/slurm/v0.0.42/job/7?signal=USR1")],
)
def test_an_action_without_an_answer_is_never_sent_twice(tmp_path, method, path):
    """Before: retried 4 times after each timeout (a signal delivered up to 5 times)."""
    sock = tmp_path / "rest.sock"
    with replay(sock, lambda req: None) as seen:
        c, sleeps = client(sock)
        with pytest.raises(SlurmActionTimedOut, match="may have half happened"):
            c.request("signal", method, path, {"hold": True} if method == "POST" else None)
    assert len(seen) == 1 and sleeps == [] and c.counts["signal"] == 1


def test_a_get_without_an_answer_is_retried(tmp_path):
    sock = tmp_path / "rest.sock"
    with replay(sock, lambda req: None) as seen:
        c, sleeps = client(sock)
        with pytest.raises(SlurmUnreachable, match="failed after 4 tries"):
            c.request("observe", "GET", "/slurm/v0.0.42/jobs")
    assert len(seen) == 4 and sleeps == [0.1, 0.2, 0.4]


def test_the_requeue_get_of_v0045_counts_as_an_action(tmp_path):
    sock = tmp_path / "rest.sock"
    with replay(sock, lambda req: None) as seen:
        c, _ = client(sock)
        with pytest.raises(SlurmActionTimedOut):
            c.request("requeuehold", "GET", "/slurm/v0.0.45/job/7/requeue", idempotent=False)
    assert len(seen) == 1


def test_an_action_that_never_left_is_retried(tmp_path):
    """No socket: the POST never reached slurmrestd, so sending it again is safe."""
    c, sleeps = client(tmp_path / "absent.sock")
    with pytest.raises(SlurmUnreachable, match="cannot connect") as e:
        c.request("hold", "POST", "/slurm/v0.0.42/job/7", {"hold": True})
    assert not isinstance(e.value, SlurmActionTimedOut)
    assert c.counts["hold"] == 4 and sleeps == [0.1, 0.2, 0.4]


def test_an_action_slurmrestd_could_not_deliver_is_retried(tmp_path):
    """ "Unable to contact slurm controller": slurmctld never got it (as the CLI rule)."""
    down = {"errors": [{"error": "Unable to contact slurm controller (connect failure)"}]}
    answers = iter([(500, down), OK])
    sock = tmp_path / "rest.sock"
    with replay(sock, lambda req: next(answers)) as seen:
        c, sleeps = client(sock)
        assert c.request("hold", "POST", "/slurm/v0.0.42/job/7", {"hold": True})["errors"] == []
    assert len(seen) == 2 and sleeps == [0.1]


def private_token(path: Path, text: str) -> Path:
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


@pytest.mark.parametrize(("release", "method"), [("24.11", "POST"), ("26.05", "DELETE")])
def test_an_expired_token_is_read_again_and_the_request_sent_once_more(tmp_path, release, method):
    """Before: the token was read once at start; an expired one failed every round."""
    expired = load(release, "responses.json")["expired_token"]
    token = private_token(tmp_path / "jwt", "old.token.x\n")

    def route(req):
        if req.headers.get("X-SLURM-USER-TOKEN") == "old.token.x":
            return expired["status"], expired["response"]
        return OK

    sock = tmp_path / "rest.sock"
    with replay(sock, route) as seen:
        c, sleeps = client(sock, token_source=TokenSource(token), user="slurm")
        private_token(token, "SLURM_JWT=new.token.y\n")  # the renewal, as scontrol prints it
        c.request("hold", method, "/slurm/v0.0.42/job/7", {"hold": True})
    assert [r.headers["X-SLURM-USER-TOKEN"] for r in seen] == ["old.token.x", "new.token.y"]
    assert all(r.headers["X-SLURM-USER-NAME"] == "slurm" for r in seen) and sleeps == []


def test_a_token_still_refused_after_reading_it_again_names_the_file_and_the_fix(tmp_path):
    expired = load("26.05", "responses.json")["expired_token"]
    token = private_token(tmp_path / "jwt", "old.token.x")
    sock = tmp_path / "rest.sock"
    with replay(sock, lambda req: (expired["status"], expired["response"])) as seen:
        c, _ = client(sock, token_source=TokenSource(token), user="gavel")
        with pytest.raises(SlurmRestAuthError) as e:
            c.request("observe", "GET", "/slurm/v0.0.45/jobs")
    assert len(seen) == 2
    msg = str(e.value)
    assert "HTTP 511: Job update requested failed" in msg
    assert f"scontrol token username=gavel lifespan=SECONDS > {token}" in msg


def test_no_credentials_at_all_is_refused_with_the_fix(tmp_path):
    no_token = load("24.11", "responses.json")["no_token"]
    sock = tmp_path / "rest.sock"
    with replay(sock, lambda req: (no_token["status"], no_token["response"])):
        c, _ = client(sock)
        with pytest.raises(
            SlurmRestAuthError, match=r"HTTP 401: Authentication failure.*rest_token_file"
        ):
            c.request("observe", "GET", "/slurm/v0.0.42/jobs")


def test_the_token_is_read_again_on_schedule(tmp_path):
    now = [0.0]
    token = private_token(tmp_path / "jwt", "a.b")
    source = TokenSource(token, reread_s=300, clock=lambda: now[0])
    private_token(token, "c.d")
    now[0] = 299.0
    assert source.current() == "a.b" and source.reads == 1
    now[0] = 300.0
    assert source.current() == "c.d" and source.reads == 2


@pytest.mark.parametrize(
    ("doc_of", "ids", "failed"),
    [
        # 24.11/26.05 report a signal's failures per job in "status", with HTTP 200
        (lambda r: r["24.11"]["batch_signal_unknown_job"], ["99999", "5"],
         {"99999": "slurmrestd: Invalid job id specified"}),
        (lambda r: r["26.05"]["signal_unknown_job"], ["99999"],
         {"99999": "slurmrestd: Invalid job id specified"}),
        (lambda r: r["26.05"]["requeue_unknown_job"], ["99999", "5"],
         {"99999": "slurmrestd: Requeue JobId=99999 failed: Invalid job id specified"}),
        (lambda r: r["22.05"]["signal_unknown_job"], ["99999"],
         {"99999": "slurmrestd: unable to kill JobId=99999 with signal 10: Invalid job id "
                   "specified: Invalid job id specified"}),
    ],
    ids=["24.11-batch-signal", "26.05-signal", "26.05-requeue", "22.05-signal"],
)  # fmt: skip
def test_per_job_failures_are_read_from_each_release_answer(doc_of, ids, failed):
    """Before: a 24.11+ signal of an unknown job (HTTP 200, errors []) counted as sent."""
    responses = {r: load(r, "responses.json") for r in ("22.05", "24.11", "26.05")}
    got: dict[str, str] = {}
    bad = note_rest_errors(doc_of(responses)["response"], ids, got)
    assert got == failed and bad == set(failed)


def test_signal_of_a_batch_goes_in_one_request_and_never_with_an_empty_list(tmp_path):
    spec = load("26.05", "openapi-v3-excerpt.json")

    def route(req):
        return (200, spec) if req.path == "/openapi/v3" else (200, {"status": [], "errors": []})

    sock = tmp_path / "rest.sock"
    with replay(sock, route) as seen:
        b = rest_backend(sock)
        failed: dict[str, str] = {}
        assert b.transport.send_signal([], "USR1", failed) == set()
        assert b.transport.send_signal(["5", "6"], "USR1", failed) == set() and not failed
    assert [(r.method, r.path, r.body) for r in seen[1:]] == [
        (
            "DELETE",
            "/slurm/v0.0.45/jobs/",
            {"signal": "USR1", "flags": ["BATCH_JOB"], "jobs": ["5", "6"]},
        )
    ]


def test_a_get_answered_with_errors_is_retried_then_raises(tmp_path):
    """22.05's slurmrestd answers /jobs with [] plus an error when slurmctld is down:
    never read as "no jobs" (moved here from test_rest_transport.py)."""
    down = {
        "meta": {},
        "jobs": [],
        "errors": [{"description": "Failed while looking for jobs", "error": "Unspecified error"}],
    }
    sock = tmp_path / "rest.sock"
    with replay(sock, lambda req: (200, down)) as seen:
        c, sleeps = client(sock)
        with pytest.raises(SlurmUnreachable, match="Failed while looking for jobs"):
            c.request("observe", "GET", "/slurm/v0.0.38/jobs")
    assert sleeps == [0.1, 0.2, 0.4] and c.counts["observe"] == len(seen) == 4


@pytest.mark.parametrize(
    ("release", "answer", "states_path"),
    [("26.05", "jobs-requeued-completing.json", False),
     ("24.11", "jobs-state-requeued-completing.json", True)],
    ids=["26.05-jobs", "24.11-jobs-state"],
)  # fmt: skip
def test_a_requeued_job_still_cleaning_up_reads_as_completing(
    tmp_path, release, answer, states_path
):
    """24.11 and 26.05 list a requeued job as ["PENDING", "COMPLETING"] until its last
    run has cleaned up (squeue says COMPLETING). Before: read as PENDING, so act()
    stopped waiting and released it at once; on 26.05 the relaunch then lost its batch
    script ("execve(): .../slurm_script: No such file or directory"), ended FAILED."""
    spec = load(release, "openapi-v3-excerpt.json")
    if not states_path:  # the /jobs listing, as a version without /jobs/state/ polls
        spec = {**spec, "paths": {p: e for p, e in spec["paths"].items() if "/state" not in p}}
    doc = load(release, answer)
    job = str(doc["jobs"][0]["job_id"])
    assert doc["jobs"][0]["state" if states_path else "job_state"] == ["PENDING", "COMPLETING"]

    def route(req):
        return (200, spec) if req.path == "/openapi/v3" else (200, doc)

    sock = tmp_path / "rest.sock"
    with replay(sock, route) as seen:
        assert rest_backend(sock).transport.states([job, "99999"]) == {job: "COMPLETING"}
    want = f"/jobs/state/?job_id={job}&job_id=99999" if states_path else "/jobs"
    assert seen[-1].path.endswith(want)


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [("http://ctl:6820", "ctl", 6820), ("https://ctl:6820/", "ctl", 6820),
     ("http://[::1]:6820/", "::1", 6820), ("http://127.0.0.1:6820/x/", "127.0.0.1", 6820)],
)  # fmt: skip
def test_the_url_gives_host_and_port_whatever_follows_them(url, host, port):
    """Before: "http://127.0.0.1:6820/x/" failed every request ("nonnumeric port")."""
    conn = RestClient(url)._connection()
    assert (conn.host, conn.port) == (host, port)
