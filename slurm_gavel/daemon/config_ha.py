"""The daemon config's ``ha:`` section: active/standby daemons on several hosts
(daemon/lease.py, docs/admin-guide.md "A standby daemon").

    ha:
      shared_dir: /shared/slurm-gavel   # the state directory, on storage every host
                                        # mounts (as slurmctld's StateSaveLocation)
      lease_seconds: 30                 # a standby takes over after this long without
                                        # the leader renewing (it renews every third)
      margin_seconds: 7.5               # the leader stops acting this long before its
                                        # lease could run out (default: a quarter)

With it the state lives in shared_dir; a state_dir naming another directory is
refused (a host's local state would be lost at a takeover).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_gavel.daemon.config_types import ConfigError, HaConfig
from slurm_gavel.domain.field_checks import Checks

KEYS = ["shared_dir", "lease_seconds", "margin_seconds"]
# A lease shorter than this would be renewed more often than a loaded NFS server
# answers; longer than an hour, no one would call it available.
MIN_LEASE_S = 3.0
MAX_LEASE_S = 3600.0

_check = Checks(ConfigError)


def ha_config(doc: Any, where: str, base_dir: Path, state_dir: Any) -> HaConfig:
    """`state_dir`: the file's own state_dir value (None when it names none)."""
    d = _check.mapping(doc, where)
    _check.keys(d, KEYS, where)
    if d.get("shared_dir") is None:
        raise ConfigError(
            f"{where}.shared_dir: missing; name the state directory every host's daemon "
            "shares (on the storage slurmctld's StateSaveLocation uses, e.g. "
            "/shared/slurm-gavel)"
        )
    raw = Path(_check.string(d["shared_dir"], f"{where}.shared_dir")).expanduser()
    shared = raw if raw.is_absolute() else base_dir / raw
    lease = _check.number(
        d.get("lease_seconds", HaConfig.lease_seconds), f"{where}.lease_seconds", minimum=0,
        strict=True,
    )  # fmt: skip
    if not MIN_LEASE_S <= lease <= MAX_LEASE_S:
        raise ConfigError(
            f"{where}.lease_seconds: {lease:g} is out of range; use "
            f"{MIN_LEASE_S:g}..{MAX_LEASE_S:g} (30 suits most sites)"
        )
    margin = None
    if d.get("margin_seconds") is not None:
        margin = _check.number(
            d["margin_seconds"], f"{where}.margin_seconds", minimum=0, strict=True
        )
        if margin > lease / 2:
            raise ConfigError(
                f"{where}.margin_seconds: {margin:g} is more than half of lease_seconds "
                f"({lease:g}): the leader would stop acting before its first renewal "
                "could land; lower it or lengthen the lease"
            )
    if state_dir is not None:
        named = Path(str(state_dir)).expanduser()
        named = named if named.is_absolute() else base_dir / named
        if named.resolve() != shared.resolve():
            raise ConfigError(
                f"{where}.shared_dir: {shared} differs from state_dir ({named}); with ha: "
                "the state lives in shared_dir, so that a standby taking over has it: "
                "remove state_dir or make it the same directory"
            )
    return HaConfig(shared_dir=shared, lease_seconds=lease, margin_seconds=margin)
