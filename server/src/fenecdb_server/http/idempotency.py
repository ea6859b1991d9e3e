"""`Idempotency-Key` (http.md §9): the key's format, its namespace and the request hash.

The store itself is the engine's (engine/idempotency.py): `execute(idempotency=Idem(...))` decides
a key under the write lock and keeps the write's answers with it, in the same record; the HTTP
layer renders them, the first time and on a replay alike, after the lock is let go. This module only
turns a request into that `Idem`: the namespaced key, and a hash of what makes the request the
same request (method, target with its query string, body; headers are not part of it).

The namespace (access.md, "Idempotency keys"). Under the server token, or on an open server,
every caller shares one. A signed token's key belongs to its whole scope: every claim it carries
but the four a refresh renews (`exp`, `iat`, `nbf`, `jti`), so two tokens that differ in any
claim a rule may read (`sub`, `role`, `queue`, ...) never share a key, and a client that retries
across a refresh of its token is still answered. The claims are kept as a digest of their
canonical JSON, so a key's record holds no claim's value and stays short whatever the token.

A replay is not filtered by the caller's read rules: it is answered only to a token of the same
scope, which is the scope the stored answer was worked out under (its rows were read under those
very rules), and it must answer what the first request answered: a claim retried after a
timeout must be told the jobs it took, or it loses them until their lease runs out. (A policy
file changed across a restart does not void the keys: a retry then runs nothing again, as ever.)

Keys stored before the namespace was the scope (`@<len>:<sub>`, `#<len>:<json>`) stay readable in
the file, but a scoped token's retry no longer finds them: it runs as a new request.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..database import Idem
from ..flags import DEFAULTS

MAX_KEY_BYTES = 255
DEFAULT_TTL_S = int(DEFAULTS["--idempotency-ttl"])  # where the command line names none
# Under the server token, or on an open server, every caller shares one namespace; a scoped
# token's key lives under its scope (`namespace_of`), so two users may use the same key.
SHARED_NAMESPACE = "*"
IDEM_NO_SUB = "an Idempotency-Key needs a token with a subject (`sub`)"
# the claims a refreshed token of the same scope carries anew: not part of the namespace
RENEWED = frozenset({"exp", "iat", "nbf", "jti"})


def check_key(raw: bytes) -> bool:
    """A key is any header value of 1 to 255 bytes."""
    return 0 < len(raw) <= MAX_KEY_BYTES


def namespace_of(claims: dict[str, Any] | None) -> str | None:
    """A scoped token's namespace: `$` and a digest of its claims but `RENEWED`, as canonical
    JSON (keys sorted, all ASCII: a lone surrogate is escaped), never the shared one nor an
    older file's `@`/`#` forms. None without a `sub` (such a token may not send a key: 400)."""
    if claims is None or claims.get("sub") is None:
        return None
    scope = {name: value for name, value in claims.items() if name not in RENEWED}
    text = json.dumps(scope, separators=(",", ":"), sort_keys=True)
    return "$" + hashlib.blake2b(text.encode("ascii"), digest_size=16).hexdigest()


def namespaced(raw: bytes, namespace: str = SHARED_NAMESPACE) -> str:
    """The key as stored in the write's own record: always valid Unicode. A UTF-8 key is kept
    as its text after `:`; any other bytes (Latin-1 `order-\\xe9`, which http.md allows) as
    their hex after `%`, where no UTF-8 key is written. So every byte string stays a distinct
    key, the keys that are text read as themselves in the file, and none is an odd one out."""
    try:
        return namespace + ":" + raw.decode("utf-8")
    except UnicodeDecodeError:
        return namespace + "%" + raw.hex()


def request_hash(method: str, target: bytes, body: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    h.update(method.encode("ascii"))
    h.update(b" ")
    h.update(target)
    h.update(b"\n")
    h.update(body)
    return h.digest()


def make_idem(key: str, digest: bytes, ttl_ms: int, *, keep_empty: bool = True) -> Idem:
    """The engine's `Idem` for this request. `keep_empty=False` for a held claim: the key is
    kept only by the run that took rows (http.md §8.13)."""
    return Idem(key, digest, ttl_ms, keep_empty)
