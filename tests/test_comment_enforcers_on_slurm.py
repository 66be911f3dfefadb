"""conf/slurm/job_submit.lua on a real slurmctld gives the shared table's verdicts.

Submissions go through a client slurm.conf without the SPANK plugin (the session
cluster may load it for tests/spank), so what is tested is the Lua alone: refused at
submit, held (managed) or left alone (plain). Also: comment updates, and the Lua's
verdict on random strings agrees with the Python parser's.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from comment_grammar import cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spank_free_client import spank_free_conf

from slurm_gavel.domain.comment_grammar import classify

pytestmark = pytest.mark.slurm
CASES = cases()


@pytest.fixture
def lua(slurm):  # type: ignore[no-untyped-def]
    """A submitter whose client loads no SPANK plugin: (verdict, stderr) per comment."""
    conf = spank_free_conf(slurm)
    env = {**os.environ, **slurm.env, "SLURM_CONF": str(conf)}

    def submit(comment: str) -> tuple[str, str]:
        res = subprocess.run(
            ["sbatch", "--parsable", f"--comment={comment}", "-p", "gpu", "-o", "/dev/null",
             "--begin=now+3600", "--wrap", "true"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        if res.returncode != 0:
            return "refuse", res.stderr
        job = res.stdout.strip().split(";")[0]
        info = slurm.show(job)
        slurm.cmd("scancel", job, check=False)
        return ("managed" if info["Priority"] == "0" else "plain"), res.stderr

    return submit


@pytest.mark.hostile(inputs=len(CASES))
def test_lua_gives_the_table_verdict(lua):
    wrong = []
    for case in CASES:
        verdict, stderr = lua(case.comment)
        if verdict != case.verdict:
            wrong.append((case.comment[:60], case.verdict, verdict, stderr[-200:]))
    assert not wrong


def test_lua_refusal_names_the_problem_and_the_cap(lua):
    verdict, stderr = lua("gavel:type=A3C,weight=1000")
    assert verdict == "refuse"
    assert "weight=1000 is above the cap 1 set by the admin" in stderr
    verdict, stderr = lua(" gavel:type=A3C")
    assert verdict == "refuse" and "'gavel:' must open the comment" in stderr
    verdict, stderr = lua("gavel:type=A3C,")
    assert verdict == "refuse" and "'' is not key=value" in stderr
    assert lua("gavel:")[0] == "managed"  # no type: managed, its row learned


def test_gpu_request_moved_into_the_comment_must_still_fit_the_grammar(slurm):
    res = slurm.cmd(
        "sbatch", "--comment=gavel:type=A3C", "-p", "gpu", "-N", "2", "--gres=gpu:600",
        "--wrap", "true", check=False,
    )  # fmt: skip
    assert res.returncode != 0
    assert "scale=1200 must be a whole number from 1 to 1024" in res.stderr


# A sample only: every example is a real submission.
no_nul = st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"])
sample = st.one_of(
    st.builds(lambda s: "gavel:type=" + s, st.text(no_nul, max_size=20)),
    st.builds(
        lambda k, v: f"gavel:type=A3C,{k}={v}",
        st.sampled_from(["scale", "weight", "steps", "slo"]),
        st.text(st.sampled_from("0123456789.-+eE x"), min_size=1, max_size=14),
    ),
    st.text(st.sampled_from(" \tgGaAvVeElL:"), max_size=10).map(lambda s: s + "type=A3C"),
)


@pytest.mark.hostile
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(comment=sample)
def test_lua_and_python_agree_on_random_comments(lua, comment):
    assert lua(comment)[0] == classify(comment)


@pytest.mark.hostile(inputs=5)
def test_users_cannot_add_change_or_remove_a_gavel_comment(slurm):
    def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
        return slurm.as_user("nobody", *argv)

    def submit(*extra: str) -> str:
        res = as_nobody(
            "sbatch", "--parsable", "-D", "/tmp", "-o", "/dev/null", "-p", "gpu",
            "--begin=now+3600", *extra, "--wrap", "sleep 60",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()

    plain = submit("--comment=my notes")
    for new in ("gavel:type=A3C", " gavel:type=A3C", "GAVEL:type=A3C"):
        res = as_nobody("scontrol", "update", f"JobId={plain}", f"Comment={new}")
        # (22.05 does not pass job_modify's log_user text to scontrol update)
        assert res.returncode != 0, new
    assert as_nobody("scontrol", "update", f"JobId={plain}", "Comment=other-notes").returncode == 0
    managed = submit("--comment=gavel:type=A3C")
    for new in ("gavel:type=A3C,weight=0.5", "plain now"):
        res = as_nobody("scontrol", "update", f"JobId={managed}", f"Comment={new}")
        assert res.returncode != 0, new
    assert slurm.show(managed)["Comment"] == "gavel:type=A3C"
    assert slurm.show(plain)["Comment"] == "other-notes"
    # the daemon (root here) may
    slurm.cmd("scontrol", "update", f"JobId={plain}", "Comment=gavel:type=A3C")
    assert slurm.show(plain)["Comment"] == "gavel:type=A3C"
