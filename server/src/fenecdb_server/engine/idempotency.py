"""The Idempotency-Key store (http.md §9): the engine's answers to keyed writes, by key.

A keyed write that succeeds keeps its answers, the list the engine returned, with the key, in the
same record as the write (op `k`, engine/records.py), so a crash keeps both or neither. A retry
with the same key and the same request finds them and is answered them again, rendered by
whoever renders answers (the HTTP layer, after the write lock is let go), and nothing runs. A
failed write keeps no key. The key is decided under the write lock, so a retry that comes while
the first is running waits for it.

What a key keeps (`Stored`): the request's hash, the answers, when it was stored and for how
long. A file written before the answers were kept holds an HTTP status and body instead
(`raw`); such a key is answered those bytes as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import FenecError

REUSED = "this Idempotency-Key came with another request: a key is for one"


@dataclass(frozen=True, slots=True)
class Idem:
    """An Idempotency-Key as the engine is asked to decide it."""

    key: str  # already namespaced by the caller
    request_hash: bytes
    ttl_ms: int
    keep_empty: bool = True  # False for held claims: keep the key only once the run took rows


@dataclass(frozen=True, slots=True)
class Stored:
    """What a key keeps: `answers` (the engine's, one per statement), or for a key read from an
    older file `raw`, the HTTP status and body it was answered."""

    request_hash: bytes
    answers: list | None
    raw: tuple[int, bytes] | None
    at: int  # epoch ms it was stored
    ttl_ms: int

    def live(self, now: int) -> bool:
        return self.at + self.ttl_ms > now


class Keys:
    """The keys, under the engine's locks (the engine takes them; this class takes none)."""

    __slots__ = ("_stored",)

    def __init__(self) -> None:
        self._stored: dict[str, Stored] = {}

    def __len__(self) -> int:
        return len(self._stored)

    def items(self) -> Iterator[tuple[str, Stored]]:
        return iter(list(self._stored.items()))

    def find(self, idem: Idem, now: int) -> Stored | None:
        """The stored answer of this key, if it lives; 422 if it came with another request."""
        stored = self._stored.get(idem.key)
        if stored is None or not stored.live(now):
            return None
        if stored.request_hash != idem.request_hash:
            raise FenecError("conflict", REUSED)
        return stored

    def keep(self, key: str, stored: Stored) -> Callable[[], None]:
        """Store `stored` under `key`; answer the undo that puts the key back as it was."""
        old = self._stored.get(key)
        self._stored[key] = stored

        def undo() -> None:
            if old is None:
                self._stored.pop(key, None)
            else:
                self._stored[key] = old
        return undo

    def put(self, key: str, stored: Stored) -> None:
        """As read from the file (replay, snapshot)."""
        self._stored[key] = stored

    def forget(self, key: str) -> None:
        self._stored.pop(key, None)

    def expired(self, now: int) -> list[str]:
        return [k for k, s in self._stored.items() if not s.live(now)]

    def get(self, key: str) -> Stored | None:
        return self._stored.get(key)
