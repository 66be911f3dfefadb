"""The plugin builds against the installed spank.h and its type list follows the table."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from build_lock import build_lock
from spank_build import PLUGIN, REPO, TYPES, ensure_built

from slurm_gavel.commands.jobtypes import job_types_text, main
from slurm_gavel.domain.throughputs import ThroughputTable, load_table

BUILD_ERROR = ensure_built()

needs_headers = pytest.mark.skipif(
    not Path("/usr/include/slurm/spank.h").exists(), reason="libslurm-dev not installed"
)


@needs_headers
def test_plugin_builds_and_exports_the_spank_hooks() -> None:
    assert BUILD_ERROR is None, BUILD_ERROR
    syms = subprocess.run(
        ["nm", "-D", "--defined-only", str(PLUGIN)], capture_output=True, text=True, check=True
    ).stdout
    for hook in ("slurm_spank_init", "slurm_spank_init_post_opt", "plugin_name", "plugin_version"):
        assert hook in syms


@needs_headers
def test_type_list_beside_the_plugin_is_the_default_table() -> None:
    assert BUILD_ERROR is None, BUILD_ERROR
    lines = [x for x in TYPES.read_text().splitlines() if x and not x.startswith("#")]
    assert lines == load_table().job_types


def test_type_list_from_another_table(tmp_path: Path) -> None:
    table = ThroughputTable(alone={("my-llm", 1): {"a100": 1.0}, ("A3C", 1): {"a100": 2.0}})
    table.save(tmp_path / "t.json")
    assert main(["--table", str(tmp_path / "t.json"), "--out", str(tmp_path / "types")]) == 0
    assert (tmp_path / "types").read_text().splitlines()[1:] == ["my-llm", "A3C"]


@pytest.mark.parametrize("bad", ["a,b", "a=b", "GPT-2/small", "x\ny", "\u540d", " lead", "x" * 65])
def test_types_that_would_break_the_comment_form_are_refused(bad: str) -> None:
    # the shared grammar (slurm_gavel/domain/comment_grammar.py): no comment could name such a type
    with pytest.raises(ValueError, match="must not contain"):
        job_types_text(ThroughputTable(alone={(bad, 1): {"x": 1.0}}))


def test_install_writes_plugin_types_and_plugstack_line(tmp_path: Path) -> None:
    if BUILD_ERROR is not None:
        pytest.skip(BUILD_ERROR)
    with build_lock():
        subprocess.run(
            ["make", "-C", str(REPO / "spank"), "install", f"DESTDIR={tmp_path}"],
            check=True,
            capture_output=True,
        )
    line = (tmp_path / "etc/slurm/plugstack.conf.d/slurm-gavel.conf").read_text().splitlines()[-1]
    assert line == (
        "optional /usr/lib/slurm-gavel/slurm-gavel.so types=/etc/slurm/gavel-job-types.txt hold=no"
    )
    assert (tmp_path / "usr/lib/slurm-gavel/slurm-gavel.so").exists()
    assert (tmp_path / "etc/slurm/gavel-job-types.txt").read_text() == TYPES.read_text()
