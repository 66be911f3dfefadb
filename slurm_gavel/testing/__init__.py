"""Testing helpers shipped with slurm-gavel, for its own tests and a centre's.

FakeSlurm is an in-memory Slurm with its own clock (FakeClock), and FakeTransport puts
it behind the SlurmTransport protocol, so that the unmodified SlurmBackend runs on it:

    from slurm_gavel.testing import FakeSlurm, fake_backend

    slurm = FakeSlurm()                      # the local test cluster's nodes
    job = slurm.submit("gavel:type=A3C", gres="gpu:2")   # held on arrival (the Lua)
    backend = fake_backend(slurm)
    backend.observe()
    ...                                      # backend.act(placement)
    slurm.advance(1)                         # the scheduler starts the released job
    backend.transport.acts()                 # the commands the round issued

What it models, and which contract test pins each behaviour against real Slurm, is
listed in CONTRIBUTING.md, "Testing against the fake".
"""

from slurm_gavel.testing.clock import FakeClock
from slurm_gavel.testing.cluster import FakeSlurm, FakeSlurmError
from slurm_gavel.testing.fake_transport import FakeTransport, fake_backend
from slurm_gavel.testing.fakes import OnSignal, Refused, Script
from slurm_gavel.testing.owner import OwnerError

__all__ = [
    "FakeClock",
    "FakeSlurm",
    "FakeSlurmError",
    "FakeTransport",
    "OnSignal",
    "OwnerError",
    "Refused",
    "Script",
    "fake_backend",
]
