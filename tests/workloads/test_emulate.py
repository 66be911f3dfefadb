"""The emulated GPU speed (workloads/emulate.py), without Slurm: pacing, GPU type, factor."""

from __future__ import annotations

import subprocess

import pytest

from slurm_gavel.domain.throughputs import load_table
from workloads import emulate

KNOWN = ["k80", "p100", "v100"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def work(self, s: float) -> None:
        self.now += s


def test_pacer_holds_the_rate_when_steps_are_fast() -> None:
    c = FakeClock()
    p = emulate.Pacer(4.0, clock=c.clock, sleep=c.sleep)
    p.begin()
    for _ in range(8):
        c.work(0.05)
        p.step_done()
    assert c.now == pytest.approx(102.0)  # 8 steps at 4 steps/s
    assert p.behind_s == 0.0 and p.slept_s == pytest.approx(2.0 - 8 * 0.05)


def test_pacer_makes_up_a_slow_step_and_reports_falling_behind() -> None:
    c = FakeClock()
    p = emulate.Pacer(2.0, clock=c.clock, sleep=c.sleep)
    p.begin()
    c.work(0.8)  # first step slower than 0.5 s (warm-up)
    p.step_done()
    assert p.behind_s == pytest.approx(0.3) and not c.slept
    c.work(0.1)  # deadline 101.0: sleeps 0.1, back on schedule
    p.step_done()
    assert c.now == pytest.approx(101.0) and p.behind_s == 0.0
    for _ in range(3):  # always slower than the rate: behind grows
        c.work(0.7)
        p.step_done()
    assert p.behind_s == pytest.approx(0.6)


def test_pacer_without_begin_counts_the_first_step_as_on_time() -> None:
    c = FakeClock()
    p = emulate.Pacer(1.0, clock=c.clock, sleep=c.sleep)
    c.work(0.2)
    p.step_done()
    assert not c.slept
    c.work(0.2)
    p.step_done()
    assert c.slept == [pytest.approx(0.8)]


@pytest.mark.parametrize(("gres", "want"), [
    ("gpu:v100:4", "v100"), ("gpu:v100:4(S:0-1)", "v100"), ("craynetwork:1,gpu:k80:2", "k80"),
    ("gpu:tesla_v100:8", "tesla_v100"), ("gpu:4", None), ("(null)", None), ("", None),
])  # fmt: skip
def test_gres_gpu_type(gres: str, want: str | None) -> None:
    assert emulate.gres_gpu_type(gres) == want


def test_gpu_type_from_the_nodes_gres_then_its_name_then_the_override() -> None:
    env = {"SLURMD_NODENAME": "p100-2"}
    assert emulate.resolve_gpu_type(env, KNOWN, lambda n: "gpu:k80:4")[0] == "k80"
    got, how = emulate.resolve_gpu_type(env, KNOWN, lambda n: None)
    assert got == "p100" and "name" in how
    assert (
        emulate.resolve_gpu_type(
            {**env, emulate.ENV_GPU_TYPE: "v100"}, KNOWN, lambda n: "gpu:k80:4"
        )[0]
        == "v100"
    )
    with pytest.raises(ValueError, match="no GPU type"):
        emulate.resolve_gpu_type({"SLURMD_NODENAME": "node7"}, KNOWN, lambda n: "gpu:a100:8")
    with pytest.raises(ValueError, match="SLURMD_NODENAME"):
        emulate.resolve_gpu_type({}, KNOWN, lambda n: None)
    with pytest.raises(ValueError, match="not a GPU type"):
        emulate.resolve_gpu_type({emulate.ENV_GPU_TYPE: "h100"}, KNOWN)


def test_node_gres_parses_scontrol_and_survives_its_failure() -> None:
    def ok(argv, **kw):  # type: ignore[no-untyped-def]
        assert argv[:3] == ["scontrol", "show", "node"] and argv[-1] == "v100-1"
        return subprocess.CompletedProcess(
            argv, 0, "NodeName=v100-1 Arch=x86_64 Gres=gpu:v100:4 NodeAddr=127.0.0.1\n", ""
        )

    def fails(argv, **kw):  # type: ignore[no-untyped-def]
        return subprocess.CompletedProcess(argv, 1, "", "Node v100-1 not found")

    def missing(argv, **kw):  # type: ignore[no-untyped-def]
        raise FileNotFoundError("scontrol")

    assert emulate.node_gres("v100-1", ok) == "gpu:v100:4"
    assert emulate.node_gres("v100-1", fails) is None
    assert emulate.node_gres("v100-1", missing) is None


def test_factor_from_command_line_then_env() -> None:
    assert emulate.factor_from(None, {}) is None
    assert emulate.factor_from(None, {emulate.ENV_SPEED: "0.5"}) == 0.5
    assert emulate.factor_from(2.0, {emulate.ENV_SPEED: "0.5"}) == 2.0
    with pytest.raises(ValueError, match="not a number"):
        emulate.factor_from(None, {emulate.ENV_SPEED: "fast"})
    with pytest.raises(ValueError, match="> 0"):
        emulate.factor_from(0.0, {})


def test_emulated_rate_is_the_published_table_times_the_factor() -> None:
    row = load_table().row("ResNet-50 (batch size 64)", 1)
    env = {"SLURMD_NODENAME": "k80-1"}
    emu = emulate.emulation_for("ResNet-50 (batch size 64)", 1, 0.5, env, lambda n: None)
    assert emu.gpu_type == "k80" and emu.rate == pytest.approx(row["k80"] * 0.5)
    fast = emulate.emulation_for(
        "ResNet-50 (batch size 64)", 1, 0.5, {"SLURMD_NODENAME": "v100-3"}, lambda n: None
    )
    assert fast.rate / emu.rate == pytest.approx(row["v100"] / row["k80"])  # about 7x
    line = emu.describe("ResNet-50 (batch size 64)", "k80-1", "2")
    assert "restart 2 node k80-1 gpu k80" in line and "emulated" in line
