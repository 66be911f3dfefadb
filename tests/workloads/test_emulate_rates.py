"""GAVEL_EMULATE_RATES: a job of no known type paces to its own speed per GPU type
(workloads/emulate.py, the learned rows' live tests)."""

from __future__ import annotations

import pytest

from workloads import emulate


def test_rates_name_each_gpu_types_speed():
    assert emulate.rates_from("v100=20,p100=10.5,k80=2") == {
        "v100": 20.0,
        "p100": 10.5,
        "k80": 2.0,
    }
    emu = emulate.emulation_for_rates({"v100": 20.0, "k80": 2.0}, {"SLURMD_NODENAME": "k80-1"},
                                      lambda node: "gpu:k80:4")  # fmt: skip
    assert (emu.gpu_type, emu.rate) == ("k80", 2.0)


@pytest.mark.parametrize(
    "text",
    ["", "v100", "v100=", "=3", "v100=0", "v100=-1", "v100=nan", "v100=inf", "v100=1,v100=2"],
)
def test_bad_rates_are_refused_with_the_form(text):
    with pytest.raises(ValueError, match="write GPU_TYPE=STEPS_PER_S"):
        emulate.rates_from(text)
