"""SIGHUP (`systemctl reload slurm-gavel`) to a running `slurm-gavel run` on the real
local Slurm cluster: a new policy is used from the next round on; a broken config is
refused with an error naming the problem while the daemon runs on with the old one."""

from __future__ import annotations

import signal

import pytest
from waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

JOB_TYPES = ("ResNet-50 (batch size 64)", "A3C", "Recommendation (batch size 2048)")


def test_sighup_changes_the_policy_and_a_broken_config_keeps_the_daemon(scenario):
    sc = scenario
    for job_type in JOB_TYPES:
        for _ in range(2):
            sc.submit(job_type, steps=30)
    daemon = sc.daemon.start()
    cfg = sc.daemon.config
    original = cfg.read_text()

    def allocation(policy: str):
        doc = sc.state_doc()
        alloc = doc and doc["scheduler"]["allocation"]
        return doc if alloc and alloc["policy"] == policy else None

    wait_for(lambda: allocation("max_min_fairness"), 60, "a first allocation")

    cfg.write_text(original.replace("policy: max_min_fairness", "policy: max_sum_throughput"))
    daemon.send_signal(signal.SIGHUP)
    (reloaded,) = wait_for(lambda: sc.daemon.events("config_reloaded"), 30, "the reload")
    assert reloaded["changed"] == "policy" and reloaded["policy"] == "max_sum_throughput"
    doc = wait_for(lambda: allocation("max_sum_throughput"), 30, "a round with the new policy")
    assert doc["daemon"]["policy"] == "max_sum_throughput"
    after = [
        r for r in sc.daemon.events("round") if r["round"] >= doc["scheduler"]["round_index"] - 1
    ]
    assert after and after[0]["reallocated"], after

    # A typo: refused, named, and the daemon goes on with max_sum_throughput.
    cfg.write_text(original.replace("policy: max_min_fairness", "policy: max_sum_thruput"))
    daemon.send_signal(signal.SIGHUP)
    (refused,) = wait_for(lambda: sc.daemon.events("config_reload_refused"), 30, "the refusal")
    assert refused["level"] == "error", refused
    assert "policy: unknown value 'max_sum_thruput'" in refused["error"], refused
    assert "did you mean 'max_sum_throughput'" in refused["error"], refused
    rounds_then = sc.state_doc()["scheduler"]["round_index"]
    wait_for(lambda: sc.state_doc()["scheduler"]["round_index"] >= rounds_then + 2, 30,
             "two more rounds after the refused reload")  # fmt: skip
    assert daemon.poll() is None, "the daemon died on a broken config"
    assert allocation("max_sum_throughput"), sc.state_doc()["scheduler"]["allocation"]

    states = sc.wait_finished(list(sc.managed), timeout=150)
    sc.assert_all_completed(states)
    assert not sc.daemon.events("round_failed")
    assert sc.daemon.stop() == 0
