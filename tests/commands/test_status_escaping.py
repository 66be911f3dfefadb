"""`slurm-gavel status` prints what users chose (job type, comment parts, reasons) to
the admin's terminal: control characters must arrive escaped, never interpreted."""

from __future__ import annotations

import json

import pytest

from slurm_gavel.cli import main
from slurm_gavel.daemon.state_store import StateStore

HOSTILE = [
    "\x1b[2J\x1b[Hroot owns you",  # clear screen, cursor home
    "A3C\nfake line: daemon not running",  # a forged output line
    "evil\rA3C",  # carriage return over the start of the line
    "\x1b]0;title\x07",  # OSC: set the terminal's title
    "\x9b31m",  # C1 CSI
    "txt\u202egnp.exe",  # bidi override
    "para\u2028graph",  # Unicode line separator
    "back\\x1b[31m",  # a literal backslash that would read as an escape
]


def write_state(state_dir, job_type: str) -> None:
    store = StateStore(state_dir)
    with store:
        store.save(
            {
                "saved_at": 0.0,
                "daemon": {"policy": "max_min_fairness"},
                "scheduler": {"round_index": 3, "jobs": {}},
                "jobs": {
                    "7": {
                        "job_type": job_type,
                        "scale_factor": 1,
                        "state": "HELD",
                        "reason": f"unknown job type {job_type!s}",
                        "gpu_type": None,
                        "nodes": [],
                    }
                },
                "cluster": {"capacity": {"v100": 2}},
            }
        )


@pytest.mark.hostile
@pytest.mark.parametrize("job_type", HOSTILE)
def test_status_escapes_user_chosen_text(tmp_path, capsys, job_type):
    write_state(tmp_path, job_type)
    assert main(["status", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # Nothing a terminal acts on: no C0/C1 controls but the line ends, no bidi/separators
    # (str.splitlines also splits at \r, \x1c-\x1e, \x85 and \u2028: none may be left).
    assert out.count("\n") == len(out.splitlines()) == 6, repr(out)  # no forged lines
    assert all(c.isprintable() for line in out.splitlines() for c in line), repr(out)
    shown = "".join(
        "\\\\" if c == "\\" else c if c.isprintable() else repr(c)[1:-1] for c in job_type
    )
    assert shown in out


def test_status_json_keeps_the_text_exact_and_escaped(tmp_path, capsys):
    write_state(tmp_path, HOSTILE[0])
    assert main(["status", "--state-dir", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\u001b" in out
    assert json.loads(out)["jobs"][0]["job_type"] == HOSTILE[0]
