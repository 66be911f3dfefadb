"""What the daemon publishes after saving: the status views and the jobs' AdminComment.

The view (status_view.py) is written beside the private state at every save, so
`slurm-gavel status` and `explain` work for every user: world-readable as it is in
public mode; in private mode (status_private.py) status.json without job rows and
one view per user that only that user can read (status_d.py). Which mode is in
force is decided once at start (resolve_privacy) and logged with the reason:
``status_privacy: auto`` is private when Slurm's PrivateData hides jobs, and when
the backend cannot tell (slurmrestd without the scontrol fallback, Slurm away). The
one-line reason of each job (status_view.why) goes to its AdminComment through
the backend's AdminCommentWriter hook (core/backend_hooks.py; the Slurm backend:
backends/slurm/admin_comment.py), after the round's post-save only,
and only for jobs whose reason changed since the daemon last wrote it: a round
in which no decision changed issues no command. What was written is kept in
memory only; after a restart the daemon writes each job's reason once again.
Failures are logged and retried next round; the round stands.
"""

from __future__ import annotations

import logging
from typing import Any

from slurm_gavel.backends.slurm.private_data import hides_jobs
from slurm_gavel.core.backend_hooks import AdminCommentWriter, BackendHooks, PrivateDataReader
from slurm_gavel.daemon.logs import event, running_as
from slurm_gavel.daemon.state_encode import Fragments, encode_document
from slurm_gavel.daemon.state_store import StateSaveError, StateStore
from slurm_gavel.daemon.status_d import remove_views, write_views
from slurm_gavel.daemon.status_private import public_summary, user_views
from slurm_gavel.daemon.status_view import status_view
from slurm_gavel.domain.model import JobId

log = logging.getLogger("slurm_gavel.daemon")
CHOWN_FIX = (
    "the daemon needs CAP_CHOWN (the shipped unit grants it) to give each user their "
    "view; or set status_privacy: public"
)


class Publisher:
    def __init__(self, store: StateStore, hooks: BackendHooks | None = None) -> None:
        """hooks: the backend's (Daemon.hooks); None, as a backend with none."""
        hooks = hooks or BackendHooks()
        self.store = store
        self.private_data = hooks.private_data
        # None once the backend said it cannot, or may not, write AdminComment.
        self.comment_writer: AdminCommentWriter | None = hooks.admin_comments
        self.view: dict[str, Any] | None = None
        self.written: dict[JobId, str] = {}  # job -> the reason its AdminComment holds
        self._view_failing = False
        self.private = True  # until resolve_privacy says: nothing leaks before it ran
        self._users_failing: set[int] = set()
        # Each job's record in status.json, and in each user's view, keeps its JSON
        # text while it is unchanged (state_encode.py): at 20,000 jobs most of them
        # wait through a round, and their records hold no figure that moves every
        # round (status_view.py).
        self.view_texts = Fragments()
        self.user_texts: dict[int, Fragments] = {}

    def resolve_privacy(self, setting: str) -> None:
        """Decide public or private from the config's status_privacy (and, for auto,
        Slurm's PrivateData) and log which, and why. Public mode removes the user
        views a private run left."""
        self.private, why = privacy(setting, self.private_data)
        event(log, "status_privacy", mode="private" if self.private else "public", why=why)
        if not self.private:
            try:
                remove_views(self.store.dir)
            except OSError as e:
                event(log, "status_views_not_removed", logging.WARNING, error=str(e)[:300])

    def save_view(self, doc: dict[str, Any]) -> None:
        """The views of the state document just saved; a failure is logged (the
        private state, already saved, is what crash safety needs)."""
        self.view = status_view(doc)
        try:
            if self.private:
                self.store.save_view(public_summary(self.view))
            else:
                self.store.save_view(self.view, {("jobs",): self.view_texts})
        except StateSaveError as e:
            if not self._view_failing:
                event(log, "status_view_not_saved", logging.WARNING, error=str(e)[:300])
            self._view_failing = True
            return
        self._view_failing = False
        if self.private:
            self._save_user_views(self.view)

    def _save_user_views(self, view: dict[str, Any]) -> None:
        """status.d/<uid>.json for every user with managed jobs; a user whose view
        cannot be written is logged once until it can again."""
        try:
            views = user_views(view)
            texts = self.user_texts
            self.user_texts = {uid: texts.get(uid) or Fragments() for uid in views}
            failed = write_views(self.store.dir, views, self._user_text)
        except OSError as e:
            failed = {-1: f"{self.store.dir}/status.d: {e}"}
        new = set(failed) - self._users_failing
        if new:
            uid = min(new)
            event(log, "status_user_view_not_saved", logging.WARNING, users=len(new), uid=uid,
                  error=failed[uid][:300], fix=CHOWN_FIX)  # fmt: skip
        self._users_failing = set(failed)

    def _user_text(self, uid: int, view: dict[str, Any]) -> str:
        return encode_document(view, {("jobs",): self.user_texts[uid]})

    def admin_comments(self) -> int:
        """Write the reasons that changed to the jobs' AdminComment; returns how many
        jobs were sent."""
        writer = self.comment_writer
        if writer is None or self.view is None:
            return 0
        reasons = {j["id"]: j["why"] for j in self.view["jobs"]}
        # A job given back for how its runs ended waits in Slurm: its AdminComment says
        # why too. Tried once (a finished job's cannot be written: Slurm refuses it, and
        # a daemon restarted after it ended would otherwise try every round).
        given_back = set()
        for n in self.view.get("notices") or []:
            if n.get("kind") == "given back" and n["id"] not in reasons:
                reasons[n["id"]] = n["why"]
                given_back.add(n["id"])
        self.written = {j: t for j, t in self.written.items() if j in reasons}
        changed = {j: t for j, t in reasons.items() if self.written.get(j) != t}
        if not changed:
            return 0
        try:
            failed = writer.set_admin_comments(changed)
        except NotImplementedError as e:  # the backend cannot (an old REST API): say it once
            event(log, "admin_comment_unsupported", logging.WARNING, error=str(e)[:300])
            self.comment_writer = None
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
            user = running_as()
            event(log, "admin_comment_denied", logging.ERROR, user=user,
                  fix=f"sacctmgr -i modify user {user} set adminlevel=Administrator, or "
                  "leave it: `slurm-gavel status` and `explain` show the same reasons")  # fmt: skip
            self.comment_writer = None
            return 0
        for job_id, text in changed.items():
            if job_id not in failed or job_id in given_back:
                self.written[job_id] = text
        event(log, "admin_comments_written", jobs=len(changed) - len(failed),
              texts=len(set(changed.values())))  # fmt: skip
        if failed:
            first = sorted(failed.items())[0]
            event(log, "admin_comment_failed", logging.WARNING, jobs=len(failed),
                  job=first[0], error=first[1][:300])  # fmt: skip
        return len(changed)


def privacy(setting: str, reader: PrivateDataReader | None) -> tuple[bool, str]:
    """(private, why) for a status_privacy setting; auto asks the backend (its
    PrivateDataReader hook, None without one) for Slurm's PrivateData, and is private
    whenever that cannot be read."""
    if setting != "auto":
        return setting == "private", f"status_privacy: {setting} in the config"
    if reader is None:
        return True, "status_privacy: auto, and this backend cannot read Slurm's PrivateData"
    try:
        value = reader.private_data()
    except Exception as e:  # fail closed: an unknown PrivateData may hide jobs
        return True, f"status_privacy: auto, and PrivateData is unknown ({str(e)[:200]})"
    if value is None:
        return True, (
            "status_privacy: auto, and `scontrol show config` did not give PrivateData "
            "(Slurm away or scontrol failing); restart the daemon once Slurm answers"
        )
    if hides_jobs(value):
        return True, f"status_privacy: auto, and Slurm's PrivateData ({value}) hides jobs"
    return False, f"status_privacy: auto, and Slurm's PrivateData ({value}) does not hide jobs"
