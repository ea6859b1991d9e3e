"""What the HTTP service needs from the command line (`Config`), with its defaults."""

from __future__ import annotations

from typing import Any

from ..flags import DEFAULTS
from .auth import AUTH_DELAY_MS, Auth
from .idempotency import DEFAULT_TTL_S

# What one request's statement text may hold, one statement answer and one request write, unless the
# command line says otherwise (--max-statement-bytes, --max-answer-rows, --max-write-rows; 0 = none):
# the table's defaults. Past them: 413, nothing written.
MAX_STATEMENT_BYTES = int(DEFAULTS["--max-statement-bytes"])
MAX_ANSWER_ROWS = int(DEFAULTS["--max-answer-rows"])
MAX_WRITE_ROWS = int(DEFAULTS["--max-write-rows"])


class Config:
    """What the app needs from the command line."""

    def __init__(self, *, version: str = "0.0.0", token: str | None = None, cors: str | None = None,
                 idempotency_ttl_s: int = DEFAULT_TTL_S, slow_ms: float | None = None,
                 sync_always: bool = False, auth: Auth | None = None, auth_delay_ms: int = AUTH_DELAY_MS,
                 max_statement_bytes: int = MAX_STATEMENT_BYTES, closes_told: bool = False,
                 max_answer_rows: int = MAX_ANSWER_ROWS, max_write_rows: int = MAX_WRITE_ROWS) -> None:
        self.version = version
        # the tokens accepted (auth.py); `token` alone is a server token and nothing else
        self.auth = auth if auth is not None else Auth(server_token=token)
        self.auth_delay_ms = auth_delay_ms
        self.cors = cors
        self.idempotency_ttl_ms = idempotency_ttl_s * 1000
        self.slow_ms = slow_ms
        # A file-backed database under --sync always: writes run on the loop like every request,
        # their answers pending until their turn's one fdatasync (durable.py), rather than each in
        # a worker thread (bench/README.md says what that cost).
        self.sync_always = sync_always
        # the statement text of one request (`/batch`: its distinct texts together); 0 = no ceiling
        self.max_statement_bytes = max_statement_bytes
        # the rows one statement may answer, and one statement or /batch write (engine.execute); 0 = none
        self.max_answer_rows = max_answer_rows
        self.max_write_rows = max_write_rows
        # served by fenec-server's protocol, which tells a held claim's client's close in the turn
        # it is read: one settling turn before a run is enough (held/on_asyncio.py)
        self.closes_told = closes_told
        # replication on this server (replication/node.py `Node`), set by the command line; None: off
        self.replication: Any = None
        self.door_only = False  # a cluster's member: every /query and /batch through the door's gate
