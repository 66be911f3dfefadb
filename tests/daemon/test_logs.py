import io
import json
import logging
import shlex

import pytest

from slurm_gavel.daemon.logs import configure, event


def emit(fmt: str) -> str:
    buf = io.StringIO()
    configure(fmt, "info", buf)
    log = logging.getLogger("slurm_gavel.test")
    event(log, "round_done", round=3, duration_s=0.41234567, note='has "quotes" and = sign')
    event(log, "hidden", logging.DEBUG, x=1)
    logging.getLogger("slurm_gavel.other").warning("plain message %d", 7)
    configure("kv", "info")  # restore stderr for the other tests
    return buf.getvalue()


def test_json_lines_carry_event_and_fields():
    lines = [json.loads(x) for x in emit("json").splitlines()]
    assert len(lines) == 2  # the debug event is filtered
    assert lines[0]["event"] == "round_done" and lines[0]["round"] == 3
    assert lines[0]["note"] == 'has "quotes" and = sign'
    assert lines[0]["level"] == "info" and lines[0]["ts"].endswith("Z")
    assert lines[1]["msg"] == "plain message 7" and lines[1]["level"] == "warning"


def test_key_value_lines_split_back_into_the_same_fields():
    first, second = emit("kv").splitlines()
    pairs = dict(tok.split("=", 1) for tok in shlex.split(first))
    assert pairs["event"] == "round_done"
    assert pairs["round"] == "3"
    assert pairs["duration_s"] == "0.412346"
    assert pairs["note"] == 'has "quotes" and = sign'
    assert "msg=" not in first  # the event name is not repeated as a message
    assert 'msg="plain message 7"' in second


@pytest.mark.hostile
def test_user_chosen_text_reaches_the_log_escaped():
    # A job type is whatever the user wrote: ESC sequences, a bidi override, a CR or a
    # line separator must not reach the admin's terminal (journalctl, tail) as such.
    buf = io.StringIO()
    configure("kv", "info", buf)
    hostile = "\x1b[2J\x1b]0;x\x07A3C\r\u202e\u2028\x9b"
    event(logging.getLogger("slurm_gavel.test"), "job_skipped", reason=hostile)
    configure("kv", "info")
    line = buf.getvalue()
    assert line.count("\n") == 1 and all(c.isprintable() for c in line.rstrip("\n"))
    assert (
        dict(tok.split("=", 1) for tok in shlex.split(line))["reason"] == json.dumps(hostile)[1:-1]
    )


def _journal_env(path) -> dict[str, str]:
    st = path.stat()
    return {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}


def _emit_to_file(path, environ, fmt="kv") -> list[str]:
    with open(path, "w") as f:
        configure(fmt, "debug", f, environ)
        log = logging.getLogger("slurm_gavel.test")
        event(log, "dbg", logging.DEBUG, x=1)
        event(log, "inf", note="two\nlines")
        log.warning("warn")
        log.error("err")
        log.critical("crit")
    configure("kv", "info")  # restore stderr for the other tests
    return path.read_text().splitlines()


def test_journal_stderr_lines_carry_their_syslog_priority(tmp_path):
    out = tmp_path / "journal"
    out.touch()
    lines = _emit_to_file(out, _journal_env(out))
    assert [ln[:3] for ln in lines] == ["<7>", "<6>", "<4>", "<3>", "<3>"]
    # The prefix comes once per record: the newline in a field stays escaped.
    assert len(lines) == 5 and lines[1].startswith("<6>ts=")
    assert json.loads(_emit_to_file(out, _journal_env(out), "json")[2][3:])["msg"] == "warn"


@pytest.mark.parametrize(
    "value",
    [None, "", "garbage", "1:", ":2", "-1:2", "12:34"],  # unset, malformed, another file
)
def test_plain_lines_when_stderr_is_not_the_journal(tmp_path, value):
    out = tmp_path / "plain"
    environ = {} if value is None else {"JOURNAL_STREAM": value}
    lines = _emit_to_file(out, environ)
    assert len(lines) == 5 and all(ln.startswith("ts=") for ln in lines)


def test_a_stream_without_a_file_is_not_the_journal():
    buf = io.StringIO()
    configure("kv", "info", buf, {"JOURNAL_STREAM": "1:2"})
    logging.getLogger("slurm_gavel.test").warning("w")
    configure("kv", "info")
    assert buf.getvalue().startswith("ts=")
