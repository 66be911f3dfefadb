"""workloads/ is a top-level folder of the repository, not part of the installed package.

`python -m pytest` (tools/test) has the repository root on sys.path; plain `pytest` does
not, and `workloads` would then resolve to this test folder. Put the root first.
"""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
