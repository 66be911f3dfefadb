"""`slurm-gavel refused` reads only the caller's own refusal, and reads it as untrusted
text: one bounded printable line, anything else a clear error."""

from __future__ import annotations

import json
import os

import pytest

from slurm_gavel.cli import main
from slurm_gavel.commands.refused import MAX_BYTES, read_refusal
from slurm_gavel.errors import InputError


def write(tmp_path, data: bytes) -> None:
    (tmp_path / str(os.getuid())).write_bytes(data)


def test_the_callers_last_refusal_is_printed(tmp_path, capsys):
    write(tmp_path, b"1795822216\tslurm-gavel: --nodelist/-w cannot be used\n")
    (tmp_path / str(os.getuid() + 1)).write_bytes(b"1\tsomeone else's\n")
    assert main(["refused", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "--nodelist/-w cannot be used" in out and "someone else" not in out
    assert main(["refused", "--dir", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["refusal"]["time"] == 1795822216


def test_none_on_record_and_no_folder(tmp_path, capsys):
    assert main(["refused", "--dir", str(tmp_path)]) == 0
    assert "no refused submission" in capsys.readouterr().out
    assert main(["refused", "--dir", str(tmp_path / "missing")]) != 0
    assert "REFUSALS_DIR" in capsys.readouterr().err


@pytest.mark.parametrize(
    "data",
    [
        b"\x1b[2J\x1b[31mx\tevil\n",  # no epoch
        b"-5\treason\n",
        b"99999999999999999999\treason\n",
        b"",
        b"reason only\n",
    ],
)
def test_a_file_not_in_the_lua_form_is_an_error_naming_it(tmp_path, data):
    write(tmp_path, data)
    with pytest.raises(InputError, match="is not a refusal the Lua wrote"):
        read_refusal(tmp_path, os.getuid())


def test_hostile_reason_text_is_one_printable_bounded_line(tmp_path):
    write(tmp_path, b"12\tbad \x1b[31m\x07 \xff\xfe" + b"x" * 10_000 + b"\nsecond line\n")
    got = read_refusal(tmp_path, os.getuid())
    assert got is not None
    t, reason = got
    assert t == 12 and reason.isprintable() and "second" not in reason
    assert len(reason) <= MAX_BYTES
