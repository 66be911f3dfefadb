"""Which Slurm releases slurm-gavel reads, and which data_parser (JSON format) each offers.

Slurm's JSON comes from a "data_parser" plugin whose version (v0.0.38 .. v0.0.45)
fixes the shape of every record. Releases verified on real daemons (captures in
tests/backends/data/<release>/):

=========  ===========================  =======================================
release    CLI ``--json`` parsers       notes
=========  ===========================  =======================================
22.05      plain ``--json`` only        openapi/v0.0.38; squeue ignores -t/-j
24.11      v0.0.40, v0.0.41, v0.0.42    ``sinfo --json`` is grouped ("sinfo")
26.05      v0.0.42 .. v0.0.45           as 24.11
=========  ===========================  =======================================

Releases in between (23.02 .. 25.11) are accepted: their CLI lists its parsers
(``squeue --json=list``) and the newest one this module knows is picked; they
have no captures here. Older or newer releases are refused with the release
named and what to do (the data_parser override).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_gavel.errors import InputError

OLDEST_SUPPORTED = (22, 5)
NEWEST_KNOWN = (26, 5)
# data_parser versions whose shapes slurm_json reads, oldest first
KNOWN_PARSERS = tuple(f"v0.0.{n}" for n in range(38, 46))


class SlurmReleaseError(InputError):
    """A Slurm release (or data_parser) slurm-gavel does not know."""


@dataclass(frozen=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int
    plugin: str  # e.g. "openapi/v0.0.38", "data_parser/v0.0.42", "" when absent

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

    @property
    def release(self) -> tuple[int, int]:
        return (self.major, self.minor)


_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_release(text: str) -> tuple[int, int, int] | None:
    """``slurm-wlm 24.11.5`` / ``slurm 22.05.8`` / ``24.11.5`` -> (24, 11, 5)."""
    m = _RELEASE.search(text or "")
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]))


def check_release(version: SlurmVersion, *, allow_newer: bool = False) -> None:
    """Refuse releases whose JSON this package was never checked against."""
    if version.release < OLDEST_SUPPORTED:
        raise SlurmReleaseError(
            f"Slurm {version} is older than 22.05, whose --json output slurm-gavel needs; "
            "upgrade Slurm to 22.05 or later"
        )
    if version.release > NEWEST_KNOWN and not allow_newer:
        raise SlurmReleaseError(
            f"Slurm {version} is newer than the newest release slurm-gavel knows "
            f"({NEWEST_KNOWN[0]}.{NEWEST_KNOWN[1]:02d}); upgrade slurm-gavel, or try it anyway "
            f"by naming a data_parser this Slurm offers (`squeue --json=list`) that "
            f"slurm-gavel knows ({KNOWN_PARSERS[-1]} or older): SLURM_GAVEL_DATA_PARSER=v0.0.NN "
            "(or cli_backend(data_parser=...))"
        )


def parser_version(name: str) -> str:
    """``data_parser/v0.0.42`` / ``v0.0.42`` -> ``v0.0.42``; unknown -> SlurmReleaseError."""
    short = name.strip().rsplit("/", 1)[-1]
    if short not in KNOWN_PARSERS:
        raise SlurmReleaseError(
            f"data_parser {name!r} is not one slurm-gavel reads (known: {', '.join(KNOWN_PARSERS)})"
        )
    return short


def pick_parser(offered: list[str], version: SlurmVersion) -> str:
    """The newest known data_parser among those the CLI lists (``--json=list``)."""
    known = [p for p in KNOWN_PARSERS if p in {o.strip().rsplit("/", 1)[-1] for o in offered}]
    if not known:
        raise SlurmReleaseError(
            f"Slurm {version} offers data_parser {', '.join(offered) or '(none)'}, none of "
            f"which slurm-gavel reads (known: {', '.join(KNOWN_PARSERS)}); upgrade slurm-gavel"
        )
    return known[-1]
