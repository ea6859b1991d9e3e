"""An equality index (`@hash`, `@unique`): value -> the ids holding it.

Keys are the values themselves for typed fields (one kind per field, so Python's equality is
FenecQL's `=`: 1 and 1.0 are one key, as are -0.0 and 0.0), and `values.hashable` for paths,
where kinds may mix (that tags bools, so `true` never meets `1`). Nulls are not indexed:
null is no value at all, and may repeat under `@unique`.
"""

from __future__ import annotations

from typing import Any

from .. import values as V


class HashIndex:
    __slots__ = ("map", "unique", "keyed")

    def __init__(self, unique: bool, keyed: bool) -> None:
        self.map: dict[Any, dict[int, None]] = {}
        self.unique = unique
        self.keyed = keyed

    def key(self, v: Any) -> Any:
        return V.hashable(v) if self.keyed else v  # add and remove write it out: one call fewer a write

    def add(self, rid: int, v: Any) -> None:
        if v is None:
            return
        k = V.hashable(v) if self.keyed else v
        ids = self.map.get(k)
        if ids is None:
            self.map[k] = {rid: None}
        else:
            ids[rid] = None

    def remove(self, rid: int, v: Any) -> None:
        if v is None:
            return
        k = V.hashable(v) if self.keyed else v
        ids = self.map.get(k)
        if ids is not None:
            ids.pop(rid, None)
            if not ids:
                del self.map[k]

    def lookup(self, v: Any) -> list[int]:
        if v is None:
            return []
        ids = self.map.get(self.key(v))
        return list(ids) if ids else []
