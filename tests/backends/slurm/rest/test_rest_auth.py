"""Where the slurmrestd token may go and which token files are accepted
(slurm/rest/auth.py): hostile and careless files are refused naming the fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.rest.auth import (
    TokenFileError,
    check_token_transport,
    read_token_file,
)
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.errors import InputError


@pytest.mark.parametrize(
    "url",
    [
        "http://ctl:6820",
        "http://10.0.0.5:6820",
        "http://[2001:db8::1]:6820",
        "http://localhost.evil.org",
    ],
)
def test_a_token_over_plain_http_to_another_host_is_refused(url):
    """Before: accepted; the operator's JWT went over the network in clear text."""
    with pytest.raises(InputError, match="refusing to send the slurmrestd token over plain http"):
        rest_backend(url=url, token="a.b.c")


@pytest.mark.parametrize(
    "url",
    ["https://ctl:6820", "http://localhost:6820", "http://127.0.0.1:6820", "http://127.0.0.2",
     "http://[::1]:6820", "unix:/run/slurmrestd.sock", "/run/slurmrestd.sock"],
)  # fmt: skip
def test_a_token_may_go_over_https_unix_sockets_and_loopback(url):
    check_token_transport(url)
    rest_backend(url=url, token="a.b.c")


def test_plain_http_without_a_token_is_left_alone():
    rest_backend(url="http://ctl:6820")  # no credential to leak


def token_file(tmp_path: Path, text: str = "aaa.bbb.ccc\n", mode: int = 0o600) -> Path:
    path = tmp_path / "jwt"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_a_private_token_file_is_read_and_scontrol_output_accepted(tmp_path):
    assert read_token_file(token_file(tmp_path)) == "aaa.bbb.ccc"
    assert read_token_file(token_file(tmp_path, "SLURM_JWT=x.y.z\n", 0o400)) == "x.y.z"


@pytest.mark.hostile
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o660])
def test_a_token_file_others_can_read_or_change_is_refused_naming_the_fix(tmp_path, mode):
    """Before: read whatever its mode."""
    path = token_file(tmp_path, mode=mode)
    with pytest.raises(TokenFileError) as e:
        rest_backend(url="https://ctl:6820", token_file=path)
    msg = str(e.value)
    assert str(path) in msg and f"mode {mode:04o}" in msg and f"chmod 600 {path}" in msg


@pytest.mark.hostile
@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_token_file_of_another_user_is_refused(tmp_path):
    path = token_file(tmp_path)
    os.chown(path, 65534, 65534)
    with pytest.raises(TokenFileError, match=r"owned by uid 65534, not by the daemon's user"):
        read_token_file(path)


@pytest.mark.hostile
def test_a_fifo_in_place_of_the_token_file_is_refused_without_hanging(tmp_path):
    path = tmp_path / "jwt"
    os.mkfifo(path, 0o600)
    with pytest.raises(TokenFileError, match="not a regular file"):
        read_token_file(path)


@pytest.mark.hostile
@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null", "."])
def test_a_device_or_directory_is_refused(tmp_path, target):
    path = tmp_path / "jwt"
    path.symlink_to(Path(target).resolve() if target == "." else target)
    with pytest.raises(TokenFileError, match="not a regular file"):
        read_token_file(path)


@pytest.mark.hostile
@pytest.mark.parametrize(
    "text",
    ["", "\n", "a.b\r\nX-SLURM-USER-NAME: root", "a.b c.d", "not a token", "a" * 70000, "é.b"],
    ids=["empty", "newline", "header-injection", "space", "words", "huge", "non-ascii"],
)
def test_a_file_without_a_token_is_refused(tmp_path, text):
    with pytest.raises(TokenFileError, match=r"does not hold a JWT|too big"):
        read_token_file(token_file(tmp_path, text))


def test_a_missing_token_file_names_it(tmp_path):
    with pytest.raises(TokenFileError, match=r"jwt: cannot open it \(No such file"):
        read_token_file(tmp_path / "jwt")
