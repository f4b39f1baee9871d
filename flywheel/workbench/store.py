"""Accounts and task assignments of the workbench: two small JSON documents in the landing area.

Why JSON under `<landing>/.workbench/` and not lake tables: both are tiny, edited in place (a role changes, a task
is assigned), and must not become training data; ingestion skips dot-entries of the landing area, and the
landing area's own store (local folder or S3) reads and writes them. Passwords are Argon2id hashes (argon2-cffi);
the raw password is never stored. Writes go through one lock per process (the workbench is one process).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from storage.objects import ObjectStore

ROLES = ("annotator", "lead", "auditor", "admin")
USERS = ".workbench/users.json"
ASSIGNMENTS = ".workbench/assignments.json"
_NAME = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
MIN_PASSWORD = 8
_hasher = PasswordHasher()


@dataclass(frozen=True)
class User:
    username: str
    role: str
    password_hash: str  # Argon2id, PHC string format
    group: str | None = None  # expert | novice (annotators)
    created_at: str = ""


@dataclass(frozen=True)
class Assignment:
    """One sandbox task given to one annotator; `task` is the sandbox task's own dict (sandbox.tasks.Task)."""

    assignment_id: str
    annotator: str
    task_id: str
    instruction: str
    task: dict[str, Any]
    assigned_by: str
    assigned_at: str
    mode: str = "annotate"  # annotate | think-aloud
    status: str = "assigned"  # assigned | done
    session_id: str | None = None  # the session that did it


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Store:
    """Users and assignments in `store` (the landing area's object store)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------------ users
    def _users(self) -> dict[str, dict[str, Any]]:
        raw = self.store.get_text(USERS)
        return json.loads(raw) if raw else {}

    def users(self) -> list[User]:
        return [User(**u) for u in sorted(self._users().values(), key=lambda u: u["username"])]

    def user(self, username: str) -> User | None:
        u = self._users().get(username)
        return User(**u) if u else None

    def add_user(self, username: str, password: str, role: str, group: str | None = None) -> User:
        """Create or update an account (a new password and role replace the old ones)."""
        if not _NAME.match(username):
            raise ValueError(f"user name {username!r} must be 1-64 of letters, digits, . _ @ -")
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
        if len(password) < MIN_PASSWORD:
            raise ValueError(f"the password must have at least {MIN_PASSWORD} characters")
        if group not in (None, "expert", "novice"):
            raise ValueError(f"group {group!r} is not expert or novice")
        user = User(username, role, _hasher.hash(password), group, now())
        with self._lock:
            users = self._users()
            users[username] = asdict(user)
            self.store.put_text(USERS, json.dumps(users, indent=2, sort_keys=True))
        return user

    def authenticate(self, username: str, password: str) -> User | None:
        """The user if the password matches its hash; None otherwise (the same answer for an unknown name)."""
        u = self.user(username)
        if u is None:
            _hasher.hash(password)  # spend the same time as a real check: no user enumeration by timing
            return None
        try:
            _hasher.verify(u.password_hash, password)
        except (VerificationError, InvalidHashError):
            return None
        return u

    # ---------------------------------------------------------------------------------------- assignments
    def _assignments(self) -> dict[str, dict[str, Any]]:
        raw = self.store.get_text(ASSIGNMENTS)
        return json.loads(raw) if raw else {}

    def assignments(self, annotator: str | None = None) -> list[Assignment]:
        rows = [Assignment(**a) for a in self._assignments().values()]
        rows = [a for a in rows if annotator is None or a.annotator == annotator]
        return sorted(rows, key=lambda a: (a.annotator, a.assigned_at, a.assignment_id))

    def assignment(self, assignment_id: str) -> Assignment | None:
        a = self._assignments().get(assignment_id)
        return Assignment(**a) if a else None

    def assign(self, annotator: str, tasks: list[Any], by: str, mode: str = "annotate") -> list[Assignment]:
        """Give sandbox tasks (training.rollout.TaskInfo with a sandbox Task payload) to an annotator; a task
        already assigned to them in the same mode is not assigned twice."""
        u = self.user(annotator)
        if u is None or u.role != "annotator":
            raise ValueError(f"{annotator!r} is not an annotator")
        if mode not in ("annotate", "think-aloud"):
            raise ValueError(f"mode {mode!r} is not annotate or think-aloud")
        out = []
        with self._lock:
            rows = self._assignments()
            for t in tasks:
                aid = f"{annotator}:{mode}:{t.task_id}".replace("/", "_")
                if aid not in rows:
                    rows[aid] = asdict(
                        Assignment(aid, annotator, t.task_id, t.instruction, t.payload.to_dict(), by, now(), mode)
                    )
                out.append(Assignment(**rows[aid]))
            self.store.put_text(ASSIGNMENTS, json.dumps(rows, indent=2, sort_keys=True))
        return out

    def mark_done(self, assignment_id: str, session_id: str) -> None:
        with self._lock:
            rows = self._assignments()
            if assignment_id in rows:
                rows[assignment_id].update(status="done", session_id=session_id)
                self.store.put_text(ASSIGNMENTS, json.dumps(rows, indent=2, sort_keys=True))
