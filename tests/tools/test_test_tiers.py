"""tools/test's tiers: `--help` names every test file the quick tier leaves out for being
slow (a test marked slow and not slurm), so that nobody takes the quick tier for the
whole suite; `--quick` runs the tests that need no Slurm, in parallel."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _marks(nodes: list[ast.expr]) -> set[str]:
    """The pytest.mark.NAME names in decorators or a pytestmark value."""
    out = set()
    for node in nodes:
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Attribute)
                and sub.value.attr == "mark"
            ):
                out.add(sub.attr)
    return out


def slow_only_files(repo: Path = REPO) -> set[str]:
    """Test files with a test marked slow and not slurm (by itself or its module)."""
    found = set()
    for path in sorted((repo / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        module = _marks(
            [n.value for n in tree.body if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)]
        )  # fmt: skip
        tests: list[tuple[set[str], ast.AST]] = []
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                outer = _marks(node.decorator_list)
                tests += [(outer, f) for f in node.body if isinstance(f, ast.FunctionDef)]
            elif isinstance(node, ast.FunctionDef):
                tests.append((set(), node))
        for outer, f in tests:
            assert isinstance(f, ast.FunctionDef)
            if not f.name.startswith("test"):
                continue
            marks = module | outer | _marks(f.decorator_list)
            if "slow" in marks and "slurm" not in marks:
                found.add(str(path.relative_to(repo)))
    return found


def test_help_names_every_file_the_quick_tier_leaves_out_as_slow():
    res = subprocess.run(
        ["bash", str(REPO / "tools" / "test"), "--help"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    files = slow_only_files()
    assert "tests/job/test_world_resize.py" in files  # the scan sees the known ones
    missing = sorted(f for f in files if f not in res.stdout)
    assert not missing, f"tools/test --help does not name these slow files: {missing}"
    assert "--quick" in res.stdout and "not slurm and not slow" in res.stdout


def test_the_scan_reads_module_class_and_function_marks(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text(
        "import pytest\npytestmark = [pytest.mark.slow]\ndef test_x():\n    pass\n"
    )
    (tests / "test_b.py").write_text(
        "import pytest\n@pytest.mark.slow\n@pytest.mark.slurm\ndef test_x():\n    pass\n"
    )
    (tests / "test_c.py").write_text(
        "import pytest\nclass TestC:\n    @pytest.mark.slow\n    def test_y(self):\n        pass\n"
    )
    (tests / "test_d.py").write_text("def test_fast():\n    pass\n")
    assert slow_only_files(tmp_path) == {"tests/test_a.py", "tests/test_c.py"}
