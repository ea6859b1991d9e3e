"""`Idempotency-Key` (http.md §9): the key's format, its namespace and the request hash.

The store itself is the engine's (engine/idempotency.py): `execute(idempotency=Idem(...))` decides
a key under the write lock and keeps the write's answers with it, in the same record; the HTTP
layer renders them, the first time and on a replay alike, after the lock is let go. This module only
turns a request into that `Idem`: the namespaced key, and a hash of what makes the request the
same request (method, target with its query string, body; headers are not part of it).
"""

from __future__ import annotations

import hashlib
import json

from ..engine.idempotency import Idem

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
    if isinstance(sub, str) and _is_unicode(sub):
        return f"@{len(sub)}:{sub}"
    # a `sub` of another type, or text holding a lone surrogate (JSON's `"\ud800"`, not
    # Unicode): its JSON, all ASCII, after `#` where no `@` form starts
    text = json.dumps(sub, separators=(",", ":"), sort_keys=True)
    return f"#{len(text)}:{text}"


def namespaced(raw: bytes, namespace: str = SHARED_NAMESPACE) -> str:
    """The key as stored in the write's own record: always valid Unicode. A UTF-8 key is kept
    as its text after `:`; any other bytes (Latin-1 `order-\\xe9`, which http.md allows) as
    their hex after `%`, where no UTF-8 key is written. So every byte string stays a distinct
    key, the keys that are text read as themselves in the file, and none is an odd one out."""
    try:
        return namespace + ":" + raw.decode("utf-8")
    except UnicodeDecodeError:
        return namespace + "%" + raw.hex()


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
