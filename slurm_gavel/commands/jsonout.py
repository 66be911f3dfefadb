"""`--json` means the same in every command: JSON on stdout instead of the table
(`--json` alone, or `--json -`), or into FILE with the table still on stdout."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

STDOUT = "-"


def add_json_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--json",
        nargs="?",
        const=STDOUT,
        metavar="FILE",
        help=(
            f"{what} as JSON: on stdout instead of the table (--json alone or --json -), "
            "or written to FILE with the table still printed"
        ),
    )


def to_stdout(args: argparse.Namespace) -> bool:
    """True when the JSON replaces the table on stdout."""
    return bool(getattr(args, "json", None) == STDOUT)


def write_json(dest: str, data: Any) -> None:
    """`data` to stdout (dest "-") or to the file `dest` (its folder created)."""
    text = json.dumps(data, indent=2) + "\n"  # ensure_ascii: control characters escaped
    if dest == STDOUT:
        sys.stdout.write(text)
        return
    p = Path(dest)
    if p.parent != Path(""):
        p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
