"""tools/test's full run, with every tool it calls replaced by a stub that records its
arguments: a release's few failed Slurm tests run once more alone after every part, a
pass there is printed FLAKY and does not fail the run, a second failure does, and a
part with more failures than the limit fails without a second run."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The stub python: `-c ...` (munged) succeeds; `-m pytest ...` plays one part. A part's
# first run fails the tests listed in $FAIL_<release> ("a b c", pytest node ids); a
# second run (node ids as arguments) fails those listed in $FAIL_AGAIN_<release>.
STUB_PYTHON = r"""#!/usr/bin/env bash
echo "python $*" >> "$STUB_CALLS"
[[ "$1" == "-c" ]] && exit 0
rel="${SLURM_GAVEL_SLURM:-rest}"
key="${rel//./_}"
ids=()
for a in "$@"; do [[ "$a" == tests/* ]] && ids+=("$a"); done
if [[ ${#ids[@]} -eq 0 ]]; then
  var="FAIL_$key"
  fails="${!var:-}"
  echo "collected 10 items"
  if [[ -z "$fails" ]]; then echo "10 passed"; exit 0; fi
  for t in $fails; do echo "FAILED $t - AssertionError: first run"; done
  exit 1
fi
var="FAIL_AGAIN_$key"
again="${!var:-}"
rc=0
for t in "${ids[@]}"; do
  if [[ " $again " == *" $t "* ]]; then echo "FAILED $t - AssertionError: again"; rc=1; fi
done
[[ $rc -eq 0 ]] && echo "${#ids[@]} passed"
exit $rc
"""


def _tree(tmp_path: Path) -> Path:
    """A copy of tools/test in a tree whose tools are stubs."""
    root = tmp_path / "repo"
    (root / "tools").mkdir(parents=True)
    shutil.copy(REPO / "tools" / "test", root / "tools" / "test")
    (root / "spank").mkdir()
    (root / "spank" / "Makefile").write_text("all:\n\t@true\n")
    ok = "#!/usr/bin/env bash\nexit 0\n"
    stubs = {
        "tools/setup": ok,
        ".venv/bin/ruff": ok,
        ".venv/bin/mkdocs": ok,
        ".venv/bin/mypy": "#!/usr/bin/env bash\necho 'Success: no issues found'\n",
        ".venv/bin/python": STUB_PYTHON,
    }
    for rel, text in stubs.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return root


def _run(tmp_path: Path, **fails: str) -> tuple[int, str, list[str]]:
    root = _tree(tmp_path)
    calls = tmp_path / "calls"
    calls.touch()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM_GAVEL")},
        "STUB_CALLS": str(calls),
        "SLURM_GAVEL_INSTALL_CHECK": "0",
        **fails,
    }
    res = subprocess.run(
        ["bash", "tools/test"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    out = res.stdout + res.stderr
    # tools/test keeps its logs in a /tmp/sgt.* folder of its own: removed here
    for logs in set(re.findall(r"\(log: (/tmp/sgt\.[A-Za-z0-9]+)/", out)):
        shutil.rmtree(logs, ignore_errors=True)
    return res.returncode, out, calls.read_text().splitlines()


def _reruns(calls: list[str]) -> list[str]:
    return [c for c in calls if "-m pytest" in c and " tests/" in c]


@pytest.mark.skipif(shutil.which("make") is None, reason="tools/test runs make")
def test_a_failure_that_passes_alone_is_flaky_and_the_run_passes(tmp_path):
    rc, out, calls = _run(tmp_path, FAIL_22_05="tests/a.py::t[22.05] tests/b.py::u[22.05-x]")
    assert rc == 0, out
    (again,) = _reruns(calls)
    assert again.endswith("tests/a.py::t[22.05] tests/b.py::u[22.05-x]"), again
    assert "[test] FLAKY: tests/a.py::t[22.05] failed beside" in out
    assert "[test] FLAKY: tests/b.py::u[22.05-x] failed beside" in out
    assert "22.05-again:0" in out


@pytest.mark.skipif(shutil.which("make") is None, reason="tools/test runs make")
def test_a_failure_that_fails_again_fails_the_run(tmp_path):
    rc, out, calls = _run(
        tmp_path,
        FAIL_24_11="tests/a.py::t[24.11] tests/c.py::v[24.11]",
        FAIL_AGAIN_24_11="tests/c.py::v[24.11]",
    )
    assert rc == 1, out
    assert len(_reruns(calls)) == 1
    assert "24.11-again:1" in out
    assert "FLAKY: tests/c.py" not in out


NOTHING_AGAIN = {
    "all green": ({}, 0),
    # more failures than the limit: a real break, no second run
    "four failed": ({"FAIL_26_05": " ".join(f"tests/a.py::t{i}[26.05]" for i in range(4))}, 1),
    # the unit tests' part is never run again
    "the rest failed": ({"FAIL_rest": "tests/core/test_x.py::t"}, 1),
}


@pytest.mark.skipif(shutil.which("make") is None, reason="tools/test runs make")
@pytest.mark.parametrize("case", NOTHING_AGAIN)
def test_nothing_is_run_again(tmp_path, case):
    fails, want = NOTHING_AGAIN[case]
    rc, out, calls = _run(tmp_path, **fails)
    assert rc == want, out
    assert _reruns(calls) == [] and "FLAKY" not in out
