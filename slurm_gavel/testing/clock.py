"""The fake Slurm's clock: time moves only when a test says so (FakeSlurm.advance)."""

from __future__ import annotations

# A plausible epoch second (2027), so that times read like Slurm's.
START = 1_800_000_000.0


class FakeClock:
    """Seconds since the epoch, as time.time() gives them; a SlurmBackend built on the
    fake takes it as its clock, so its graces and fresh-run checks follow the fake."""

    def __init__(self, start: float = START) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def set(self, when: float) -> None:
        if when < self.now:
            raise ValueError(f"the fake clock does not go back ({when} < {self.now})")
        self.now = float(when)
