"""What the daemon publishes after saving: the public status view and the jobs'
AdminComment.

The view (status_view.py) is written world-readable beside the private state at
every save, so `slurm-gavel status` and `explain` work for every user. The
one-line reason of each job (status_view.why) goes to its AdminComment through
the backend (backends/slurm_admin_comment.py), after the round's post-save only,
and only for jobs whose reason changed since the daemon last wrote it: a round
in which no decision changed issues no command. What was written is kept in
memory only; after a restart the daemon writes each job's reason once again.
Failures are logged and retried next round; the round stands.
"""

from __future__ import annotations

import logging
import os
import pwd
from typing import Any

from slurm_gavel.logs import event
from slurm_gavel.model import JobId
from slurm_gavel.state_store import StateSaveError, StateStore
from slurm_gavel.status_view import status_view

log = logging.getLogger("slurm_gavel.daemon")


class Publisher:
    def __init__(self, store: StateStore, backend: object) -> None:
        self.store = store
        self.backend = backend
        self.view: dict[str, Any] | None = None
        self.written: dict[JobId, str] = {}  # job -> the reason its AdminComment holds
        self._view_failing = False

    def save_view(self, doc: dict[str, Any]) -> None:
        """The public view of the state document just saved; a failure is logged (the
        private state, already saved, is what crash safety needs)."""
        self.view = status_view(doc)
        try:
            self.store.save_view(self.view)
        except StateSaveError as e:
            if not self._view_failing:
                event(log, "status_view_not_saved", logging.WARNING, error=str(e)[:300])
            self._view_failing = True
            return
        self._view_failing = False

    def admin_comments(self) -> int:
        """Write the reasons that changed to the jobs' AdminComment; returns how many
        jobs were sent."""
        write = getattr(self.backend, "set_admin_comments", None)
        if write is None or self.view is None:
            return 0
        reasons = {j["id"]: j["why"] for j in self.view["jobs"]}
        self.written = {j: t for j, t in self.written.items() if j in reasons}
        changed = {j: t for j, t in reasons.items() if self.written.get(j) != t}
        if not changed:
            return 0
        try:
            failed = write(changed)
        except NotImplementedError as e:  # the backend cannot (an old REST API): say it once
            event(log, "admin_comment_unsupported", logging.WARNING, error=str(e)[:300])
            self.backend = None
            return 0
        except Exception as e:  # Slurm away: the next round tries again
            event(log, "admin_comment_failed", logging.WARNING, jobs=len(changed),
                  error=str(e)[:300])  # fmt: skip
            return 0
        if (
            failed
            and len(failed) == len(changed)
            and all("permission denied" in why.lower() for why in failed.values())
        ):
            # Slurm lets only root, SlurmUser and AdminLevel=Administrator set AdminComment
            # (Operator is enough for everything else the daemon does): say it once and
            # stop, rather than a warning every round.
            event(log, "admin_comment_denied", logging.ERROR, user=_user(),
                  fix=f"sacctmgr -i modify user {_user()} set adminlevel=Administrator, or "
                  "leave it: `slurm-gavel status` and `explain` show the same reasons")  # fmt: skip
            self.backend = None
            return 0
        for job_id, text in changed.items():
            if job_id not in failed:
                self.written[job_id] = text
        event(log, "admin_comments_written", jobs=len(changed) - len(failed),
              texts=len(set(changed.values())))  # fmt: skip
        if failed:
            first = sorted(failed.items())[0]
            event(log, "admin_comment_failed", logging.WARNING, jobs=len(failed),
                  job=first[0], error=first[1][:300])  # fmt: skip
        return len(changed)


def _user() -> str:
    """The account the daemon runs as (for the fix it prints)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())
