"""Write the site's list of known job types (one per line) for the SPANK plugin.

``python -m slurm_gavel.commands.jobtypes [--table FILE] --out FILE`` (``make -C spank
job-types`` runs it). The plugin refuses ``--gavel-job-type`` values not in this list,
so the list must come from the same throughput table the daemon uses. An admin tool of
the full package (it reads the throughput table and the comment grammar), not of the
job library that training nodes install alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from slurm_gavel.domain.comment_grammar import MAX_TYPE_CHARS, TYPE_CHARS
from slurm_gavel.domain.throughputs import ThroughputTable, load_table


def fits_comment_grammar(job_type: str) -> bool:
    """A type a gavel:type= comment can carry (the grammar's type rule)."""
    return (
        0 < len(job_type) <= MAX_TYPE_CHARS
        and all(c in TYPE_CHARS for c in job_type)
        and job_type == job_type.strip(" ")
    )


def job_types_text(table: ThroughputTable) -> str:
    """The file's text: a header comment, then the table's job types in table order."""
    bad = [t for t in table.job_types if not fits_comment_grammar(t)]
    if bad:
        # The comment grammar (slurm_gavel/domain/comment_grammar.py) cannot carry these:
        # no job could name them, and the SPANK plugin would refuse them.
        raise ValueError(
            f"job types must not contain ',' or '=' or anything but A-Z a-z 0-9 space "
            f"._()- ({MAX_TYPE_CHARS} characters at most, no space first or last): {bad}"
        )
    lines = [f"# slurm-gavel job types from: {table.source or 'throughput table'}"]
    lines += table.job_types
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m slurm_gavel.commands.jobtypes", description=__doc__)
    p.add_argument("--table", help="throughput table (default: the one shipped)")
    p.add_argument("--out", required=True, help="file to write ('-' for stdout)")
    args = p.parse_args(argv)
    text = job_types_text(load_table(args.table))
    if args.out == "-":
        sys.stdout.write(text)
    else:
        # replace, never rewrite in place: sbatch processes read it at any moment
        out = Path(args.out)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # per process: builds run at once
        tmp.write_text(text)
        tmp.replace(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
