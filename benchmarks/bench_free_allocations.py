"""What a simulation costs besides its allocations: record every allocation of a run,
then replay them, so the second run builds no problem and solves no LP.

    python benchmarks/bench_free_allocations.py record ALLOCS -- simulate ARGS...
    python benchmarks/bench_free_allocations.py replay ALLOCS -- simulate ARGS...

`record` runs the `slurm-gavel` command line after `--` and pickles, in order, each
allocation the scheduler computes with the ids of the jobs it was computed for.
`replay` runs the same command with scheduler.build_problem and scheduler.allocate
replaced by a lookup of the next recorded allocation (refused when its jobs are not
the ones the round considers: another trace, policy or code). The schedule is then
the same, so the summaries agree (compare the two `--json` files written with
`--no-wall-time`), and the replay's time is the floor of the round loop, start-up
and imports with free allocations: what no faster solver could go below. Time both
with `/usr/bin/time`; the unpickling is in the replay's time (printed on stderr).
"""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path
from typing import Any


class Recorded:
    """The allocations of one run, in order, each with its jobs' ids."""

    def __init__(self) -> None:
        self.items: list[tuple[tuple[str, ...], Any]] = []
        self.next = 0


def _ids(considered: Any) -> tuple[str, ...]:
    return tuple(o.job.id for o, _row in considered)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("record", "replay") or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    mode, path, command = argv[0], Path(argv[1]), argv[3:]
    from slurm_gavel.cli import main as cli_main
    from slurm_gavel.core import scheduler

    rec = Recorded()
    if mode == "record":
        build, allocate = scheduler.build_problem, scheduler.allocate
        pending: list[tuple[str, ...]] = []

        def build_and_note(considered: Any, *args: Any, **kw: Any) -> Any:
            pending.append(_ids(considered))
            return build(considered, *args, **kw)

        def allocate_and_keep(problem: Any, policy: Any, options: Any) -> Any:
            alloc = allocate(problem, policy, options)
            rec.items.append((pending.pop(), alloc))
            return alloc

        setattr(scheduler, "build_problem", build_and_note)  # noqa: B010 (typed module)
        setattr(scheduler, "allocate", allocate_and_keep)  # noqa: B010
    else:
        t0 = time.perf_counter()
        with path.open("rb") as src:
            rec.items = pickle.load(src)
        print(f"unpickled {len(rec.items)} allocations in {time.perf_counter() - t0:.2f} s",
              file=sys.stderr)  # fmt: skip

        def ids_only(considered: Any, *args: Any, **kw: Any) -> Any:
            return _ids(considered)

        def recorded(ids: Any, policy: Any, options: Any) -> Any:
            if rec.next >= len(rec.items) or rec.items[rec.next][0] != ids:
                raise SystemExit(
                    f"allocation {rec.next + 1}: this run's jobs are not the recorded ones "
                    f"(record again with the same command and code)"
                )
            rec.next += 1
            return rec.items[rec.next - 1][1]

        setattr(scheduler, "build_problem", ids_only)  # noqa: B010
        setattr(scheduler, "allocate", recorded)  # noqa: B010
    rc = cli_main(command)
    if mode == "record":
        with path.open("wb") as dst:
            pickle.dump(rec.items, dst, protocol=pickle.HIGHEST_PROTOCOL)
    elif rec.next != len(rec.items):
        print(f"replayed {rec.next} of {len(rec.items)} allocations", file=sys.stderr)
        return 1
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
