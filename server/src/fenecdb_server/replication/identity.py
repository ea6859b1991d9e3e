"""A data file's replication identity: its history id, and whether it is a replica's.

Kept as JSON in `<file>.replication`, beside the data file, written whole (a temporary file
fsynced and renamed over), so a crash leaves the old identity or the new one:

    {"history": "<32 hex>", "role": "primary"|"replica", "primary": "<url>" (a replica's),
     "parent": "<history id>", "fork_seq": n (a promoted replica's: the history it forked from,
     and the change it stood at)}

A history id names one line of changes: two files of one history agree on every change both
hold. A primary's is made the first time it serves replicas; a replica takes its primary's as it
follows; promotion (`--promote`, `POST /_replication/promote`) forks a new one, whose parent is
the old one up to `fork_seq`. A file whose identity says replica opens only with `--replica-of`
or `--promote` (`refusal`): a plain server on it would take writes its primary never saw.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any


def new_id() -> str:
    return secrets.token_hex(16)


class Identity:
    """The identity of the data file at `path` (no file yet: a primary's with no history)."""

    def __init__(self, path: str) -> None:
        self.path = path + ".replication"
        self.history = ""
        self.role = "primary"
        self.primary = ""
        self.parent = ""
        self.fork_seq = 0
        try:
            with open(self.path, encoding="utf-8") as f:
                data: dict[str, Any] = json.load(f)
        except FileNotFoundError:
            return
        self.history = str(data.get("history", ""))
        self.role = "replica" if data.get("role") == "replica" else "primary"
        self.primary = str(data.get("primary", ""))
        self.parent = str(data.get("parent", ""))
        self.fork_seq = int(data.get("fork_seq", 0))

    def save(self) -> None:
        data: dict[str, Any] = {"history": self.history, "role": self.role}
        if self.role == "replica":
            data["primary"] = self.primary
        if self.parent:
            data["parent"] = self.parent
            data["fork_seq"] = self.fork_seq
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def ensure_history(self) -> str:
        """A primary's history id, made (and saved) the first time it is asked for."""
        if not self.history:
            self.history = new_id()
            self.save()
        return self.history

    def follow(self, primary: str, history: str) -> None:
        """Become (or stay) a replica of `primary`, on its `history`."""
        if (self.role, self.primary, self.history) != ("replica", primary, history):
            self.role, self.primary, self.history = "replica", primary, history
            self.parent, self.fork_seq = "", 0
            self.save()

    def promote(self, seq: int) -> str:
        """Fork: a new history, whose parent is the old one up to change `seq`; role primary."""
        self.parent, self.fork_seq = self.history, seq
        self.history = new_id()
        self.role = "primary"
        self.primary = ""
        self.save()
        return self.history

    def continues(self, history: str, since: int) -> bool:
        """Whether a follower on `history` at change `since` holds only changes of this file's
        history: the same history, or its parent's up to the fork."""
        if not history:
            return since == 0  # a new file; any other has no history to check: imaged
        if history == self.history:
            return True
        return history == self.parent and since <= self.fork_seq


def refusal(path: str, identity: Identity) -> str | None:
    """Why a plain server may not open the file (None: it may)."""
    if identity.role != "replica":
        return None
    return (f"{path} is a replica's file (it follows {identity.primary or 'a primary'}): start it with "
            "--replica-of <url> to follow, or --promote to take writes (its history forks)")
