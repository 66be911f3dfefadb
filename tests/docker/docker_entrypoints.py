"""The entry points docker/ may run: those the test suite runs natively, checked with
their own argument parsers (the static checks of docker/, see test_compose_static.py)."""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
from collections.abc import Callable
from pathlib import Path

from slurm_gavel import cli
from slurm_gavel_dev import localcluster_cli

REPO = Path(__file__).resolve().parents[2]

# Entry points the test suite runs natively, by their path in the image's WORKDIR,
# with the parser that decides what they accept.
TESTED_ENTRYPOINTS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "tools/local-cluster": localcluster_cli.parser,
    ".venv/bin/slurm-gavel": cli.build_parser,
}
# Files the image builds rather than copies, and the RUN command that must build them.
BUILT_IN_IMAGE = {
    ".venv/bin/slurm-gavel": "tools/setup",
    "spank/build/slurm-gavel.so": "make -C spank",
}
SETUP_SCRIPTS = ("tools/setup", "make -C spank")


def _exe(argv: list[str], workdir: str) -> str:
    return argv[0].removeprefix(workdir.rstrip("/") + "/")


def check_argv(argv: list[str], workdir: str) -> list[str]:
    """argv runs a tested entry point, with arguments that entry point accepts."""
    if not argv:
        return ["empty command"]
    exe = _exe(argv, workdir)
    if exe not in TESTED_ENTRYPOINTS:
        return [f"{argv[0]} is not a tested entry point ({', '.join(TESTED_ENTRYPOINTS)})"]
    if exe not in BUILT_IN_IMAGE and not (REPO / exe).is_file():
        return [f"{exe}: no such file in the repository"]
    try:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            TESTED_ENTRYPOINTS[exe]().parse_args(argv[1:])
    except SystemExit:
        return [f"{shlex.join(argv)}: rejected by its parser: {err.getvalue().strip()}"]
    return []


def parse_argv(argv: list[str], workdir: str) -> tuple[str, argparse.Namespace]:
    """(entry point, parsed arguments) of an argv that check_argv accepted."""
    exe = _exe(argv, workdir)
    return exe, TESTED_ENTRYPOINTS[exe]().parse_args(argv[1:])
