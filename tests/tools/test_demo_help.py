"""`tools/demo --help` is where the demo's variants are described (the README names only
the default run): every option, policy and file its text names exists, every variant
it lists parses, and the text names no issue number."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from slurm_gavel.policies import policy_names
from slurm_gavel_dev import demo_options
from slurm_gavel_dev.demo_options import parse_args, parser

REPO = Path(__file__).resolve().parents[2]


def help_text() -> str:
    return parser().format_help()


def variant_lines() -> list[str]:
    """The command lines of the epilog's variant list ("  --policy X", two spaces in);
    "--jobs, --speed, --topology" lists options that take the user's own values."""
    lines = re.findall(r"^  (--\S.*)$", demo_options.EPILOG, re.MULTILINE)
    return [line for line in lines if "," not in line]


def test_the_help_shows_the_variants_and_where_their_figures_are() -> None:
    text = help_text()
    assert "variants:" in text and "about 6 minutes" in text
    assert 'benchmarks/README.md, "The demo"' in text
    assert len(variant_lines()) >= 5, variant_lines()


def test_every_option_the_help_names_is_an_option_of_the_demo() -> None:
    known = {s for a in parser()._actions for s in a.option_strings}
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", demo_options.DESCRIPTION))
    named |= set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", demo_options.EPILOG))
    named -= {"--emulate-gpu-speed", "--gavel-job-type"}  # the job library's, sbatch's
    assert named, "the pattern finds the options at all"
    assert not named - known, f"the help names options the demo lacks: {named - known}"


def test_every_policy_the_help_names_is_registered() -> None:
    policies = re.findall(r"--policy (\w+)", demo_options.EPILOG)
    assert "max_min_fairness_packed" in policies
    assert not set(policies) - set(policy_names())


def test_every_file_the_help_names_exists() -> None:
    paths = re.findall(r"[\w-]+(?:/[\w.-]+)+\.(?:py|csv|yaml|md)", help_text())
    assert "conf/examples/trace.csv" in paths
    assert [p for p in paths if not (REPO / p).is_file()] == []


@pytest.mark.parametrize("line", variant_lines())
def test_each_variant_of_the_help_parses(line: str) -> None:
    # "[MIN-MAX]" is the optional value of --moldable.
    argv = shlex.split(line.replace("[MIN-MAX]", ""))
    args = parse_args(argv)
    assert args.jobs and args.topology


def test_the_help_names_no_issue_number() -> None:
    assert not re.search(r"issue\s*\d", help_text(), re.IGNORECASE)
