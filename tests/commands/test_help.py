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


def _imported_commands(monkeypatch, argv: list[str]) -> list[str]:
    import slurm_gavel.cli as cli

    seen: list[str] = []
    real = cli.importlib.import_module

    def record(name: str):
        seen.append(name.rsplit(".", 1)[-1])
        return real(name)

    monkeypatch.setattr(cli.importlib, "import_module", record)
    with pytest.raises(SystemExit):
        cli.main(argv)
    return seen


def test_a_command_builds_only_its_own_parser(monkeypatch, capsys):
    assert _imported_commands(monkeypatch, ["simulate", "--help"]) == ["simulate"]
    assert "--knowledge" in capsys.readouterr().out
    assert _imported_commands(monkeypatch, ["status", "--help"]) == ["status"]


def test_top_level_help_and_typos_build_every_command(monkeypatch, capsys):
    assert _imported_commands(monkeypatch, ["--help"]) == COMMANDS
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    assert _imported_commands(monkeypatch, ["simulat", "--help"]) == COMMANDS
    assert "invalid choice: 'simulat'" in capsys.readouterr().err
    # the top-level help before a command lists every command, not that one alone
    assert _imported_commands(monkeypatch, ["-h", "status"]) == COMMANDS
