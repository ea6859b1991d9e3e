"""`Idempotency-Key` (http.md §9): the key's format, its namespace and the request hash.

The store itself is the engine's: `Database.execute(idempotency=Idem(...))` decides a key under
the write lock and writes it in the same record as the write it protects. This module only
turns a request into that `Idem`: the namespaced key, and a hash of what makes the request the
same request (method, target with its query string, body; headers are not part of it).
"""

from __future__ import annotations

import hashlib
import json

MAX_KEY_BYTES = 255
DEFAULT_TTL_S = 86_400
# Under the server token, or on an open server, every caller shares one namespace; a scoped
# token's key lives under its `sub` (access.md §4.5), so two users may use the same key.
SHARED_NAMESPACE = "*"
IDEM_NO_SUB = "an Idempotency-Key needs a token with a subject (`sub`)"


def check_key(raw: bytes) -> bool:
    """A key is any header value of 1 to 255 bytes."""
    return 0 < len(raw) <= MAX_KEY_BYTES


def namespace_of(sub: object) -> str | None:
    """A scoped token's namespace: its `sub`, length-prefixed so that no `sub` and key can
    spell another's (`a:b` + `c` against `a` + `b:c`), and never the shared one. None without
    a `sub` (such a token may not send a key: 400)."""
    if sub is None:
        return None
    if isinstance(sub, str):
        return f"@{len(sub)}:{sub}"
    text = json.dumps(sub, separators=(",", ":"), sort_keys=True)  # a `sub` of another type: its JSON
    return f"#{len(text)}:{text}"


def namespaced(raw: bytes, namespace: str = SHARED_NAMESPACE) -> str:
    # surrogateescape keeps any byte sequence a distinct key, whatever its encoding
    return namespace + ":" + raw.decode("utf-8", "surrogateescape")


def request_hash(method: str, target: bytes, body: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    h.update(method.encode("ascii"))
    h.update(b" ")
    h.update(target)
    h.update(b"\n")
    h.update(body)
    return h.digest()


def make_idem(key: str, digest: bytes, ttl_ms: int, *, keep_empty: bool = True) -> object:
    """The engine's `Idem` for this request. `keep_empty=False` for a held claim: the key is
    kept only by the run that took rows (http.md §8.13)."""
    from ..database import Idem

    return Idem(key, digest, ttl_ms, keep_empty)
