"""`slurm-gavel refused`: why your last submission or update was refused at submit.

Slurm 22.05's sbatch and scontrol print a job_submit.lua refusal as "Unspecified
error", without the reason the Lua gave (24.11 and 26.05 print it). The Lua also
writes each user's last refusal to <dir>/<uid> (REFUSALS_DIR at the top of
conf/slurm/job_submit.lua; admin guide section 5); this command prints the caller's
own, and nobody else's: the file is named by the caller's uid, never by an argument.

The file is written by slurmctld from the Lua's own words (with at most 40 characters
of the user's values in them), but it is read here as untrusted text all the same:
bounded, one line, control characters shown as '?'.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from slurm_gavel.commands.jsonout import STDOUT, add_json_option, write_json
from slurm_gavel.errors import InputError

SUMMARY = "why your last sbatch/scontrol was refused at submit (22.05 shows 'Unspecified error')"
DEFAULT_DIR = "/var/spool/slurm-gavel/refused"  # job_submit.lua's REFUSALS_DIR
MAX_BYTES = 4096


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Print the reason job_submit.lua gave for your last refused submission or job
    update (sbatch, salloc, srun, scontrol update): Slurm 22.05 shows it only as
    "Unspecified error". Reads the file the Lua wrote for your uid."""
    p.add_argument(
        "--dir",
        default=os.environ.get("SLURM_GAVEL_REFUSALS_DIR", DEFAULT_DIR),
        help=f"the Lua's REFUSALS_DIR (default {DEFAULT_DIR}, or $SLURM_GAVEL_REFUSALS_DIR)",
    )
    add_json_option(p, "the refusal as {time, reason}")


def read_refusal(folder: Path, uid: int) -> tuple[int, str] | None:
    """(epoch seconds, reason) of the uid's last refusal; None when there is none."""
    try:
        with open(folder / str(uid), "rb") as f:
            raw = f.read(MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise InputError(f"cannot read {folder / str(uid)}: {e.strerror}") from None
    text = raw.decode("utf-8", "replace").split("\n", 1)[0]
    stamp, sep, reason = text.partition("\t")
    if not sep or not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
        raise InputError(
            f"{folder / str(uid)} is not a refusal the Lua wrote ('<epoch>\\t<reason>'); "
            "ask your admin to check REFUSALS_DIR"
        )
    clean = "".join(c if c.isprintable() else "?" for c in reason)
    return int(stamp), clean


def run(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    if not folder.is_dir():
        raise InputError(
            f"{folder}: no such folder; the admin sets it up beside job_submit.lua "
            "(REFUSALS_DIR, admin guide section 5), or give --dir"
        )
    got = read_refusal(folder, os.getuid())
    if args.json:
        doc = None if got is None else {"time": got[0], "reason": got[1]}
        write_json(args.json, {"refusal": doc})
        if args.json == STDOUT:
            return 0
    if got is None:
        print("no refused submission of yours is on record")
        return 0
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(got[0]))
    print(f"{when}  {got[1]}")
    return 0
