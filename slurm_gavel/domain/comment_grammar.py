"""Which Slurm jobs slurm-gavel manages, and what they declare about themselves.

A job is managed when its comment follows the grammar below and it sits in a
partition the daemon manages (checked by the backend). The comment is the
transport on purpose: every Slurm version stores and reports it, sbatch/srun accept
``--comment``, the SPANK plugin fills it from ``--gavel-job-type``, and a
job_submit.lua holds the job on arrival.

The grammar has three enforcers that must accept exactly the same strings: this
module (the daemon), conf/slurm/job_submit.lua (slurmctld, at submit and on
update) and spank/gavel_grammar.h (the SPANK plugin, in sbatch/srun/salloc).
tests/data/comment_grammar.json is the shared table of accepted and refused
strings, run against all three; docs/admin-guide.md section 5 is the written spec.

    comment = "gavel:" [pair *("," pair)]    at most 256 bytes, all of it
    pair    = key "=" value                  keys lower case, each at most once
    type    = 1-64 of [A-Za-z0-9 ._()-], not starting or ending with a space
    scale   = integer 1..1024                GPUs (Gavel's scale factor), or
            / integer "-" integer            a range MIN-MAX, 1 <= MIN <= MAX <= 1024
                                             (moldable; placed at MIN until the daemon chooses)
    steps   = integer 1..10^12               total steps, for finish-time policies
    slo     = decimal, 0 < slo <= 10^9       seconds after submission
    grace   = integer 1..86400               seconds the job needs to checkpoint and exit
                                             (capped by the admin's checkpoint.max_grace_seconds)
    weight  = decimal, 0 < weight <= cap     the user's own factor; cap default 1
    integer = "0" / [1-9][0-9]*              at most 13 digits
    decimal = integer ["." 1-6 digits]       integer part at most 10 digits

No whitespace outside the type, no sign, exponent, hex, inf or nan. ``type`` is
optional: it is a hint that picks the job's prior throughput row; ``gavel:``
alone (what ``sbatch --gavel`` writes) makes a managed job whose row the daemon learns
as it runs (core/learned_rows/job_rows.py). A comment that is not exactly ``gavel:...`` but becomes
it after dropping leading ASCII whitespace and lower-casing (`` gavel:``, ``GAVEL:``) is
refused rather than left plain: the user meant it, and a near miss must not
become a job that is neither held nor refused.

A user's weight can only lower their share (like ``--nice``): the admin's
weights by QOS and account (daemon config ``weights:``) multiply it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from slurm_gavel.errors import InputError

PREFIX = "gavel:"
FORM = (
    "--comment=gavel:[key=value,...] with keys type=<job type> (optional), scale=N or MIN-MAX, "
    "weight=W, steps=S, slo=SECONDS, grace=SECONDS"
)
KEYS = ("type", "scale", "weight", "steps", "slo", "grace", "hold")
# The keys an error names: hold=user is written by job_submit.lua (sbatch --hold,
# scontrol hold/uhold by the owner), accepted from a user too (it only holds
# the user's own job), not advertised.
SHOWN_KEYS = ", ".join(KEYS[:-1])
MAX_COMMENT_BYTES = 256
MAX_TYPE_CHARS = 64
TYPE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ._()-")
DEFAULT_MAX_USER_WEIGHT = 1.0
MICRO = 1_000_000  # decimals are compared exactly, in millionths
MAX_SCALE = 1024
MAX_STEPS = 10**12
MAX_SLO_SECONDS = 10**9
MAX_GRACE_SECONDS = 86400  # a day; the admin caps it lower in the daemon config
ASCII_SPACE = " \t\n\v\f\r"
# The job type of a job that names none: never a table row (a type has 1-64 characters).
UNTYPED = ""

_INTEGER = re.compile(r"(?:0|[1-9][0-9]{0,12})", re.ASCII)
_DECIMAL = re.compile(r"(0|[1-9][0-9]{0,9})(?:\.([0-9]{1,6}))?", re.ASCII)


class Verdict(StrEnum):
    PLAIN = "plain"  # not a slurm-gavel comment: the job is Slurm's own
    MANAGED = "managed"
    REFUSED = "refuse"


class ManagedCommentError(InputError):
    """A job comment claims the job for slurm-gavel but breaks the grammar."""


@dataclass(frozen=True)
class ManagedSpec:
    """What a managed job declares in its comment."""

    job_type: str = UNTYPED  # UNTYPED: no hint, the daemon learns the job's row
    scale_factor: int | None = None  # None: take the job's GPU request, else 1
    priority_weight: float = 1.0  # the user's own factor, <= the admin's cap
    total_steps: float | None = None
    slo: float | None = None
    grace: int | None = None
    # scale=MIN-MAX: the GPU counts the job may run at; scale_factor is MIN
    scale_range: tuple[int, int] | None = None
    # hold=user: held by its owner; the daemon never places it until the
    # owner's `scontrol release` removes the key (job_submit.lua)
    user_hold: bool = False

    def to_comment(self) -> str:
        parts = [f"type={self.job_type}"] if self.job_type != UNTYPED else []
        if self.scale_range is not None:
            parts.append(f"scale={self.scale_range[0]}-{self.scale_range[1]}")
        elif self.scale_factor is not None:
            parts.append(f"scale={self.scale_factor}")
        if self.priority_weight != 1.0:
            parts.append(f"weight={_num(self.priority_weight)}")
        if self.total_steps is not None:
            parts.append(f"steps={_num(self.total_steps)}")
        if self.slo is not None:
            parts.append(f"slo={_num(self.slo)}")
        if self.grace is not None:
            parts.append(f"grace={self.grace}")
        if self.user_hold:
            parts.append("hold=user")
        return PREFIX + ",".join(parts)


def _num(x: float) -> str:
    """Grammar form: 120000 not 1.2e+05, at most 6 decimals, no exponent."""
    if float(x).is_integer():
        return str(int(x))
    return f"{x:.6f}".rstrip("0")


def is_managed_comment(comment: str | None) -> bool:
    """True when the comment claims the job for slurm-gavel (it may still be refused):
    exactly ``gavel:...``, or a near miss such as `` gavel:`` or ``GAVEL:``."""
    if not comment:
        return False
    return comment.startswith(PREFIX) or _ascii_lower(comment.lstrip(ASCII_SPACE)[:6]) == PREFIX


def _ascii_lower(text: str) -> str:
    # str.lower() maps some non-ASCII letters; C and Lua lower ASCII only.
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def classify(comment: str | None, *, max_weight: float | None = DEFAULT_MAX_USER_WEIGHT) -> Verdict:
    """The verdict all three enforcers must agree on (tests/data/comment_grammar.json)."""
    try:
        spec = parse_comment(comment, max_weight=max_weight)
    except ManagedCommentError:
        return Verdict.REFUSED
    return Verdict.PLAIN if spec is None else Verdict.MANAGED


def parse_comment(
    comment: str | None,
    *,
    job_id: str = "?",
    max_weight: float | None = DEFAULT_MAX_USER_WEIGHT,
) -> ManagedSpec | None:
    """The job's declaration, None when the comment does not claim the job.

    max_weight: the admin's cap on the user's weight; a weight above it is refused.
    None: no cap here (the daemon clamps to its configured cap instead, so a job
    submitted before the cap was lowered is not dropped).
    Raises ManagedCommentError naming the job, the bad part and the expected form.
    """
    if not is_managed_comment(comment):
        return None
    assert comment is not None
    if not comment.startswith(PREFIX):
        _fail(job_id, "'gavel:' must open the comment, in lower case, with nothing before it")
    size = len(comment.encode("utf-8", "surrogatepass"))
    if size > MAX_COMMENT_BYTES:
        _fail(job_id, f"the comment is {size} bytes, more than {MAX_COMMENT_BYTES}")
    seen: dict[str, str] = {}
    rest = comment[len(PREFIX) :]
    for part in rest.split(",") if rest else ():
        key, eq, value = part.partition("=")
        if not eq:
            _fail(job_id, f"{_show(part)} is not key=value")
        if key not in KEYS:
            _fail(job_id, f"unknown key {_show(key)} (known, in lower case: {SHOWN_KEYS})")
        if key in seen:
            _fail(job_id, f"key {key!r} appears twice")
        if not value:
            _fail(job_id, f"key {key!r} has no value")
        seen[key] = value
    cap = None if max_weight is None else round(max_weight * MICRO)
    scale = None if "scale" not in seen else _scale(job_id, seen["scale"])
    return ManagedSpec(
        job_type=UNTYPED if "type" not in seen else _job_type(job_id, seen["type"]),
        scale_factor=None if scale is None else scale[0],
        scale_range=None if scale is None or "-" not in seen["scale"] else scale,
        priority_weight=_weight(job_id, seen.get("weight", "1"), cap),
        total_steps=(
            None if "steps" not in seen else float(_integer(job_id, "steps", seen, MAX_STEPS))
        ),
        slo=None if "slo" not in seen else _slo(job_id, seen["slo"]),
        grace=(None if "grace" not in seen else _integer(job_id, "grace", seen, MAX_GRACE_SECONDS)),
        user_hold=_hold(job_id, seen.get("hold")),
    )


@dataclass(frozen=True)
class CommentReading:
    """A job's comment read once, at observation, and carried with its record
    (backends/slurm/records.SlurmJob.reading): the declaration, or the grammar's
    refusal, or neither (a comment that does not claim the job). Read without the
    weight cap: the daemon caps the user's weight (core/priority_weights.py) rather than drop
    the job."""

    spec: ManagedSpec | None = None
    refusal: ManagedCommentError | None = None

    @property
    def user_hold(self) -> bool:
        """A managed job its owner holds (hold=user); a refused comment is not."""
        return self.spec is not None and self.spec.user_hold


def read_comment(comment: str | None, *, job_id: str = "?") -> CommentReading:
    try:
        return CommentReading(spec=parse_comment(comment, job_id=job_id, max_weight=None))
    except ManagedCommentError as e:
        return CommentReading(refusal=e)


def _hold(job_id: str, value: str | None) -> bool:
    if value is not None and value != "user":
        _fail(job_id, f"hold={_show(value)} must be hold=user (or leave it out)")
    return value is not None


def _show(text: str) -> str:
    """Quoted, control characters escaped, cut: user text goes into logs and terminals."""
    shown = text[:40].encode("unicode_escape").decode("ascii")
    return repr(shown) + ("..." if len(text) > 40 else "")


def _fail(job_id: str, problem: str) -> None:
    raise ManagedCommentError(f"job {job_id}: gavel comment: {problem}; write {FORM}")


def _job_type(job_id: str, text: str) -> str:
    bad = sorted({c for c in text if c not in TYPE_CHARS})
    if bad:
        shown = "".join(bad)[:10].encode("unicode_escape").decode("ascii")
        _fail(
            job_id, f"type {_show(text)} has characters outside A-Z a-z 0-9 space ._()-: {shown!r}"
        )
    if len(text) > MAX_TYPE_CHARS:
        _fail(job_id, f"type is {len(text)} characters, more than {MAX_TYPE_CHARS}")
    if text[0] == " " or text[-1] == " ":
        _fail(job_id, f"type {_show(text)} starts or ends with a space")
    return text


def _integer(job_id: str, key: str, seen: dict[str, str], maximum: int) -> int:
    text = seen[key]
    if not _INTEGER.fullmatch(text) or not 1 <= int(text) <= maximum:
        _fail(job_id, f"{key}={_show(text)} must be a whole number from 1 to {maximum}")
    return int(text)


def _scale(job_id: str, text: str) -> tuple[int, int]:
    """scale=N -> (N, N); scale=MIN-MAX -> (MIN, MAX), each a grammar integer 1..1024."""
    lo, dash, hi = text.partition("-")
    ok = all(_INTEGER.fullmatch(x) and 1 <= int(x) <= MAX_SCALE for x in (lo, hi) if dash or x)
    if not ok or (dash and int(lo) > int(hi)):
        _fail(
            job_id,
            f"scale={_show(text)} must be a whole number from 1 to {MAX_SCALE}, or a range "
            f"MIN-MAX of them with MIN <= MAX (e.g. 1-8)",
        )
    return (int(lo), int(hi or lo))


def decimal_micro(text: str) -> int | None:
    """A grammar decimal in millionths (exact), None when it is not one."""
    m = _DECIMAL.fullmatch(text)
    if m is None:
        return None
    whole, frac = m.groups()
    return int(whole) * MICRO + int((frac or "").ljust(6, "0"))


def _weight(job_id: str, text: str, cap: int | None) -> float:
    micro = decimal_micro(text)
    if micro is None or micro <= 0:
        _fail(job_id, f"weight={_show(text)} must be a decimal number > 0 (e.g. 0.5)")
    assert micro is not None
    if cap is not None and micro > cap:
        _fail(
            job_id,
            f"weight={_show(text)} is above the cap {_num(cap / MICRO)} set by the admin: "
            "a job may only lower its own weight; the admin sets shares by QOS and account",
        )
    return micro / MICRO


def _slo(job_id: str, text: str) -> float:
    micro = decimal_micro(text)
    if micro is None or not 0 < micro <= MAX_SLO_SECONDS * MICRO:
        _fail(job_id, f"slo={_show(text)} must be seconds, a decimal > 0 and <= {MAX_SLO_SECONDS}")
    assert micro is not None
    return micro / MICRO
