"""An N/M progress line with an ETA on stderr, for commands that measure one thing
after another (`slurm-gavel profile`).

On a terminal, the line of the measurement under way is rewritten in place and each
result stays as a line; elsewhere (a log, CI) there is one line per measurement, no
carriage returns.
"""

from __future__ import annotations

import sys
from typing import TextIO

from slurm_gavel.commands.status import printable


class Progress:
    def __init__(
        self, total: int, done: int, earlier_seconds: list[float], stream: TextIO | None = None
    ) -> None:
        self.total = total
        self.done_count = done
        self.took = list(earlier_seconds)  # durations, the recorded ones included
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()

    def eta(self) -> str:
        left = self.total - self.done_count
        if left <= 0:
            return "0:00:00"
        if not self.took:
            return "unknown until the first measurement"
        s = round(left * sum(self.took) / len(self.took))
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"

    def start(self, label: str) -> None:
        if self.tty:
            n = self.done_count + 1
            line = f"[{n}/{self.total}] measuring {printable(label)}...; ETA {self.eta()}"
            self.stream.write(f"\r\x1b[K{line}")
            self.stream.flush()

    def done(self, label: str, result: str, seconds: float) -> None:
        self.done_count += 1
        self.took.append(seconds)
        self.clear()
        self.stream.write(
            f"[{self.done_count}/{self.total}] {printable(label)}: {result} in {seconds:.1f} s; "
            f"ETA {self.eta()}\n"
        )
        self.stream.flush()

    def clear(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
