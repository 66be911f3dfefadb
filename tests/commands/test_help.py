"""Every option of every subcommand says what it does in --help."""

from __future__ import annotations

import argparse

import pytest

from slurm_gavel.cli import COMMANDS, build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_command_is_registered():
    assert sorted(_subparsers(build_parser())) == sorted(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_has_help(name):
    sub = _subparsers(build_parser())[name]
    assert sub.description, f"slurm-gavel {name} has no description"
    missing = [
        "/".join(a.option_strings) or a.dest
        for a in sub._actions
        if not isinstance(a, argparse._HelpAction)
        and (not a.help or a.help == argparse.SUPPRESS or len(a.help.split()) < 2)
    ]
    assert not missing, f"slurm-gavel {name}: options without help: {missing}"
    sub.format_help()  # every help string formats (a stray % would raise here)


def test_status_h_is_noheader_and_help_is_long_only(capsys):
    sub = _subparsers(build_parser())["status"]
    assert sub.parse_args(["-h"]).noheader is True
    with pytest.raises(SystemExit):
        sub.parse_args(["--help"])
    assert "--noheader" in capsys.readouterr().out
