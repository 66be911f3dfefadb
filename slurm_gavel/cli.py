"""`slurm-gavel` command line: one module per subcommand under slurm_gavel.commands.

Each command module exposes ``SUMMARY`` (its line in ``slurm-gavel --help``),
``add_arguments(parser)``, whose docstring is the command's ``--help`` description,
optional ``PARSER_OPTIONS`` (keyword arguments of the parser) and ``run(args)``,
which returns the exit code (a command with sub-commands sets ``func`` on each
instead). Errors the user can fix (:class:`InputError`) and solver failures
(:class:`SolveError`) become one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from types import ModuleType
from typing import Any

from slurm_gavel import __version__
from slurm_gavel.errors import InputError, SolveError

# Subcommands in the order `--help` lists them.
COMMANDS = [
    "run",
    "status",
    "explain",
    "refused",
    "allocate",
    "simulate",
    "profile",
    "trace",
    "report",
]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only` (a name in COMMANDS), that subcommand alone.

    Each command module imports what it needs (the simulator numpy and HiGHS, the
    daemon its config stack); importing all twelve to run one cost ~0.15 s of every
    invocation (`slurm-gavel --version` took 0.7 s), so main() builds only the
    command it was given and the whole parser for `--help`, `--version` or a typo.
    """
    parser = argparse.ArgumentParser(
        prog="slurm-gavel",
        description="Heterogeneity-aware GPU scheduling (Gavel's policies) for Slurm clusters.",
    )
    parser.add_argument("--version", action="version", version=f"slurm-gavel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS if only is None else [only]:
        add_command(sub, name, importlib.import_module(f"slurm_gavel.commands.{name}"))
    return parser


def add_command(sub: Any, name: str, module: ModuleType) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=module.SUMMARY,
        description=inspect.getdoc(module.add_arguments),
        **getattr(module, "PARSER_OPTIONS", {}),
    )
    module.add_arguments(p)
    if hasattr(module, "run"):
        p.set_defaults(func=module.run)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # A command first: its parser alone. Anything else (-h, --version, a typo, nothing)
    # gets the whole parser, so the top-level help and errors list every command.
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    args.argv = argv  # --json's meta.command
    try:
        code: int = args.func(args)
    except InputError as e:
        print(f"slurm-gavel {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except SolveError as e:
        print(f"slurm-gavel {args.command}: solver: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"slurm-gavel {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
